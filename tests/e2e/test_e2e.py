"""End to end, every piece its own process: the real `python worker.py` (pointed at the session
dev server and, over HTTP, at the fake OpenAI-compatible server `python -m tests.fake_openai`),
and the file-manager story driven through `python -m starter` commands: an approval (logs deleted), a
rejection (the reason reaches the model's reply, nothing deleted) and a cancellation.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from tests.cli.test_starter import REPO, Result, seed, starter
from tests.helpers import wait_for_phase

API_KEY = "sk-e2e-secret-never-printed"


@dataclass
class Process:
    proc: asyncio.subprocess.Process
    lines: list[str]
    name: str

    async def wait_for_line(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """Read stdout until a line matches `pattern` (the line is kept in `lines`)."""
        assert self.proc.stdout is not None

        async def read() -> re.Match[str]:
            assert self.proc.stdout is not None
            while True:
                raw = await self.proc.stdout.readline()
                if not raw:
                    raise AssertionError(f"{self.name} exited early: {self.lines}")
                line = raw.decode().rstrip("\n")
                self.lines.append(line)
                match = re.search(pattern, line)
                if match:
                    return match

        return await asyncio.wait_for(read(), timeout)

    async def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM by pid, then SIGKILL if it does not end in time."""
        if self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), timeout)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        assert self.proc.returncode is not None
        return self.proc.returncode

    async def rest_of_stdout(self) -> str:
        assert self.proc.stdout is not None
        return (await self.proc.stdout.read()).decode()


async def spawn(name: str, *args: str, env: dict[str, str]) -> Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        cwd=REPO,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    return Process(proc, [], name)


def clean_env() -> dict[str, str]:
    return {
        k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_"))
    }


@pytest.fixture
async def fake_llm() -> AsyncIterator[str]:
    """`python -m tests.fake_openai` on a free port; yields its base URL (…/v1)."""
    process = await spawn("fake_openai", "-m", "tests.fake_openai", "--port", "0", env=clean_env())
    try:
        match = await process.wait_for_line(r"listening on (http://127\.0\.0\.1:\d+)")
        yield f"{match.group(1)}/v1"
    finally:
        await process.stop()


@dataclass
class Deployment:
    client: Client
    worker: Process
    env: dict[str, str]
    workspace: Path
    llm_url: str

    async def cli(self, *args: str) -> Result:
        return await starter(*args, env=self.env)


@pytest.fixture
async def deployment(client: Client, fake_llm: str, tmp_path: Path) -> AsyncIterator[Deployment]:
    workspace = seed(tmp_path / "workspace")
    env = clean_env()
    env.update(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_TASK_QUEUE=f"e2e-{uuid.uuid4().hex[:8]}",
        AGENT_WORKSPACE=str(workspace),
        AGENT_STATE_DIR=str(tmp_path / "state"),
        LLM_BASE_URL=fake_llm,
        LLM_API_KEY=API_KEY,
        LLM_MODEL="fake-model",
    )
    worker = await spawn("worker", "worker.py", env=env)
    try:
        await worker.wait_for_line(r"^worker ready ")
        yield Deployment(client, worker, env, workspace, fake_llm)
    finally:
        await worker.stop()


async def _start_and_wait(d: Deployment, prompt: str, call_id: str) -> str:
    workflow_id = f"e2e-{uuid.uuid4().hex[:8]}"
    started = await d.cli("run", "--no-follow", "--id", workflow_id, prompt)
    assert started.code == 0, started
    st = await wait_for_phase(d.client.get_workflow_handle(workflow_id), "awaiting_approval")
    assert [c.id for c in st.pending_approvals] == [call_id]
    return workflow_id


async def test_the_story_over_http(deployment: Deployment) -> None:
    d = deployment
    ready = d.worker.lines[-1]
    assert f"task_queue={d.env['AGENT_TASK_QUEUE']}" in ready
    assert "provider=openai-compatible" in ready
    assert f"workspace={d.workspace}" in ready

    # 1. Approval: the folder is deleted and the model says so.
    run1 = await _start_and_wait(d, "Please delete the logs folder", "call_2")
    assert (d.workspace / "logs").exists()
    approved = await d.cli("approve", run1, "call_2", "--approver", "ann", "--yes")
    assert approved.code == 0, approved
    watched = await d.cli("watch", run1)
    assert watched.code == 0, watched
    assert "[r1] approval call_2 approved by ann" in watched.stdout
    assert "assistant: Deleted logs." in watched.stdout
    assert watched.stdout.splitlines()[-1] == "finished: stop"
    assert not (d.workspace / "logs").exists()

    # 2. Rejection: nothing runs, the reason reaches the model's reply.
    run2 = await _start_and_wait(d, "run: rm -rf tmp", "call_1")
    rejected = await d.cli(
        "reject", run2, "call_1", "--reason", "check what is in tmp first", "--yes"
    )
    assert rejected.code == 0, rejected
    watched = await d.cli("watch", run2)
    assert watched.code == 0, watched
    replies = [line for line in watched.stdout.splitlines() if line.startswith("assistant: ")]
    assert replies and "check what is in tmp first" in replies[-1]
    assert (d.workspace / "tmp" / "cache.bin").exists()

    # 3. Cancellation while waiting: nothing runs.
    run3 = await _start_and_wait(d, "Please delete notes.txt", "call_2")
    cancelled = await d.cli("cancel", run3)
    assert cancelled.code == 0, cancelled
    watched = await d.cli("watch", run3)
    assert watched.code == 3, watched
    assert watched.stdout.splitlines()[-2:] == [
        f"[r1] error: Agent run cancelled by {getpass.getuser()}",  # the starter's OS user
        "finished: cancelled",
    ]
    assert (d.workspace / "notes.txt").exists()

    # The model really was asked over HTTP, with the conversation and the tools.
    async with httpx.AsyncClient() as http:
        base = d.llm_url.removesuffix("/v1")
        seen = (await http.get(f"{base}/_fake/requests")).json()["requests"]
    # run 1: list_dir, delete_path, final text; run 2: run_command, final text; run 3: 2 calls
    assert len(seen) == 7, [r.get("messages", [])[-1:] for r in seen]
    assert all(r["model"] == "fake-model" for r in seen)
    assert {t["function"]["name"] for t in seen[0]["tools"]} >= {"list_dir", "delete_path"}

    # Graceful shutdown on SIGTERM, and the key never reached stdout.
    code = await d.worker.stop()
    rest = await d.worker.rest_of_stdout()
    output = "\n".join(d.worker.lines) + rest
    assert code == 0, output
    assert "worker stopped" in output
    assert API_KEY not in output


async def test_worker_reports_an_unreachable_server(tmp_path: Path) -> None:
    env = clean_env()
    env.update(TEMPORAL_ADDRESS="127.0.0.1:1", AGENT_WORKSPACE=str(tmp_path / "ws"))
    worker = await spawn("worker", "worker.py", env=env)
    code = await asyncio.wait_for(worker.proc.wait(), 30)
    output = await worker.rest_of_stdout()
    assert code == 1, output
    assert "cannot reach Temporal at 127.0.0.1:1" in output
    assert "Traceback" not in output
