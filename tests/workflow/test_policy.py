"""Approval policy in the workflow, on the dev server with the model and tools as stand-ins:
rules decide calls without asking, people add to them as they answer (remember), edit what runs,
and replace the run's rules while it waits."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import events, of_type, start_run, status, wait_for_phase, wait_until, worker_for
from workflows.contract.rules import ApprovalPolicy, PolicyRule, PolicyView, WorkerPolicy
from workflows.model import AgentRunInput, AgentRunOptions


def policy(*rules: dict[str, Any]) -> ApprovalPolicy:
    return ApprovalPolicy(rules=[PolicyRule.model_validate(r) for r in rules])


def run_input(*rules: dict[str, Any], **options: Any) -> AgentRunInput:
    return AgentRunInput.from_prompt(
        "go", AgentRunOptions(approval_policy=policy(*rules), **options)
    )


def approvals(log: list[Any]) -> list[tuple[str, bool, str, int | None]]:
    return [(e.call_id, e.approved, e.source, e.rule) for e in of_type(log, "approval")]


async def test_rules_allow_deny_and_ask(client, task_queue):
    fake = FakeAgentActivities(
        replies=[
            calls(
                ("c1", "run_command", '{"command": "git status --short"}'),
                ("c2", "run_command", '{"command": "git status; rm -rf ."}'),
                ("c3", "delete_path", '{"path": "logs"}'),
                ("c4", "list_dir", '{"path": "."}'),
                ("c5", "read_file", '{"path": "notes.txt"}'),
            ),
            text("done"),
        ]
    )
    rules: list[dict[str, Any]] = [
        {"tool": "run_command", "when": {"command": "git status*"}, "decision": "allow"},
        {"tool": "delete_path", "decision": "deny", "reason": "nothing is deleted"},
        {"tool": "list_dir", "decision": "ask"},
        {"tool": "read_file", "decision": "deny"},
    ]
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input(*rules))
        waiting = await wait_for_phase(handle, "awaiting_approval")
        # c2 chains a second command: the allow pattern does not match it, so a person decides.
        assert [c.id for c in waiting.pending_approvals] == ["c2", "c4"]
        assert [(d.call_id, d.source, d.rule) for d in waiting.decided] == [
            ("c1", "policy", 0),
            ("c3", "policy", 1),
            ("c5", "policy", 3),
        ]
        listed = await starter_pending(client, task_queue)
        assert f"{handle.id} (round 0" in listed
        assert "c1 already allowed by rule 0" in listed
        assert "c3 already denied by rule 1" in listed
        await handle.signal("tool_approval", {"call_id": "c2", "approved": False})
        await handle.signal("tool_approval", {"call_id": "c4", "approved": True})
        result = await handle.result()
        log = await events(handle)
    assert approvals(log) == [
        ("c1", True, "policy", 0),
        ("c3", False, "policy", 1),
        ("c5", False, "policy", 3),
        ("c2", False, "person", None),
        ("c4", True, "person", None),
    ]
    needs = {e.call_id: e.requires_approval for e in of_type(log, "tool_call")}
    assert needs == {"c1": False, "c2": True, "c3": False, "c4": True, "c5": False}
    assert sorted(r.call_id for r in fake.tool_requests) == ["c1", "c4"]
    tools = {m.tool_call_id: m.content for m in result.messages if m.role == "tool"}
    assert tools["c3"] == "Rejected: nothing is deleted"
    assert tools["c5"] == "Rejected: Denied by policy"


async def test_enforced_beats_run_beats_default(client, task_queue):
    fake = FakeAgentActivities(
        replies=[
            calls(
                ("c1", "run_command", '{"command": "ls"}'),
                ("c2", "delete_path", '{"path": "x"}'),
                ("c3", "list_dir", '{"path": "."}'),
            ),
            text("done"),
        ],
        worker_rules=WorkerPolicy(
            enforced=[PolicyRule(tool="delete_path", decision="deny", reason="enforced")],
            defaults=[PolicyRule(tool="*", decision="allow")],
        ),
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(
            client, task_queue, run_input({"tool": "delete_path", "decision": "allow"})
        )
        result = await handle.result()
        log = await events(handle)
        view = await handle.query("policy", result_type=PolicyView)
    assert [(r.origin, r.tool, r.decision) for r in view.rules] == [
        ("enforced", "delete_path", "deny"),
        ("run", "delete_path", "allow"),
        ("default", "*", "allow"),
    ]
    assert approvals(log) == [
        ("c1", True, "policy", 2),
        ("c2", False, "policy", 0),
        ("c3", True, "policy", 2),
    ]
    assert sorted(r.call_id for r in fake.tool_requests) == ["c1", "c3"]
    assert result.finish_reason == "stop"


async def test_remember_decides_later_rounds_turns_and_generations(client, task_queue):
    replies = [
        calls(("a1", "run_command", '{"command": "echo 1"}')),
        calls(("a2", "run_command", '{"command": "echo 2"}')),
        text("first turn done"),
        calls(
            ("a3", "run_command", '{"command": "echo 3"}'), ("d1", "delete_path", '{"path": "x"}')
        ),
        text("second turn done"),
    ]
    fake = FakeAgentActivities(replies=replies)
    options = AgentRunOptions(keep_alive=True, max_history_events=100)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go", options))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal("tool_approval", {"call_id": "a1", "approved": True, "remember": True})
        await wait_for_phase(handle, "waiting_for_message")  # a2 ran without asking
        for i in range(40):  # grow the history: continue as new between the turns
            await handle.signal("tool_approval", {"call_id": f"nope-{i}", "approved": True})
        await wait_until(lambda: _generations(client, handle.id, 2), timeout=60)
        await handle.signal("send_message", {"content": "again"})
        waiting = await wait_for_phase(handle, "awaiting_approval")
        assert [c.id for c in waiting.pending_approvals] == ["d1"]  # a3 allowed, remembered
        await handle.signal(
            "tool_approval",
            {"call_id": "d1", "approved": False, "reason": "never", "remember": True},
        )
        await wait_for_phase(handle, "waiting_for_message")
        view = await handle.query("policy", result_type=PolicyView)
        await handle.signal("cancel")
        await handle.result()
        log = await events(handle)
    assert [r.call_id for r in fake.tool_requests] == ["a1", "a2", "a3"]
    assert [(r.tool, r.decision, r.reason) for r in view.rules] == [
        ("delete_path", "deny", "never"),
        ("run_command", "allow", None),
    ]
    decided = [(c, s) for c, _, s, _ in approvals(log)]
    assert ("a2", "policy") in decided and ("a3", "policy") in decided


async def test_remember_decides_a_waiting_call_of_the_same_batch(client, task_queue):
    fake = FakeAgentActivities(
        replies=[
            calls(
                ("c1", "run_command", '{"command": "echo 1"}'),
                ("c2", "run_command", '{"command": "echo 2"}'),
            ),
            text("done"),
        ]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go"))
        waiting = await wait_for_phase(handle, "awaiting_approval")
        assert [c.id for c in waiting.pending_approvals] == ["c1", "c2"]
        left = await handle.execute_update(
            "submit_approval", {"call_id": "c1", "approved": True, "remember": True}
        )
        result = await handle.result()
        log = await events(handle)
    assert left == []
    assert approvals(log) == [("c1", True, "person", None), ("c2", True, "policy", 0)]
    assert sorted(r.call_id for r in fake.tool_requests) == ["c1", "c2"]
    assert result.finish_reason == "stop"


async def test_edited_arguments_run_and_the_conversation_says_so(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("c1", "run_command", '{"command": "rm -rf /"}')), text("done")]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go"))
        await wait_for_phase(handle, "awaiting_approval")
        # Bad edits: refused by the update, a warning for the signal; the call still waits.
        for bad in ('{"command": ', "[1, 2]"):
            with pytest.raises(WorkflowUpdateFailedError):
                await handle.execute_update(
                    "submit_approval", {"call_id": "c1", "approved": True, "arguments": bad}
                )
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                "submit_approval",
                {"call_id": "c1", "approved": False, "arguments": {"command": "ls"}},
            )
        assert "approved: true" in str(refused.value.cause)
        await handle.signal(
            "tool_approval", {"call_id": "c1", "approved": True, "arguments": "not json"}
        )
        await wait_until(lambda: _warned(handle))
        assert [c.id for c in (await status(handle)).pending_approvals] == ["c1"]
        await handle.signal(
            "tool_approval",
            {"call_id": "c1", "approved": True, "arguments": {"command": "ls -la"}},
        )
        result = await handle.result()
        log = await events(handle)
    assert [r.arguments for r in fake.tool_requests] == [{"command": "ls -la"}]
    assistant = next(m for m in result.messages if m.tool_calls)
    assert assistant.tool_calls is not None
    assert assistant.tool_calls[0].arguments == '{"command": "ls -la"}'
    approval = of_type(log, "approval")[0]
    assert approval.arguments == '{"command": "ls -la"}'
    assert approval.original_arguments == '{"command": "rm -rf /"}'


async def test_set_approval_policy_decides_a_waiting_call_and_refuses_bad_rules(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("c1", "run_command", '{"command": "make test"}')), text("done")]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go"))
        await wait_for_phase(handle, "awaiting_approval")
        for bad in (
            {"rules": [{"tool": "x", "decision": "maybe"}]},
            {"rules": [{"decision": "allow"}]},
        ):
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update("set_approval_policy", bad)
            assert "InvalidApprovalPolicy" in repr(refused.value.cause)
        view = await handle.execute_update(
            "set_approval_policy",
            {
                "rules": [
                    {"tool": "run_command", "when": {"command": "make *"}, "decision": "allow"}
                ]
            },
            result_type=PolicyView,
        )
        result = await handle.result()
        log = await events(handle)
    assert [(r.origin, r.decision) for r in view.rules] == [("run", "allow")]
    assert approvals(log) == [("c1", True, "policy", 0)]
    assert result.finish_reason == "stop"


async def test_invalid_rules_at_start_fail_the_run(client, task_queue):
    fake = FakeAgentActivities()
    bad = {
        "messages": [{"role": "user", "content": "go"}],
        "options": {"approval_policy": {"rules": [{"tool": "x", "decision": "perhaps"}]}},
    }
    async with worker_for(client, task_queue, fake):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(
                "AgentWorkflow", bad, id=f"bad-rules-{task_queue}", task_queue=task_queue
            )
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidAgentRunInput"
    assert "approval_policy" in cause.message
    assert fake.llm_requests == []


async def starter_pending(client: Any, task_queue: str) -> str:
    """`python -m starter pending` as a process against the session dev server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "AGENT_"))}
    env.update(
        TEMPORAL_ADDRESS=client.service_client.config.target_host, AGENT_TASK_QUEUE=task_queue
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "starter",
        "pending",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def _warned(handle: Any) -> bool:
    return bool(of_type(await events(handle), "warning"))


async def _generations(client: Any, workflow_id: str, count: int) -> bool:
    runs = [w async for w in client.list_workflows(f'WorkflowId="{workflow_id}"')]
    return len(runs) >= count
