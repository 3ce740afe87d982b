"""`starter fork` as a real process against the session dev server, with an in-process production
worker (the scripted model): a fork starts from the original's record up to a round, with its
options and its own rules but none of its answers (a call a person approved, and remembered,
asks again), says where it comes from, and leaves the original's history as it was."""

from __future__ import annotations

import json
from typing import Any

from starter.handle import AgentHandle
from tests.cli.test_starter import Agent, agent, new_id
from tests.helpers import events, history_length, messages, status, wait_for_phase
from workflows.model import ToolApprovalResponse

__all__ = ["agent"]  # the fixture


async def approved_and_remembered(agent: Agent) -> str:
    """A finished run whose delete_path a person approved with `remember`: rounds 0 (list_dir,
    allowed by the run's own rule), 1 (delete_path, approved by ann) and 2 (the answer)."""
    workflow_id = new_id()
    started = await agent.cli(
        "run", "--no-follow", "--id", workflow_id, "--max-rounds", "6", "--allow", "list_dir",
        "Please delete the logs folder",
    )  # fmt: skip
    assert started.code == 0, started
    handle = agent.handle(workflow_id)
    waiting = await wait_for_phase(handle, "awaiting_approval")
    assert [c.name for c in waiting.pending_approvals] == ["delete_path"]
    await AgentHandle(agent.client, workflow_id).answer(
        ToolApprovalResponse(call_id="call_2", approved=True, approver="ann", remember=True)
    )
    assert (await handle.result()).finish_reason == "stop"
    return workflow_id


async def test_a_fork_asks_again_for_a_call_a_person_approved_and_remembered(agent: Agent) -> None:
    original = await approved_and_remembered(agent)
    before = await history_length(agent.client, original)
    first_run = (await status(agent.handle(original))).run_id
    fork_id = new_id()
    result = await agent.cli("fork", original, "--round", "0", "--id", fork_id, "--json")
    assert result.code == 0, result
    printed = json.loads(result.stdout.splitlines()[-1])
    assert printed["workflow_id"] == fork_id
    assert printed["forked_from"] == {"workflow_id": original, "run_id": first_run, "round": 0}
    fork = agent.handle(fork_id)
    waiting = await wait_for_phase(fork, "awaiting_approval")
    assert [(c.name, c.arguments) for c in waiting.pending_approvals] == [
        ("delete_path", '{"path": "logs"}')
    ]
    assert waiting.forked_from is not None
    assert waiting.forked_from.model_dump() == printed["forked_from"]
    evs = await events(fork)
    assert evs[0].type == "forked" and evs[0].model_dump()["forked_from"] == printed["forked_from"]
    assert [e.type for e in evs if e.type == "approval"] == []  # nobody's answer came along
    rules = await AgentHandle(agent.client, fork_id).policy()
    assert [(r.tool, r.decision, r.origin) for r in rules.rules] == [("list_dir", "allow", "run")]
    record = await messages(fork)
    assert [m.role for m in record] == ["user", "assistant", "tool", "assistant"]
    assert (await fork.describe()).raw_description.workflow_execution_info.history_length > 0
    options = (await fork.fetch_history()).events[0]
    assert options.workflow_execution_started_event_attributes.input.payloads
    assert await history_length(agent.client, original) == before
    assert (await status(agent.handle(original))).phase == "finished"
    await AgentHandle(agent.client, fork_id).raw.terminate("test over")


async def test_the_default_is_the_whole_record_and_a_message_follows_it(agent: Agent) -> None:
    original = await approved_and_remembered(agent)
    fork_id = new_id()
    result = await agent.cli("fork", original, "--id", fork_id, "--say", "list")
    assert result.code == 0, result
    assert f"started {fork_id}" in result.stdout
    assert f"forked from {original} (run " in result.stdout and "after round 2" in result.stdout
    fork = agent.handle(fork_id)
    assert (await fork.result()).finish_reason == "stop"
    record = await messages(fork)
    original_record = await messages(agent.handle(original))
    assert record[: len(original_record)] == original_record
    assert record[len(original_record)].role == "user"
    assert record[len(original_record)].content == "list"
    listed = record[len(original_record) + 1].tool_calls or []
    assert [c.name for c in listed] == ["list_dir"]
    st = await status(fork)
    assert st.forked_from is not None and st.forked_from.round == 2


async def test_a_round_the_run_does_not_have_is_refused_with_the_rounds_it_has(
    agent: Agent,
) -> None:
    original = await approved_and_remembered(agent)
    result = await agent.cli("fork", original, "--round", "7")
    assert result.code == 2, result
    assert f"run '{original}' has rounds 0 to 2; no round 7" in result.stderr
    missing = await agent.cli("fork", "no-such-run-" + new_id())
    assert missing.code == 1 and "no workflow with id" in missing.stderr


async def test_a_fork_of_a_waiting_run_waits_again_and_the_original_is_untouched(
    agent: Agent,
) -> None:
    original = new_id()
    started = await agent.cli(
        "run", "--no-follow", "--id", original, "Please delete the logs folder"
    )
    assert started.code == 0, started
    handle = agent.handle(original)
    await wait_for_phase(handle, "awaiting_approval")
    before = await history_length(agent.client, original)
    refused = await agent.cli("fork", original, "--say", "hello")
    assert refused.code == 2, refused
    assert "ends with calls that have no result (call_2)" in refused.stderr
    fork_id = new_id()
    result = await agent.cli("fork", original, "--id", fork_id, "--json")
    assert result.code == 0, result
    printed: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    assert printed["waiting"] == ["call_2"] and printed["forked_from"]["round"] == 1
    fork = agent.handle(fork_id)
    waiting = await wait_for_phase(fork, "awaiting_approval")
    assert [c.id for c in waiting.pending_approvals] == ["call_2"]
    assert await history_length(agent.client, original) == before
    assert (await status(handle)).phase == "awaiting_approval"
    for workflow_id in (original, fork_id):
        await AgentHandle(agent.client, workflow_id).raw.terminate("test over")
