"""Replay every recorded history (tests/histories/**/*.json) against the current AgentWorkflow:
a change that breaks determinism for runs already in flight fails here. Recordings are never
rewritten: an intended change to the workflow's commands goes behind `workflow.patched`, and new
behaviour is recorded as a new scenario (`python -m tests.record_histories`)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from activities.sandbox_runner import workflow_runner
from runtime.connect import data_converter
from workflows.model import AgentRunInput, AgentRunResult, WorkerSetup
from workflows.run.agent import AgentWorkflow

HISTORIES = sorted((Path(__file__).parent.parent / "histories").glob("*/*.json"))
"""Every release's recordings, in `histories/<release>/`: 0.7's (the loop 1.0 carries, cut from
the 0.x releases) and each 1.x release's."""
SCENARIOS = {
    "approve",
    "bad_inputs",
    "bad_turn",
    "budget",
    "budget_stop",
    "cancel_immediate",
    "cancel_waiting",
    "cancel_with_approval",
    "compaction",
    "continue_as_new.0",
    "continue_as_new.1",
    "cut_off_reply",
    "edit_denied",
    "empty_reply",
    "escalation",
    "escalation_enforced",
    "expire_reask",
    "forged_publish",
    "live_follower",
    "llm_error",
    "max_rounds",
    "mixed",
    "notifications",
    "policy_remember_edit",
    "policy_rules",
    "question",
    "quorum",
    "refused_rule",
    "reject",
    "rejected_again",
    "repeats",
    "reused_ids",
    "seed_denied",
    "seed_resume",
    "session",
    "temporal_cancel",
    "text_call",
    "timeout_cancel",
    "timeout_reject",
    "too_many_calls",
}
"""The scenarios every release records (`python -m tests.record_histories`)."""
SINCE_1_0 = {
    "delegation",
    "delegation.sub-agent.a",
    "delegation.sub-agent.b",
    "forked",
    "sub_agent_approval",
    "sub_agent_approval.sub-agent.call_1",
    "sub_agent_cancel",
    "sub_agent_cancel.sub-agent.a",
    "sub_agent_cancel.sub-agent.b",
}
"""1.0's new behaviour: a run that delegates (and each sub-agent's own history), a forked run."""
EXPECTED = {f"0.7/{name}" for name in SCENARIOS} | {f"1.0/{name}" for name in SCENARIOS | SINCE_1_0}
SAMPLE = [
    p
    for p in HISTORIES
    if (
        p.stem in {"approve", "bad_inputs", "quorum", "question", "session", "continue_as_new.0"}
        and p.parent.name == "0.7"
    )
    or p.stem in {"delegation", "forked"}
]
"""One recording of each kind of run, for the replays that vary the worker (a key since, the
tracing interceptor): every recording replays plainly in `test_replay` and in the product's
sandbox; these show the variants change nothing, without replaying everything five times."""


def load(path: Path) -> WorkflowHistory:
    """The recording under the workflow id it ran with (a sub-agent's id is its parent's and the
    call's, so a run that delegates replays only under its own); 0.7's recordings name none."""
    text = path.read_text()
    started = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]
    return WorkflowHistory.from_json(started.get("workflowId", f"replay-{path.stem}"), text)


def test_all_scenarios_are_recorded():
    assert {_name(p) for p in HISTORIES} >= EXPECTED


def _name(path: Path) -> str:
    return path.relative_to(Path(__file__).parent.parent / "histories").with_suffix("").as_posix()


@pytest.mark.parametrize("path", HISTORIES, ids=[_name(p) for p in HISTORIES])
async def test_replay(path):
    history = load(path)
    assert len(json.loads(path.read_text())["events"]) > 5
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=data_converter())
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"


KEYED = {"AGENT_ENCRYPTION_KEY": base64.b64encode(bytes(range(32))).decode()}
"""A key the recordings never saw: a deployment that turned encryption on with runs open."""


@pytest.mark.parametrize("path", SAMPLE, ids=[_name(p) for p in SAMPLE])
async def test_replay_on_a_worker_that_has_a_key_since(path):
    # A run started in plaintext is not an encrypted run: its plaintext answers were taken and
    # must be taken again when a worker with a key replays it (they were refused, and the replay
    # failed with a nondeterminism error: no command for the events the answers led to).
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=data_converter(KEYED))
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"


@workflow.defn(name="AgentWorkflow")
class ReorderedAgentWorkflow:
    """A deliberately changed copy: it asks the model before reading the worker's setup."""

    @workflow.run
    async def run(self, input: AgentRunInput) -> AgentRunResult:
        await workflow.execute_activity(
            "call_llm", "x", start_to_close_timeout=timedelta(seconds=10)
        )
        await workflow.execute_local_activity(
            "worker_setup", result_type=WorkerSetup, start_to_close_timeout=timedelta(seconds=10)
        )
        return AgentRunResult(messages=input.messages, finish_reason="stop", rounds=0)


@pytest.mark.parametrize("name", ["approve", "mixed"])
async def test_replay_catches_nondeterminism(name):
    path = Path(__file__).parent.parent / "histories" / "0.7" / f"{name}.json"
    replayer = Replayer(workflows=[ReorderedAgentWorkflow], data_converter=data_converter())
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
    assert isinstance(result.replay_failure, workflow.NondeterminismError), result.replay_failure
    with pytest.raises(workflow.NondeterminismError):
        await replayer.replay_workflow(load(path))


async def test_replay_in_the_products_sandbox():
    # Workers run AgentWorkflow with `workflows/` passed through the sandbox (not imported again
    # per run): every recorded history replays there too (one replayer, all histories).
    async def histories() -> AsyncIterator[WorkflowHistory]:
        for path in HISTORIES:
            yield load(path)

    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=data_converter(),
        workflow_runner=workflow_runner(),
    )
    results = await replayer.replay_workflows(histories(), raise_on_replay_failure=False)
    assert dict(results.replay_failures) == {}
