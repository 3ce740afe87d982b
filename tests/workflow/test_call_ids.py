"""Call ids are unique within a run, so an approved command always runs, and an answer is for
one call only.

Models reuse ids (`call_0` every round) and some send none; a workflow id can be reused. These
tests go through the production worker (`worker.run_worker`): the real `call_llm` over httpx
against the OpenAI-compatible server on 127.0.0.1, and the real `execute_tool` with its
at-most-once records, in a real workspace.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from runtime.settings import Settings
from tests.fake_openai import FakeOpenAI, FakeOpenAIServer, text, tool_calls
from tests.helpers import events, messages, of_type, start_run, wait_for_phase, wait_until
from worker import run_worker
from workflows.conversation.record import invariant_violations
from workflows.model import AgentRunInput, AgentRunOptions


@pytest.fixture
async def served(
    client: Client, task_queue: str, tmp_path: Path
) -> AsyncIterator[tuple[FakeOpenAIServer, Path]]:
    """The fake model server and a production worker pointed at it; yields (server, workspace)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with FakeOpenAI() as fake:
        settings = Settings(
            llm_base_url=fake.base_url,
            llm_api_key="sk-test",
            llm_model="fake-model",
            workspace=workspace,
            state_dir=tmp_path / "state",
        )
        stop = asyncio.Event()
        worker = asyncio.create_task(run_worker(client, settings, queue=task_queue, stop=stop))
        try:
            yield fake, workspace
        finally:
            stop.set()
            await worker


async def _approve_when_waiting(handle, call_id: str) -> None:
    status = await wait_for_phase(handle, "awaiting_approval")
    assert [c.id for c in status.pending_approvals] == [call_id]
    await handle.signal("tool_approval", {"call_id": call_id, "approved": True})


async def test_a_reused_call_id_is_renamed_and_both_commands_run(client, task_queue, served):
    fake, workspace = served
    fake.enqueue(
        tool_calls(("call_0", "run_command", '{"command": "echo one > one.txt"}')),
        tool_calls(("call_0", "run_command", '{"command": "echo two > two.txt"}')),
        text("Both done."),
    )
    handle = await start_run(client, task_queue, AgentRunInput.from_prompt("write two files"))
    await _approve_when_waiting(handle, "call_0")
    # The second reply reuses `call_0`: it is renamed before anything sees it.
    await _approve_when_waiting(handle, "call_0#2")
    result = await handle.result()
    assert result.finish_reason == "stop"
    assert (workspace / "one.txt").read_text() == "one\n"
    assert (workspace / "two.txt").read_text() == "two\n"
    tools = [m for m in result.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tools] == ["call_0", "call_0#2"]
    assert all('"exit_code": 0' in m.content for m in tools), tools
    assert invariant_violations(result.messages) == []
    # Every request the model got used the renamed id for the second call.
    last = fake.requests[-1]["messages"]
    sent_ids = [c["id"] for m in last if m.get("tool_calls") for c in m["tool_calls"]]
    assert sent_ids == ["call_0", "call_0#2"]


async def test_a_stale_answer_does_not_approve_a_later_call(client, task_queue, served):
    fake, workspace = served
    fake.enqueue(
        tool_calls(("call_0", "run_command", '{"command": "echo one > one.txt"}')),
        tool_calls(("call_0", "run_command", '{"command": "echo two > two.txt"}')),
        text("Done."),
    )
    handle = await start_run(client, task_queue, AgentRunInput.from_prompt("write two files"))
    await _approve_when_waiting(handle, "call_0")
    status = await wait_for_phase(handle, "awaiting_approval")
    assert [c.id for c in status.pending_approvals] == ["call_0#2"]
    before = len(await events(handle))
    # A double click, a retried script, a stale page: round 0's answer again.
    await handle.signal("tool_approval", {"call_id": "call_0", "approved": True})

    async def warned() -> list[Any]:
        return of_type(await events(handle, before - 1), "warning")

    warnings = await wait_until(warned)
    assert "call 'call_0' was already answered" in warnings[0].message
    status = await wait_for_phase(handle, "awaiting_approval")
    assert [c.id for c in status.pending_approvals] == ["call_0#2"]
    assert not (workspace / "two.txt").exists()
    await handle.signal("tool_approval", {"call_id": "call_0#2", "approved": False})
    result = await handle.result()
    assert not (workspace / "two.txt").exists()
    assert [m.content for m in result.messages if m.role == "tool"][-1] == "Rejected: User denied"


async def test_id_less_calls_in_every_session_turn_all_run(client, task_queue, served):
    fake, workspace = served
    fake.enqueue(
        tool_calls(("", "run_command", '{"command": "echo first > first.txt"}')),
        text("First done."),
        tool_calls(("", "run_command", '{"command": "echo second > second.txt"}')),
        text("Second done."),
    )
    options = AgentRunOptions(keep_alive=True)
    handle = await start_run(client, task_queue, AgentRunInput.from_prompt("turn one", options))
    await _approve_when_waiting(handle, "call_r0_0")
    await wait_for_phase(handle, "waiting_for_message")
    await handle.signal("send_message", {"content": "turn two"})
    # The new turn starts again at round 0: the generated id would repeat; it is renamed.
    await _approve_when_waiting(handle, "call_r0_0#2")
    await wait_for_phase(handle, "waiting_for_message")
    await handle.signal("cancel")
    result = await handle.result()
    assert (workspace / "first.txt").read_text() == "first\n"
    assert (workspace / "second.txt").read_text() == "second\n"
    tools = [m for m in result.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tools] == ["call_r0_0", "call_r0_0#2"]
    assert all('"exit_code": 0' in m.content for m in tools), tools


async def test_a_reused_workflow_id_runs_its_commands_again(client, task_queue, served):
    fake, workspace = served
    workflow_id = f"agent-reused-{uuid.uuid4().hex[:8]}"
    for round_ in range(2):
        fake.enqueue(
            tool_calls(("call_1", "run_command", '{"command": "echo x >> runs.txt"}')),
            text("Done."),
        )
        handle = await start_run(
            client, task_queue, AgentRunInput.from_prompt("append"), workflow_id=workflow_id
        )
        await _approve_when_waiting(handle, "call_1")
        result = await handle.result()
        assert result.finish_reason == "stop", round_
    # Same workflow id, same call id, two runs: two executions, not one and a replayed result.
    assert (workspace / "runs.txt").read_text() == "x\nx\n"
    assert len(await messages(handle)) == 4
