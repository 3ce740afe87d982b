"""A model server killed in the middle of a streamed reply is a failed attempt like any other:
the real `python worker.py` against the session dev server, its model the fake OpenAI-compatible
server run as a process of its own on 127.0.0.1, killed (SIGKILL) while it streams a reply and
started again on the same port a little later. The attempt it cut off is a `warning` naming the
server, as the next one (refused) is; each is one line of the worker's log, with no traceback;
and the call succeeds once the server is back."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from tests.e2e.test_unreachable_model import worker_process
from tests.helpers import events, wait_until
from tests.ports import free_ports
from tests.reliability.processes import ROOT
from workflows.model import AgentRunInput, AgentRunResult


@contextlib.asynccontextmanager
async def model_server(port: int) -> AsyncIterator[asyncio.subprocess.Process]:
    """`python -m tests.fake_openai --port PORT`, until it is killed or the block ends."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.fake_openai",
        "--port",
        str(port),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        assert line.startswith(b"listening on"), line
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def fake_state(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    answer = await http.get(f"{url}/_fake/requests")
    state: dict[str, Any] = answer.json()
    return state


async def test_a_server_killed_mid_reply_is_a_failed_attempt_with_a_warning(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    port = free_ports()
    server = f"http://127.0.0.1:{port}"
    async with (
        httpx.AsyncClient(timeout=10) as http,
        worker_process(
            client, task_queue, tmp_path, LLM_BASE_URL=f"{server}/v1", LLM_MAX_WAIT="120"
        ) as worker,
    ):
        async with model_server(port) as first:
            slow = [{"kind": "slow", "chunks": 300, "delay": 0.1, "piece": "word "}]
            assert (await http.post(f"{server}/_fake/enqueue", json=slow)).status_code == 200
            handle = await client.start_workflow(
                "AgentWorkflow",
                AgentRunInput.from_prompt("hello"),
                id=f"killed-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
                result_type=AgentRunResult,
            )

            async def streaming() -> bool:
                state = await fake_state(http, server)
                return int(state["counters"].get("slow_chunks_sent", 0)) >= 5

            await wait_until(streaming, timeout=60, interval=0.2)
            os.kill(first.pid, signal.SIGKILL)  # in the middle of its reply
            await first.wait()

        async def warned() -> list[str]:
            return [e.message for e in await events(handle) if e.type == "warning"]

        # The cut-off attempt is said at once; the next one finds nobody at the port.
        said = await wait_until(lambda: _refused_too(warned), timeout=30, interval=0.2)
        async with model_server(port):  # back, on the same port
            result = await asyncio.wait_for(handle.result(), 90)
        warnings = await warned()

        worker.terminate()
        assert worker.stderr is not None
        log = (await asyncio.wait_for(worker.stderr.read(), 30)).decode()

    assert result.finish_reason == "stop", result
    assert "Traceback" not in log, log
    assert said[0].startswith(
        f"model server {server} closed the connection in the middle of its reply: attempt 1"
        " failed, trying again in 1 s"
    ), warnings
    assert f"model server {server} cannot be reached (connection refused): attempt 2" in said[1]
    assert all(f"model server {server}" in w for w in warnings), warnings
    attempts = [line for line in log.splitlines() if f"model server {server}" in line]
    assert len(attempts) == len(warnings), log  # one line per failed attempt


async def _refused_too(warned: Any) -> list[str] | None:
    said: list[str] = await warned()
    return said if any("cannot be reached" in w for w in said) else None
