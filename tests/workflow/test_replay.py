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
from workflows.agent import AgentWorkflow
from workflows.model import AgentRunInput, AgentRunResult, ToolSpec

HISTORIES = sorted((Path(__file__).parent.parent / "histories").glob("**/*.json"))
"""Every release's recordings: the first release's directly in `histories/`, later ones in
`histories/<release>/`."""
EXPECTED = {
    "approve",
    "reject",
    "mixed",
    "cancel_waiting",
    "cancel_with_approval",
    "max_rounds",
    "seed_resume",
    "bad_inputs",
    "timeout_reject",
    "llm_error",
    "cancel_immediate",
    "timeout_cancel",
    "temporal_cancel",
    "session",
    "live_follower",
    "continue_as_new.0",
    "continue_as_new.1",
    # The second release: the hardened loop (`workflow.patched("hardened-loop-1")`) and the
    # one-object state handed over at continue-as-new.
    "0.2/approve",
    "0.2/mixed",
    "0.2/session",
    "0.2/live_follower",
    "0.2/continue_as_new.0",
    "0.2/continue_as_new.1",
    "0.2/reused_ids",
    "0.2/forged_publish",
    "0.2/cut_off_reply",
    "0.2/too_many_calls",
    "0.2/policy_rules",
    "0.2/policy_remember_edit",
    # This release: the one gate, small models' habits, the context window, notifications,
    # the audit (`workflow.patched("trust-and-time-1")`, and `worker_setup` at a run's start).
    "0.3/approve",
    "0.3/bad_inputs",
    "0.3/cancel_immediate",
    "0.3/cancel_waiting",
    "0.3/cancel_with_approval",
    "0.3/compaction",
    "0.3/continue_as_new.0",
    "0.3/continue_as_new.1",
    "0.3/cut_off_reply",
    "0.3/edit_denied",
    "0.3/forged_publish",
    "0.3/live_follower",
    "0.3/llm_error",
    "0.3/max_rounds",
    "0.3/mixed",
    "0.3/notifications",
    "0.3/policy_remember_edit",
    "0.3/policy_rules",
    "0.3/reject",
    "0.3/repeats",
    "0.3/reused_ids",
    "0.3/seed_denied",
    "0.3/seed_resume",
    "0.3/session",
    "0.3/temporal_cancel",
    "0.3/text_call",
    "0.3/timeout_cancel",
    "0.3/timeout_reject",
    "0.3/too_many_calls",
    # The fourth release: authority only from the worker, a session survives a bad turn, compaction
    # that makes room (`workflow.patched("sound-seams-1")`).
    "0.4/approve",
    "0.4/bad_inputs",
    "0.4/bad_turn",
    "0.4/cancel_immediate",
    "0.4/cancel_waiting",
    "0.4/cancel_with_approval",
    "0.4/compaction",
    "0.4/continue_as_new.0",
    "0.4/continue_as_new.1",
    "0.4/cut_off_reply",
    "0.4/edit_denied",
    "0.4/empty_reply",
    "0.4/forged_publish",
    "0.4/live_follower",
    "0.4/llm_error",
    "0.4/max_rounds",
    "0.4/mixed",
    "0.4/notifications",
    "0.4/policy_remember_edit",
    "0.4/policy_rules",
    "0.4/refused_rule",
    "0.4/reject",
    "0.4/rejected_again",
    "0.4/repeats",
    "0.4/reused_ids",
    "0.4/seed_denied",
    "0.4/seed_resume",
    "0.4/session",
    "0.4/temporal_cancel",
    "0.4/text_call",
    "0.4/timeout_cancel",
    "0.4/timeout_reject",
    "0.4/too_many_calls",
    "0.5/approve",
    "0.5/bad_inputs",
    "0.5/bad_turn",
    "0.5/budget",
    "0.5/budget_stop",
    "0.5/cancel_immediate",
    "0.5/cancel_waiting",
    "0.5/cancel_with_approval",
    "0.5/compaction",
    "0.5/continue_as_new.0",
    "0.5/continue_as_new.1",
    "0.5/cut_off_reply",
    "0.5/edit_denied",
    "0.5/empty_reply",
    "0.5/escalation",
    "0.5/expire_reask",
    "0.5/forged_publish",
    "0.5/live_follower",
    "0.5/llm_error",
    "0.5/max_rounds",
    "0.5/mixed",
    "0.5/notifications",
    "0.5/policy_remember_edit",
    "0.5/policy_rules",
    "0.5/question",
    "0.5/quorum",
    "0.5/refused_rule",
    "0.5/reject",
    "0.5/rejected_again",
    "0.5/repeats",
    "0.5/reused_ids",
    "0.5/seed_denied",
    "0.5/seed_resume",
    "0.5/session",
    "0.5/temporal_cancel",
    "0.5/text_call",
    "0.5/timeout_cancel",
    "0.5/timeout_reject",
    "0.5/too_many_calls",
    "0.6/approve",
    "0.6/bad_inputs",
    "0.6/bad_turn",
    "0.6/budget",
    "0.6/budget_stop",
    "0.6/cancel_immediate",
    "0.6/cancel_waiting",
    "0.6/cancel_with_approval",
    "0.6/compaction",
    "0.6/continue_as_new.0",
    "0.6/continue_as_new.1",
    "0.6/cut_off_reply",
    "0.6/edit_denied",
    "0.6/empty_reply",
    "0.6/escalation",
    "0.6/escalation_enforced",
    "0.6/expire_reask",
    "0.6/forged_publish",
    "0.6/live_follower",
    "0.6/llm_error",
    "0.6/max_rounds",
    "0.6/mixed",
    "0.6/notifications",
    "0.6/policy_remember_edit",
    "0.6/policy_rules",
    "0.6/question",
    "0.6/quorum",
    "0.6/refused_rule",
    "0.6/reject",
    "0.6/rejected_again",
    "0.6/repeats",
    "0.6/reused_ids",
    "0.6/seed_denied",
    "0.6/seed_resume",
    "0.6/session",
    "0.6/temporal_cancel",
    "0.6/text_call",
    "0.6/timeout_cancel",
    "0.6/timeout_reject",
    "0.6/too_many_calls",
    "0.7/approve",
    "0.7/bad_inputs",
    "0.7/bad_turn",
    "0.7/budget",
    "0.7/budget_stop",
    "0.7/cancel_immediate",
    "0.7/cancel_waiting",
    "0.7/cancel_with_approval",
    "0.7/compaction",
    "0.7/continue_as_new.0",
    "0.7/continue_as_new.1",
    "0.7/cut_off_reply",
    "0.7/edit_denied",
    "0.7/empty_reply",
    "0.7/escalation",
    "0.7/escalation_enforced",
    "0.7/expire_reask",
    "0.7/forged_publish",
    "0.7/live_follower",
    "0.7/llm_error",
    "0.7/max_rounds",
    "0.7/mixed",
    "0.7/notifications",
    "0.7/policy_remember_edit",
    "0.7/policy_rules",
    "0.7/question",
    "0.7/quorum",
    "0.7/refused_rule",
    "0.7/reject",
    "0.7/rejected_again",
    "0.7/repeats",
    "0.7/reused_ids",
    "0.7/seed_denied",
    "0.7/seed_resume",
    "0.7/session",
    "0.7/temporal_cancel",
    "0.7/text_call",
    "0.7/timeout_cancel",
    "0.7/timeout_reject",
    "0.7/too_many_calls",
}


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())


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


@pytest.mark.parametrize("path", HISTORIES, ids=[_name(p) for p in HISTORIES])
async def test_replay_on_a_worker_that_has_a_key_since(path):
    # A run started in plaintext is not an encrypted run: its plaintext answers were taken and
    # must be taken again when a worker with a key replays it (they were refused, and the replay
    # failed with a nondeterminism error: no command for the events the answers led to).
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=data_converter(KEYED))
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"


@workflow.defn(name="AgentWorkflow")
class ReorderedAgentWorkflow:
    """A deliberately changed copy: it asks the model before listing the tools."""

    @workflow.run
    async def run(self, input: AgentRunInput) -> AgentRunResult:
        await workflow.execute_activity(
            "call_llm", "x", start_to_close_timeout=timedelta(seconds=10)
        )
        await workflow.execute_activity(
            "list_tools", result_type=list[ToolSpec], start_to_close_timeout=timedelta(seconds=10)
        )
        return AgentRunResult(messages=input.messages, finish_reason="stop", rounds=0)


@pytest.mark.parametrize("name", ["approve", "mixed"])
async def test_replay_catches_nondeterminism(name):
    path = Path(__file__).parent.parent / "histories" / f"{name}.json"
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
