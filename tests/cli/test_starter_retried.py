"""`python -m starter --json watch` says a model call "was retried" only when one was: a streamed
answer that arrived in one attempt shows no such notice; an answer whose first attempt was cut
off mid-stream shows it once. The real `starter` subprocess, an in-process worker with the real
activities and the OpenAI-compatible test server streaming slowly enough for the follower to
attach while the text is generated (live batches, not the closed run's record)."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.settings import Settings
from activities.tools import build_default_registry
from tests.fake_openai import CutOff, FakeOpenAI, Slow
from tests.helpers import start_run
from workflows.agent import AgentWorkflow
from workflows.model import AgentRunInput

REPO = Path(__file__).resolve().parents[2]
RETRIED = "was retried"


async def json_watch(client: Client, task_queue: str, tmp_path: Path, *replies: Any) -> str:
    """What `--json watch` prints (stdout and stderr) of a run whose model gives `replies`."""
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
                    client, task_queue, AgentRunInput.from_prompt("count"), f"retry-{uuid.uuid4()}"
                )
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "starter",
                    "--json",
                    "watch",
                    handle.id,
                    cwd=REPO,
                    env=env,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
                out, err = await asyncio.wait_for(proc.communicate(), 90)
    said = out.decode() + err.decode()
    assert '"finish_reason": "stop"' in said or '"finish_reason":"stop"' in said, said
    return said


async def test_a_streamed_answer_in_one_attempt_says_nothing_of_a_retry(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    said = await json_watch(client, task_queue, tmp_path, Slow(chunks=60, delay=0.1))
    assert "tick" in said
    assert RETRIED not in said, said


async def test_an_answer_cut_off_and_tried_again_says_so_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    said = await json_watch(
        client,
        task_queue,
        tmp_path,
        CutOff(after_chunks=10, delay=0.3),
        Slow(chunks=30, delay=0.1),
    )
    assert said.count(RETRIED) == 1, said
