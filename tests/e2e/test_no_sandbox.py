"""Without a sandbox, no commands by default. Tried from outside: a real `python worker.py` on a
PATH without bwrap, holding an LLM key and an encryption key, and a model that calls
`run_command` to read them from `/proc/$PPID/environ`. With `AGENT_SANDBOX=auto` the tool is not
offered and nothing runs; `AGENT_SANDBOX=off` says to run commands unsandboxed, and then they do.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from runtime.codec import ENV_KEY
from runtime.connect import data_converter
from tests.reliability.processes import ROOT, FakeLLMProcess, ManagedProcess, stopping
from tests.sandbox_support import run_approving, tool_data

READ_THE_WORKER = "tr '\\0' '\\n' < /proc/$PPID/environ"


def tools_without_bwrap(folder: Path) -> Path:
    """A PATH with the shell tools a command uses, and no bwrap."""
    folder.mkdir()
    for name in ("sh", "tr", "cat", "echo"):
        found = shutil.which(name)
        if found is None:
            pytest.skip(f"{name} is not installed")
        (folder / name).symlink_to(found)
    return folder


async def start_worker_without_bwrap(
    tmp_path: Path, address: str, queue: str, fake: FakeLLMProcess, **extra: str
) -> tuple[ManagedProcess, str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_")) and k != "PYTHONPATH"
    }
    key = base64.b64encode(os.urandom(32)).decode()
    secret = f"sk-{os.urandom(8).hex()}"
    env.update(
        PATH=str(tools_without_bwrap(tmp_path / "bin")),
        TEMPORAL_ADDRESS=address,
        AGENT_TASK_QUEUE=queue,
        AGENT_WORKSPACE=str(tmp_path / "ws"),
        AGENT_STATE_DIR=str(tmp_path / "state"),
        AGENT_ENCRYPTION_KEY=key,
        LLM_API_KEY=secret,
        LLM_MODEL="fake-model",
        LLM_BASE_URL=fake.base_url,
        PYTHONUNBUFFERED="1",
        **extra,
    )
    worker = ManagedProcess(
        "no-bwrap-worker", [sys.executable, "worker.py"], env=env, cwd=ROOT, log_dir=tmp_path
    )
    return worker, key, secret


async def keyed_client(client: Client, key: str) -> Client:
    return await Client.connect(
        client.service_client.config.target_host, data_converter=data_converter({ENV_KEY: key})
    )


async def test_without_bwrap_run_command_is_not_offered_and_nothing_runs(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    fake = FakeLLMProcess(tmp_path / "logs")
    try:
        await fake.ready()
        address = client.service_client.config.target_host
        worker, key, secret = await start_worker_without_bwrap(tmp_path, address, task_queue, fake)
        with stopping(worker):
            ready = await worker.wait_for_line("worker ready")
            arguments = json.dumps({"command": READ_THE_WORKER})
            await fake.enqueue(
                {"kind": "tool_calls", "calls": [["call_1", "run_command", arguments]]},
                {"kind": "text", "text": "done"},
            )
            result = await run_approving(await keyed_client(client, key), task_queue, "read it")
            offered = [t["function"]["name"] for t in (await fake.requests())[0]["tools"]]
        warning = worker.stderr_path.read_text()
    finally:
        fake.stop()
    [tool] = [m for m in result.messages if m.role == "tool"]
    assert secret not in tool.content and key not in tool.content, tool.content
    assert tool.content == "Tool 'run_command' not found"
    assert "run_command" not in offered
    assert " run_command=off " in ready and " sandbox=none " in ready, ready
    assert "run_command is not offered" in warning


async def test_sandbox_off_says_to_run_commands_unsandboxed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    fake = FakeLLMProcess(tmp_path / "logs")
    try:
        await fake.ready()
        address = client.service_client.config.target_host
        worker, key, _ = await start_worker_without_bwrap(
            tmp_path, address, task_queue, fake, AGENT_SANDBOX="off"
        )
        with stopping(worker):
            ready = await worker.wait_for_line("worker ready")
            arguments = json.dumps({"command": "echo unsandboxed"})
            await fake.enqueue(
                {"kind": "tool_calls", "calls": [["call_1", "run_command", arguments]]},
                {"kind": "text", "text": "done"},
            )
            result = await run_approving(
                await keyed_client(client, key), task_queue, "run", approvals=1
            )
    finally:
        fake.stop()
    assert " run_command=on " in ready and " sandbox=none " in ready, ready
    assert tool_data(result, "call_1")["data"]["stdout"] == "unsandboxed\n"
