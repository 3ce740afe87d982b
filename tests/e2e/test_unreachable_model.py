"""A model server that cannot be reached is named at once: the real `python worker.py` against
the session dev server, its model URL a closed port on 127.0.0.1. Every failed attempt is a
`warning` event naming the server (scheme, host and port) and the cause within seconds, the
worker logs one line per attempt and no traceback, and after `LLM_MAX_WAIT` the run ends with an
error saying the same."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from temporalio.client import Client

from tests.helpers import events, wait_until
from tests.reliability.processes import ROOT
from workflows.model import AgentRunInput, AgentRunResult

MAX_WAIT_SECONDS = 6
WARNING_SECONDS = 10.0


def closed_port() -> int:
    """A port on 127.0.0.1 nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def worker_process(
    client: Client, queue: str, tmp: Path, **environ: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`python worker.py` on `queue`; stderr goes to a pipe the test reads after it stopped."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_")) or k.startswith("AGENT_ENCRYPTION_")
    }
    env.update(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_TASK_QUEUE=queue,
        AGENT_WORKSPACE=str(tmp / "ws"),
        AGENT_STATE_DIR=str(tmp / "state"),
        AGENT_SANDBOX="off",
        **environ,
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "worker.py",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert line.startswith(b"worker ready"), line
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 30)
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_an_unreachable_model_server_is_named_at_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    port = closed_port()
    server = f"http://127.0.0.1:{port}"
    async with worker_process(
        client,
        task_queue,
        tmp_path,
        LLM_BASE_URL=f"{server}/v1",
        LLM_MAX_WAIT=str(MAX_WAIT_SECONDS),
    ) as worker:
        began = time.monotonic()
        handle = await client.start_workflow(
            "AgentWorkflow",
            AgentRunInput.from_prompt("hello"),
            id=f"unreachable-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            result_type=AgentRunResult,
        )

        async def warned() -> list[str]:
            return [e.message for e in await events(handle) if e.type == "warning"]

        first = await wait_until(warned, timeout=WARNING_SECONDS, interval=0.2)
        assert time.monotonic() - began < WARNING_SECONDS
        assert f"model server {server} cannot be reached (connection refused)" in first[0]
        assert "/v1" not in first[0]

        result = await asyncio.wait_for(handle.result(), MAX_WAIT_SECONDS + 30)
        assert time.monotonic() - began >= MAX_WAIT_SECONDS
        assert result.finish_reason == "error"
        assert result.error is not None
        assert f"model server {server} cannot be reached (connection refused)" in result.error
        assert "gave up" in result.error and "LLM_MAX_WAIT" in result.error
        warnings = await warned()
        assert len(warnings) >= 2  # one per attempt that is tried again
        assert all(f"{server} cannot be reached" in w for w in warnings)

        worker.terminate()
        assert worker.stderr is not None
        log = (await asyncio.wait_for(worker.stderr.read(), 30)).decode()
    assert "Traceback" not in log, log
    attempts = [line for line in log.splitlines() if f"{server} cannot be reached" in line]
    assert len(attempts) == len(warnings) + 1, log  # one line per attempt, the last included
