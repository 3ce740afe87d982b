"""`python -m starter watch` prints the model's text while it is being generated (issue 7): the
first words are on the terminal before the model call has finished, and the text is printed
once, not again when the round's `text_delta` event arrives."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.tools import build_default_registry
from runtime.settings import Settings
from tests.fake_openai import FakeOpenAI, Slow
from tests.helpers import events, start_run
from workflows.model import AgentRunInput
from workflows.run.agent import AgentWorkflow

REPO = Path(__file__).resolve().parents[2]
CHUNKS = 100
"""Ten seconds of text at 0.1 s a chunk: the watcher (a Python process starting on a loaded
machine, then attaching to the run's stream) is printing well before the model call ends."""


@contextlib.asynccontextmanager
async def watching(
    client: Client, task_queue: str, tmp_path: Path, replies: Sequence[Any], *flags: str
) -> AsyncIterator[tuple[WorkflowHandle[Any, Any], asyncio.subprocess.Process]]:
    """A run on an in-process worker with the real activities, whose model (the OpenAI-compatible
    test server) gives `replies`, followed by the real `python -m starter [flags] watch`."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_"))}
    env.update(TEMPORAL_ADDRESS=client.service_client.config.target_host)
    with FakeOpenAI() as fake:
        for reply in replies:
            fake.enqueue(reply)
        settings = Settings(
            llm_base_url=fake.base_url,
            llm_api_key=None,
            llm_model="fake-model",
            workspace=workspace,
            state_dir=tmp_path / "state",
            stream_flush_seconds=0.1,
        )
        async with httpx.AsyncClient() as http:
            acts = AgentActivities(client, settings, build_default_registry(workspace), http)
            async with Worker(
                client, task_queue=task_queue, workflows=[AgentWorkflow], activities=acts.all()
            ):
                handle = await start_run(
                    client, task_queue, AgentRunInput.from_prompt("count"), f"live-{uuid.uuid4()}"
                )
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "starter",
                    *flags,
                    "watch",
                    handle.id,
                    cwd=REPO,
                    env=env,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
                try:
                    yield handle, proc
                finally:
                    if proc.returncode is None:
                        proc.kill()
                        await proc.wait()


async def test_watch_prints_tokens_before_the_model_call_finishes(client, task_queue, tmp_path):
    slow = Slow(chunks=CHUNKS, delay=0.1, piece="tick ")
    async with watching(client, task_queue, tmp_path, [slow]) as (handle, proc):
        assert proc.stdout is not None
        seen = b""
        log_when_first_seen = None
        async with asyncio.timeout(60):
            while b"finished:" not in seen:
                chunk = await proc.stdout.read(64)
                if not chunk:
                    break
                seen += chunk
                if log_when_first_seen is None and b"tick" in seen:
                    log_when_first_seen = await events(handle)
            await proc.wait()
    output = seen.decode()
    assert log_when_first_seen is not None, output
    # The first words were printed while the model was still answering: the round's durable
    # `text_delta` event (written when the model call returns) did not exist yet.
    assert "text_delta" not in [e.type for e in log_when_first_seen]
    assert "assistant: tick" in output
    assert output.count("tick") == CHUNKS  # printed once, not again from the event
    assert "finished: stop" in output
    assert proc.returncode == 0
