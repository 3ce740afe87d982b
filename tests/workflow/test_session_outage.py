"""A model server out of reach for longer than the worker's LLM_MAX_WAIT ends a session's turn,
not the session: the real worker (the real model client) on the dev server, its model the fake
OpenAI-compatible server on 127.0.0.1, taken down while the session waits for a message and
brought back on the same port later. The turn ends with a warning naming the server and the
wait, the session waits for the next message, and that message reaches the model again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from runtime.settings import Settings
from tests import fake_openai
from tests.helpers import events, messages, start_run, status, wait_for_phase, wait_until
from tests.ports import free_ports
from worker import run_worker
from workflows import names
from workflows.model import AgentRunInput, AgentRunOptions

MAX_WAIT = "4"
"""LLM_MAX_WAIT: a few attempts (1 s, 2 s apart), then the call gives up."""


@pytest.fixture
def port() -> int:
    return free_ports()


@pytest.fixture
async def worker(client: Client, task_queue: str, tmp_path: Path, port: int) -> AsyncIterator[str]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    settings = Settings.from_env(
        {
            "AGENT_WORKSPACE": str(workspace),
            "AGENT_STATE_DIR": str(tmp_path / "state"),
            "LLM_BASE_URL": f"http://127.0.0.1:{port}/v1",
            "LLM_MODEL": "fake-model",
            "LLM_MAX_WAIT": MAX_WAIT,
        }
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        run_worker(client, settings, queue=task_queue, stop=stop, ready=lambda _q: ready.set())
    )
    await asyncio.wait_for(ready.wait(), 30)
    try:
        yield task_queue
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def warnings(handle: WorkflowHandle[Any, Any]) -> list[str]:
    return [e.message for e in await events(handle) if e.type == "warning"]


async def test_a_model_outage_ends_the_turn_and_the_next_message_asks_again(
    client: Client, worker: str, port: int
) -> None:
    server = f"http://127.0.0.1:{port}"
    with fake_openai.FakeOpenAI(port) as model:
        model.enqueue(fake_openai.text("Hello, how can I help?"))
        handle = await start_run(
            client, worker, AgentRunInput.from_prompt("hello", AgentRunOptions(keep_alive=True))
        )
        await wait_for_phase(handle, "waiting_for_message", timeout=30)

    # The server is gone; a message comes.
    await handle.signal(names.SIGNAL_SEND_MESSAGE, {"content": "are you there?"})

    async def turn_or_run_ended() -> bool:
        said = await warnings(handle)
        stopped = any(w.startswith("this turn stopped without an answer") for w in said)
        return stopped or (await status(handle)).phase == "finished"

    await wait_until(turn_or_run_ended, timeout=60, interval=0.3)
    log = await events(handle)
    assert "finished" not in [e.type for e in log], [e.model_dump() for e in log[-3:]]
    [ended] = [w for w in await warnings(handle) if w.startswith("this turn stopped")]
    assert f"model server {server} cannot be reached (connection refused)" in ended
    assert "gave up after" in ended and f"LLM_MAX_WAIT {MAX_WAIT} s" in ended
    assert "the session waits for the next message" in ended
    now = await wait_for_phase(handle, "waiting_for_message", timeout=30)
    assert now.finish_reason is None

    # Back on the same port: the next message reaches the model again.
    with fake_openai.FakeOpenAI(port) as model:
        model.enqueue(fake_openai.text("Yes, I am back."))
        await handle.signal(names.SIGNAL_SEND_MESSAGE, {"content": "and now?"})
        await wait_until(lambda: model.request_count >= 1, timeout=30)

        async def answered() -> bool:
            record = await messages(handle)
            waiting = (await status(handle)).phase == "waiting_for_message"
            return waiting and record[-1].content == "Yes, I am back."

        await wait_until(answered, timeout=30)
        sent = model.requests[0]["messages"]
        assert [m["content"] for m in sent if m["role"] == "user"] == [
            "hello",
            "are you there?",
            "and now?",
        ]
    await handle.signal(names.SIGNAL_CANCEL, {"reason": "test over"})
    assert (await handle.result()).finish_reason == "cancelled"
