"""Cancellation against a real model connection: the production worker
(`worker.run_worker`), the real `call_llm` over httpx, and an OpenAI-compatible server on
127.0.0.1 that streams for a minute.

- `cancel {"immediate": true}` reaches the in-flight activity through its heartbeats, the HTTP
  stream is closed (the server sees the disconnect), and the run ends `cancelled` at once;
- a plain `cancel` keeps its between-iterations semantics: the model's answer is awaited, no tool runs.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from activities.settings import Settings
from tests.fake_openai import FakeOpenAI, Slow
from tests.helpers import events, start_run, wait_until
from worker import run_worker
from workflows.model import AgentRunInput


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
    assert result.error == "Agent run cancelled"
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
