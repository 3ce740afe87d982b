"""A bad turn ends the turn, not the session; a person's no holds for the turn; an empty reply is
not an answer. Through a real worker on the dev server, the model's replies scripted (and once
the real model client against the fake OpenAI server on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowHandle
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.tools import build_default_registry
from runtime.settings import Settings
from tests import fake_openai
from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import (
    event_types,
    events,
    messages,
    of_type,
    start_run,
    wait_for_phase,
    wait_until,
    worker_for,
)
from workflows import names
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage
from workflows.run.agent import AgentWorkflow
from workflows.run.wording import EMPTY_REPLY_NUDGE

ECHO = '{"command": "echo hi"}'
HERE = '{"path": "."}'


def session(**options: Any) -> AgentRunOptions:
    return AgentRunOptions(keep_alive=True, **options)


def warnings(log: list[Any]) -> list[str]:
    return [w.message for w in of_type(log, "warning")]


def tool_contents(history: list[ChatMessage]) -> list[str]:
    return [m.content for m in history if m.role == "tool"]


async def close(handle: WorkflowHandle[Any, Any]) -> None:
    """End a session that waits for its next message (a cancel ends it `cancelled`)."""
    await handle.signal(names.SIGNAL_CANCEL, {"reason": "test over"})
    result = await handle.result()
    assert result.finish_reason == "cancelled"


# ------------------------------------------------------------- the round limit, per turn


async def test_a_looping_turn_ends_at_max_rounds_and_the_session_answers_the_next(
    client, task_queue
):
    loop = [calls((f"c{i}", "list_dir", f'{{"path": "d{i}"}}')) for i in range(2)]
    fake = FakeAgentActivities(replies=[*loop, text("Hello again.")])
    run_input = AgentRunInput.from_prompt("look around", session(max_rounds=2))
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input)
        waiting = await wait_for_phase(handle, "waiting_for_message", timeout=10)
        assert waiting.round == 2
        log = await events(handle)
        assert "finished" not in event_types(log)
        [warned] = [w for w in warnings(log) if "round limit" in w]
        assert "this turn stopped at its round limit (max_rounds 2)" in warned
        assert "the session waits for the next message" in warned
        assert len(fake.llm_requests) == 2  # the limit is checked before asking the model again

        await handle.signal(names.SIGNAL_SEND_MESSAGE, {"content": "just say hello"})
        await wait_until(lambda: len(fake.llm_requests) == 3)
        again = await wait_for_phase(handle, "waiting_for_message")
        assert again.round == 0
        history = await messages(handle)
        assert [m.content for m in history[-2:]] == ["just say hello", "Hello again."]
        await close(handle)


async def test_a_message_sent_while_a_turn_loops_is_answered_when_the_turn_stops(
    client, task_queue
):
    fake = FakeAgentActivities(
        replies=[calls(("c0", "run_command", ECHO)), text("Stopped, as you asked.")]
    )
    run_input = AgentRunInput.from_prompt("echo", session(max_rounds=1))
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input)
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal(names.SIGNAL_SEND_MESSAGE, {"content": "stop looping"})
        await handle.signal(names.SIGNAL_TOOL_APPROVAL, {"call_id": "c0", "approved": True})
        await wait_until(lambda: len(fake.llm_requests) == 2)
        await wait_for_phase(handle, "waiting_for_message")
        history = await messages(handle)
        log = await events(handle)
        await close(handle)
    assert [m.content for m in history[-2:]] == ["stop looping", "Stopped, as you asked."]
    assert any("round limit (max_rounds 1)" in w for w in warnings(log))


# ----------------------------------------------------------- the repeat limit, per turn


async def test_a_turn_that_repeats_a_call_past_max_repeats_ends_and_the_next_counts_again(
    client, task_queue
):
    same = [calls((f"c{i}", "list_dir", HERE)) for i in range(3)]
    fake = FakeAgentActivities(replies=[*same, calls(("c3", "list_dir", HERE)), text("Done.")])
    run_input = AgentRunInput.from_prompt("list", session(max_repeats=2))
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input)
        await wait_for_phase(handle, "waiting_for_message", timeout=10)
        assert fake.tools_run == ["c0", "c1"]
        assert len(fake.llm_requests) == 3  # the model is not asked again after c2
        log = await events(handle)
        assert "finished" not in event_types(log)
        assert any("already ran 2 times in this turn" in w for w in warnings(log))
        [ended] = [w for w in warnings(log) if "repeat limit" in w]
        assert "this turn stopped at its repeat limit (max_repeats 2)" in ended
        history = await messages(handle)
        assert "already ran 2 times in this turn" in tool_contents(history)[-1]

        await handle.signal(names.SIGNAL_SEND_MESSAGE, {"content": "once more"})
        await wait_until(lambda: len(fake.llm_requests) == 5)
        await wait_for_phase(handle, "waiting_for_message")
        assert fake.tools_run == ["c0", "c1", "c3"]  # a new turn counts from zero
        await close(handle)


# ---------------------------------------------------- a person's no, for the turn


async def test_a_rejected_call_repeated_five_times_asks_a_person_once(client, task_queue):
    same = [calls((f"r{i}", "run_command", ECHO)) for i in range(5)]
    fake = FakeAgentActivities(replies=[*same, text("I will not run it.")])
    run_input = AgentRunInput.from_prompt("echo", AgentRunOptions(max_repeats=10))
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input)
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal(
            names.SIGNAL_TOOL_APPROVAL,
            {"call_id": "r0", "approved": False, "reason": "not on this machine"},
        )
        result = await asyncio.wait_for(handle.result(), 20)
        log = await events(handle)
    assert result.finish_reason == "stop"
    assert len(of_type(log, "awaiting_approval")) == 1
    assert fake.tools_run == []
    first, *again = tool_contents(result.messages)
    assert first == "Rejected: not on this machine"
    assert len(again) == 4
    for content in again:
        assert content.startswith("Rejected: not on this machine")
        assert "already rejected" in content
    needs = {e.call_id: e.requires_approval for e in of_type(log, "tool_call")}
    assert needs == {"r0": True, "r1": False, "r2": False, "r3": False, "r4": False}
    assert len([w for w in warnings(log) if "already rejected" in w]) == 4


async def test_rejections_count_toward_max_repeats_and_a_new_turn_asks_again(client, task_queue):
    same = [calls((f"r{i}", "run_command", ECHO)) for i in range(4)]
    fake = FakeAgentActivities(replies=same)
    run_input = AgentRunInput.from_prompt("echo", session(max_repeats=2))
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input)
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal(names.SIGNAL_TOOL_APPROVAL, {"call_id": "r0", "approved": False})
        # r1: the person's no again; r2: past the limit (the no and one repeat), the turn ends.
        await wait_for_phase(handle, "waiting_for_message")
        assert len(fake.llm_requests) == 3
        history = await messages(handle)
        assert all(c.startswith("Rejected: User denied") for c in tool_contents(history))
        log = await events(handle)
        assert any(
            "this turn stopped at its repeat limit (max_repeats 2)" in w for w in warnings(log)
        )

        await handle.signal(names.SIGNAL_SEND_MESSAGE, {"content": "try again"})
        await wait_for_phase(handle, "awaiting_approval")  # a new turn: the person is asked
        log = await events(handle)
        assert [e.pending[0].id for e in of_type(log, "awaiting_approval")] == ["r0", "r3"]
        await close(handle)


# --------------------------------------------------------------- empty replies


async def test_an_empty_reply_is_asked_again_once_with_a_nudge(client, task_queue):
    fake = FakeAgentActivities(replies=[text(""), text("Here it is.")], client=client)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("hello"))
        result = await asyncio.wait_for(handle.result(), 20)
    assert result.finish_reason == "stop"
    assert [(m.role, m.content) for m in result.messages] == [
        ("user", "hello"),
        ("assistant", ""),
        ("user", EMPTY_REPLY_NUDGE),
        ("assistant", "Here it is."),
    ]
    assert [len(p) for p in fake.llm_prefixes] == [1, 3]  # the model was sent the nudge


async def test_two_empty_replies_end_a_run_with_a_warning(client, task_queue):
    fake = FakeAgentActivities(replies=[text(""), text(" \n"), text("never asked")])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("hello"))
        result = await asyncio.wait_for(handle.result(), 20)
        log = await events(handle)
    assert result.finish_reason == "stop"
    assert len(fake.llm_requests) == 2
    assert any("the model returned nothing" in w for w in warnings(log))


async def test_two_empty_replies_in_a_session_then_a_good_next_turn(client, task_queue):
    fake = FakeAgentActivities(replies=[text(""), text(""), text("Back again.")])
    run_input = AgentRunInput.from_prompt("hello", session())
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input)
        await wait_for_phase(handle, "waiting_for_message", timeout=10)
        assert len(fake.llm_requests) == 2
        log = await events(handle)
        assert "finished" not in event_types(log)
        [nothing] = [w for w in warnings(log) if "the model returned nothing" in w]
        assert "the session waits for the next message" in nothing

        await handle.signal(names.SIGNAL_SEND_MESSAGE, {"content": "are you there?"})
        await wait_until(lambda: len(fake.llm_requests) == 3)
        await wait_for_phase(handle, "waiting_for_message")
        history = await messages(handle)
        assert [m.content for m in history[-2:]] == ["are you there?", "Back again."]
        await close(handle)


# ---------------------------------------- an empty reply from a real HTTP model server


@pytest.fixture
def fake_server() -> Iterator[fake_openai.FakeOpenAIServer]:
    with fake_openai.FakeOpenAI() as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as http_client:
        yield http_client


async def test_an_empty_reply_from_the_model_server_is_asked_again(
    client, task_queue, fake_server, http, tmp_path: Path
):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    settings = Settings(
        llm_base_url=fake_server.base_url,
        llm_api_key="sk-test",
        llm_model="fake-model",
        workspace=workspace,
        state_dir=tmp_path / "state",
    )
    fake_server.enqueue(fake_openai.text(""), fake_openai.text("All done."))
    acts = AgentActivities(client, settings, build_default_registry(workspace), http)
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=acts.all()
    ):
        handle = await start_run(
            client, task_queue, AgentRunInput.from_prompt("hello"), f"turns-{uuid.uuid4()}"
        )
        result = await asyncio.wait_for(handle.result(), 30)
    assert result.finish_reason == "stop"
    assert result.messages[-1].content == "All done."
    assert fake_server.request_count == 2
    sent = fake_server.requests[1]["messages"]
    assert sent[-1] == {"role": "user", "content": EMPTY_REPLY_NUDGE}
