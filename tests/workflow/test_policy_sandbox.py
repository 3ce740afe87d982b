"""The approval policy inside a real workflow sandbox, on the dev server: the pure module is
re-imported there and decides as it does outside, and the worker's rules reach a workflow
through an activity and the real data converter, as they do in `worker_setup`."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.worker import Worker

from activities.policy_file import PolicyActivities
from workflows.contract.rules import ApprovalPolicy, PolicyView, WorkerPolicy
from workflows.gate.policy import effective_rules, evaluate, policy_view
from workflows.gate.remember import remember, remembered_rule
from workflows.model import ToolApprovalResponse


class ProbeInput(BaseModel):
    policy: ApprovalPolicy
    calls: list[tuple[str, str]]
    """(tool, arguments as JSON text)"""
    remember_tool: str


class ProbeResult(BaseModel):
    worker: WorkerPolicy
    decisions: list[tuple[str, int | None, str | None]]
    after_remember: list[tuple[str, int | None, str | None]]
    view: PolicyView


@workflow.defn(name="PolicyProbe")
class PolicyProbe:
    """Gets the worker's rules by activity, then decides each call before and after a
    remembered rejection, all inside the sandbox."""

    @workflow.run
    async def run(self, probe: ProbeInput) -> ProbeResult:
        worker = await workflow.execute_activity(
            "probe_worker_policy",
            result_type=WorkerPolicy,
            start_to_close_timeout=timedelta(seconds=30),
        )
        run_rules = list(probe.policy.rules)

        def decide() -> list[tuple[str, int | None, str | None]]:
            listed = effective_rules(worker.enforced, run_rules, worker.defaults)
            out: list[tuple[str, int | None, str | None]] = []
            for tool, arguments in probe.calls:
                verdict = evaluate(listed, tool, arguments, requires_approval=tool != "list_dir")
                out.append((verdict.decision, verdict.rule, verdict.reason))
            return out

        before = decide()
        answer = ToolApprovalResponse(call_id="c", approved=False, reason="no", remember=True)
        run_rules = remember(run_rules, remembered_rule(probe.remember_tool, answer))
        return ProbeResult(
            worker=worker,
            decisions=before,
            after_remember=decide(),
            view=policy_view(worker.enforced, run_rules, worker.defaults),
        )


def _served(policy: PolicyActivities) -> Callable[[], Awaitable[WorkerPolicy]]:
    @activity.defn(name="probe_worker_policy")
    async def probe_worker_policy() -> WorkerPolicy:
        return policy.rules

    return probe_worker_policy


async def test_the_policy_decides_inside_the_workflow_sandbox(client):
    worker_rules = WorkerPolicy.model_validate(
        {
            "enforced": [{"tool": "delete_path", "decision": "ask"}],
            "defaults": [{"tool": "*", "decision": "deny", "reason": "not by default"}],
        }
    )
    probe = ProbeInput(
        policy=ApprovalPolicy.model_validate(
            {
                "rules": [
                    {"tool": "run_command", "when": {"command": "echo *"}, "decision": "allow"},
                    {"tool": "delete_path", "decision": "allow"},
                ]
            }
        ),
        calls=[
            ("run_command", '{"command": "echo hi"}'),
            ("run_command", '{"command": "echo hi; rm -rf ."}'),
            ("delete_path", '{"path": "logs"}'),
            ("list_dir", '{"path": "."}'),
        ],
        remember_tool="run_command",
    )
    queue = f"test-policy-{uuid.uuid4()}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[PolicyProbe],
        activities=[_served(PolicyActivities(worker_rules))],
    ):
        result = await client.execute_workflow(
            PolicyProbe.run,
            probe,
            id=f"policy-probe-{uuid.uuid4()}",
            task_queue=queue,
            result_type=ProbeResult,
        )
    assert result.worker == worker_rules
    assert result.decisions == [
        ("allow", 1, None),  # the run's echo rule (after the one enforced rule)
        ("deny", 3, "not by default"),  # shell safety: the default rule decides
        ("ask", 0, None),  # enforced beats the run's allow
        ("deny", 3, "not by default"),
    ]
    assert result.after_remember == [
        ("deny", 1, "no"),  # the remembered rejection comes first among the run's rules
        ("deny", 1, "no"),
        ("ask", 0, None),
        ("deny", 3, "not by default"),
    ]
    assert [(e.tool, e.decision, e.origin) for e in result.view.rules] == [
        ("delete_path", "ask", "enforced"),
        ("run_command", "deny", "run"),
        ("delete_path", "allow", "run"),
        ("*", "deny", "default"),
    ]
