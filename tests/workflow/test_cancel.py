"""Cancellation on the dev server: the `cancel` signal (plain and immediate) in every phase,
cancel racing an approval, and Temporal's own workflow cancellation, with the model and tools as
stand-ins; then against a real model connection (the production worker, the real `call_llm`
over httpx, a server on 127.0.0.1 streaming for a minute): an immediate cancel closes the HTTP
stream at once, a plain cancel awaits the answer and runs no tool."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import CancelledError

from runtime.settings import Settings
from tests.fake_openai import FakeOpenAI, Slow
from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import (
    event_types,
    events,
    messages,
    of_type,
    start_run,
    status,
    tool_messages,
    wait_for_phase,
    wait_until,
    worker_for,
)
from worker import heartbeat_tuning, run_worker
from workflows.conversation.record import invariant_violations
from workflows.model import AgentRunInput, AgentRunOptions

# Heartbeats carry activity cancellation to the worker: the tests' workers use the production
# worker's heartbeat settings.
FAST_HEARTBEATS = heartbeat_tuning()


def assert_cancelled_tail(evs: list[Any], message: str = "Agent run cancelled") -> None:
    assert evs[-2].type == "error" and evs[-2].message == message, evs[-2:]
    assert evs[-1].type == "finished" and evs[-1].finish_reason == "cancelled"
    assert len(of_type(evs, "finished")) == 1
    assert len(of_type(evs, "error")) == 1


async def test_cancel_while_waiting_for_approval(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("c1", "delete_path", "{}"), ("c2", "list_dir", "{}")), text("x")]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal("cancel", {"reason": "changed my mind", "requested_by": "ann"})
        result = await handle.result()
        evs = await events(handle)
        st = await status(handle)
        # a second cancel after the end is harmless
        assert st.phase == "finished"
    assert result.finish_reason == "cancelled"
    # The reason and who asked are in the result and the error event, not dropped.
    said = "Agent run cancelled by ann: changed my mind"
    assert result.error == said
    assert fake.tools_run == []  # not even the unguarded call
    assert len(fake.llm_requests) == 1
    assert tool_messages(result.messages) == []
    assert result.messages[-1].tool_calls is not None  # the open tail stays as it was
    assert invariant_violations(result.messages) == []
    assert_cancelled_tail(evs, said)
    assert "warning" not in event_types(evs)
    assert st.finish_reason == "cancelled" and st.cancel_requested and st.pending_approvals == []


async def test_cancel_twice_is_harmless(client, task_queue):
    """Both cancels are sent while no worker polls, so both reach the run (sent to a live worker,
    the first could finish the run before the second is accepted: a flaky test, seen under load)."""
    fake = FakeAgentActivities(replies=[calls(("c1", "delete_path", "{}"))])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_for_phase(handle, "awaiting_approval")
    await handle.signal("cancel")
    await handle.signal("cancel", {"reason": "really"})
    async with worker_for(client, task_queue, fake):
        result = await handle.result()
        evs = await events(handle)
    assert result.finish_reason == "cancelled"
    assert_cancelled_tail(evs)
    assert "warning" not in event_types(evs)


@pytest.mark.parametrize("order", ["approval_then_cancel", "cancel_then_approval"])
async def test_cancel_sent_together_with_an_approval_wins(client, task_queue, order):
    """Both signals land in the same workflow task (no worker is polling while they are sent):
    cancel has priority over applying answers, so no tool runs, whatever the order."""
    fake = FakeAgentActivities(replies=[calls(("c1", "run_command", "{}")), text("x")])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_for_phase(handle, "awaiting_approval")
    approval = ("tool_approval", {"call_id": "c1", "approved": True})
    cancel = ("cancel", {"reason": "stop"})
    for name, payload in (
        (approval, cancel) if order == "approval_then_cancel" else (cancel, approval)
    ):
        await handle.signal(name, payload)
    async with worker_for(client, task_queue, fake):
        result = await handle.result()
        evs = await events(handle)
    assert result.finish_reason == "cancelled"
    assert fake.tools_run == []
    assert tool_messages(result.messages) == []
    assert_cancelled_tail(evs, "Agent run cancelled: stop")


async def test_plain_cancel_during_llm_call_waits_for_it_and_runs_no_tool(client, task_queue):
    fake = FakeAgentActivities(replies=[calls(("c1", "list_dir", "{}"))], llm_delay=1.5)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_until(lambda: fake.llm_requests)
        await handle.signal("cancel")
        assert (await status(handle)).cancel_requested
        result = await handle.result()
        evs = await events(handle)
    assert result.finish_reason == "cancelled"
    assert fake.llm_cancelled == 0  # the model call was allowed to finish
    assert fake.tools_run == []  # but its tool call never ran
    assert result.messages[-1].role == "assistant" and result.messages[-1].tool_calls
    assert invariant_violations(result.messages) == []
    assert_cancelled_tail(evs)


async def test_plain_cancel_during_a_final_reply_still_finishes_cancelled(client, task_queue):
    # The model's answer has no tool calls, so the run would otherwise stop: a cancel always
    # finishes `cancelled`, and the reply the model already gave is kept.
    fake = FakeAgentActivities(replies=[text("all done")], llm_delay=1.5)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_until(lambda: fake.llm_requests)
        await handle.signal("cancel")
        result = await handle.result()
        evs = await events(handle)
    assert result.finish_reason == "cancelled"
    assert result.error == "Agent run cancelled"
    assert fake.llm_cancelled == 0
    assert result.messages[-1].content == "all done"
    assert_cancelled_tail(evs)


async def test_immediate_cancel_interrupts_a_slow_llm_call(client, task_queue):
    fake = FakeAgentActivities(replies=[text("too late")], llm_delay=60)
    async with worker_for(client, task_queue, fake, **FAST_HEARTBEATS):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_until(lambda: fake.llm_requests)
        started = time.monotonic()
        await handle.signal("cancel", {"immediate": True, "reason": "now"})
        result = await asyncio.wait_for(handle.result(), 30)
        elapsed = time.monotonic() - started
        evs = await events(handle)
        await wait_until(lambda: fake.llm_cancelled == 1)
    print(f"immediate cancel took {elapsed:.2f}s")
    assert elapsed < 20
    assert result.finish_reason == "cancelled" and result.error == "Agent run cancelled: now"
    assert [m.role for m in result.messages] == ["user"]
    assert "text_delta" not in event_types(evs)
    assert_cancelled_tail(evs, "Agent run cancelled: now")


async def test_immediate_cancel_interrupts_running_tools(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("t1", "list_dir", "{}"), ("t2", "read_file", "{}")), text("x")],
        tool_delay=60,
    )
    async with worker_for(client, task_queue, fake, **FAST_HEARTBEATS):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_until(lambda: len(fake.tool_requests) == 2)
        await handle.signal("cancel", {"immediate": True})
        result = await asyncio.wait_for(handle.result(), 30)
        evs = await events(handle)
        await wait_until(lambda: fake.tools_cancelled == 2)
    assert result.finish_reason == "cancelled"
    assert len(fake.llm_requests) == 1
    # the interrupted calls are answered (so the history stays well formed), as cancelled
    assert invariant_violations(result.messages, allow_open_tail=False) == []
    tools = tool_messages(result.messages)
    assert [m.tool_call_id for m in tools] == ["t1", "t2"]
    assert all("Cancelled" in m.content for m in tools)
    assert_cancelled_tail(evs)


async def test_temporal_cancel_while_waiting_for_approval(client, task_queue):
    fake = FakeAgentActivities(replies=[calls(("c1", "delete_path", "{}"))])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
        evs = await events(handle)
        st = await status(handle)
        desc = await handle.describe()
    assert isinstance(info.value.cause, CancelledError)
    assert desc.status is not None and desc.status.name == "CANCELED"
    assert fake.tools_run == []
    assert_cancelled_tail(evs)
    assert st.phase == "finished" and st.finish_reason == "cancelled"


async def test_temporal_cancel_during_llm_call(client, task_queue):
    fake = FakeAgentActivities(replies=[text("too late")], llm_delay=60)
    async with worker_for(client, task_queue, fake, **FAST_HEARTBEATS):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_until(lambda: fake.llm_requests)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 30)
        evs = await events(handle)
        desc = await handle.describe()
    assert isinstance(info.value.cause, CancelledError)
    assert desc.status is not None and desc.status.name == "CANCELED"
    assert_cancelled_tail(evs)


async def test_send_message_during_approval_wait_comes_after_tool_messages(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("c1", "run_command", "{}"), ("c2", "list_dir", "{}")), text("ok")],
        client=client,
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal("send_message", {"content": "also, hurry"})
        await handle.signal("send_message", {"role": "user", "content": "please", "name": "ann"})
        # held, not in the history while the calls are pending
        assert [m.role for m in await messages(handle)] == ["user", "assistant"]
        await handle.signal("tool_approval", {"call_id": "c1", "approved": True})
        result = await handle.result()
    roles = [m.role for m in result.messages]
    assert roles == ["user", "assistant", "tool", "tool", "user", "user", "assistant"]
    assert result.messages[4].content == "also, hurry"
    assert result.messages[5].name == "ann"
    assert invariant_violations(result.messages, allow_open_tail=False) == []
    assert [m.role for m in fake.llm_prefixes[1]] == roles[:-1]


async def test_cancel_in_a_session_finishes_cancelled(client, task_queue):
    fake = FakeAgentActivities(replies=[text("hi"), text("again")])
    options = AgentRunOptions(keep_alive=True)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))
        await wait_for_phase(handle, "waiting_for_message")
        await handle.signal("send_message", {"content": "second"})
        await wait_until(lambda: len(fake.llm_requests) == 2)
        await wait_for_phase(handle, "waiting_for_message")
        await handle.signal("cancel")
        result = await handle.result()
        evs = await events(handle)
    assert result.finish_reason == "cancelled" and result.error == "Agent run cancelled"
    assert [m.content for m in result.messages] == ["x", "hi", "second", "again"]
    assert_cancelled_tail(evs)


async def test_temporal_cancel_during_tool_execution(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("t1", "list_dir", "{}"), ("t2", "read_file", "{}")), text("x")],
        tool_delay=60,
    )
    async with worker_for(client, task_queue, fake, **FAST_HEARTBEATS):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_until(lambda: len(fake.tool_requests) == 2)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 30)
        evs = await events(handle)
        history = await messages(handle)
    assert isinstance(info.value.cause, CancelledError)
    assert_cancelled_tail(evs)
    assert invariant_violations(history, allow_open_tail=False) == []
    assert [m.tool_call_id for m in tool_messages(history)] == ["t1", "t2"]


# ---- Cancellation against a real model connection: the production worker


def settings_for(base_url: str, tmp_path: Path) -> Settings:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    return Settings(
        llm_base_url=base_url,
        llm_api_key="sk-test",
        llm_model="fake-model",
        workspace=workspace,
        state_dir=tmp_path / "state",
    )


async def test_immediate_cancel_aborts_a_minute_long_stream(client, task_queue, tmp_path):
    with FakeOpenAI() as fake:
        fake.enqueue(Slow(chunks=600, delay=0.1, piece="word "))  # one minute of text
        stop = asyncio.Event()
        worker = asyncio.create_task(
            run_worker(client, settings_for(fake.base_url, tmp_path), queue=task_queue, stop=stop)
        )
        try:
            handle = await start_run(client, task_queue, AgentRunInput.from_prompt("talk"))
            await wait_until(lambda: fake.count("slow_chunks_sent") >= 10)
            started = time.monotonic()
            await handle.signal("cancel", {"immediate": True, "reason": "enough"})
            result = await asyncio.wait_for(handle.result(), 30)
            ended = time.monotonic() - started
            await wait_until(lambda: fake.disconnects >= 1, timeout=20)
            disconnected = time.monotonic() - started
            log = await events(handle)
            chunks_sent = fake.count("slow_chunks_sent")
        finally:
            stop.set()
            await worker
    print(
        f"immediate cancel: run ended after {ended:.2f}s, stream closed after {disconnected:.2f}s"
    )
    assert result.finish_reason == "cancelled"
    assert result.error == "Agent run cancelled: enough"
    assert [e.type for e in log][-2:] == ["error", "finished"]
    assert chunks_sent < 600  # the server stopped streaming: the request was aborted
    assert [m.role for m in result.messages] == ["user"]  # nothing partial was kept


async def test_plain_cancel_waits_for_the_answer_and_runs_no_tool(client, task_queue, tmp_path):
    with FakeOpenAI() as fake:
        # A slow answer that ends with a tool call: the answer is kept, the call never runs.
        fake.enqueue(
            Slow(
                chunks=20,
                delay=0.1,
                piece="thinking ",
                then_call=("call_1", "list_dir", '{"path": "."}'),
            )
        )
        stop = asyncio.Event()
        worker = asyncio.create_task(
            run_worker(client, settings_for(fake.base_url, tmp_path), queue=task_queue, stop=stop)
        )
        try:
            run_input = AgentRunInput.from_prompt("look")
            handle = await start_run(client, task_queue, run_input)
            await wait_until(lambda: fake.count("slow_chunks_sent") >= 3)
            await handle.signal("cancel", {"reason": "changed my mind"})
            result = await asyncio.wait_for(handle.result(), 30)
            log = await events(handle)
        finally:
            stop.set()
            await worker
    assert result.finish_reason == "cancelled"
    assert fake.disconnects == 0  # the model's answer was awaited, not aborted
    assert fake.count("slow_chunks_sent") == 20
    last = result.messages[-1]
    assert last.role == "assistant" and last.content == "thinking " * 20
    assert [c.id for c in last.tool_calls or []] == ["call_1"]
    assert len(fake.requests) == 1  # no further model call
    assert not [e for e in log if e.type == "tool_result"]
