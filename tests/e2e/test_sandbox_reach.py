"""What the model can reach, tried from outside as a hostile model would: a real `python
worker.py` deployed outside /tmp and any home folder, the fake model as its own process, real
bubblewrap and the real `mcp-server-git`.

A command the model got approved plants a git hook in the workspace, and a read-only git tool
that needs no approval runs it; a command reads what lies around the workspace. Both run in the
sandbox: they see the workspace and the system folders, not the worker's environment, state
folder, working directory, home folder, `/etc/shadow` or a host UNIX socket.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from temporalio.client import Client

from tests.reliability.processes import FakeLLMProcess, ManagedProcess, stopping
from tests.sandbox_support import (
    BIN,
    Deployment,
    UnixListener,
    deployment,
    deployment_env,
    mcp_config,
    run_approving,
    start_deployed_worker,
    tool_data,
)

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (.ci/run installs it)"
)


@dataclass
class Rig:
    place: Deployment
    fake: FakeLLMProcess
    worker: ManagedProcess
    queue: str
    socket: UnixListener


@pytest.fixture
async def rig(client: Client, task_queue: str) -> AsyncIterator[Rig]:
    with deployment() as place:
        fake = FakeLLMProcess(place.base / "logs")
        listener = UnixListener(place.sockets / "ctl.sock")
        try:
            await fake.ready()
            config = mcp_config(place, {"git": {"command": str(BIN / "mcp-server-git")}})
            env = deployment_env(
                place,
                address=client.service_client.config.target_host,
                task_queue=task_queue,
                llm_base_url=fake.base_url,
                AGENT_MCP_CONFIG=str(config),
            )
            worker = await start_deployed_worker(place, env)
            with stopping(worker):
                yield Rig(place, fake, worker, task_queue, listener)
        finally:
            listener.close()
            fake.stop()


def call(call_id: str, name: str, arguments: dict[str, str]) -> dict[str, object]:
    return {"kind": "tool_calls", "calls": [[call_id, name, json.dumps(arguments)]]}


def done(text: str = "done") -> dict[str, object]:
    return {"kind": "text", "text": text}


def hook_script(rig: Rig) -> str:
    """What a planted hook does with the rights it runs with: look for the worker's LLM key in
    every environment it can read, list the worker's home folder, write outside the workspace."""
    place = rig.place
    out = place.workspace / "hook-report.txt"
    outside = place.base / "written-by-the-hook"
    return (
        "#!/bin/sh\n"
        f"{{ echo hook-ran\n"
        f"  echo keys=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'"
        f" | grep -c '^LLM_API_KEY=sk-{place.secret}$')\n"
        f"  echo home=$(ls -A '{place.home}' 2>/dev/null | tr '\\n' ' ')\n"
        f"  touch '{outside}' 2>/dev/null && echo wrote-outside\n"
        f"}} > '{out}' 2>&1\n"
    )


async def test_a_git_hook_planted_by_a_command_runs_in_the_sandbox_not_as_the_worker(
    client: Client, rig: Rig
) -> None:
    place = rig.place
    repo = place.workspace / "repo"
    plant = (
        f"git init -q {repo} && cat > {place.workspace}/hook.sh <<'EOF'\n{hook_script(rig)}EOF\n"
        f"chmod +x {place.workspace}/hook.sh && git -C {repo} config core.fsmonitor"
        f" {place.workspace}/hook.sh && echo planted"
    )
    await rig.fake.enqueue(
        call("call_1", "run_command", {"command": plant}),
        call("call_2", "git__git_status", {"repo_path": str(repo)}),
        done(),
    )
    result = await run_approving(client, rig.queue, "look at the repository", approvals=1)
    planted = tool_data(result, "call_1")
    assert planted["ok"] is True and "planted" in planted["data"]["stdout"], planted
    status = tool_data(result, "call_2")
    assert status["ok"] is True, status  # read-only: it ran without anyone asked
    report = (place.workspace / "hook-report.txt").read_text()
    assert "hook-ran" in report  # git did run the planted hook: in the sandbox
    assert "keys=0" in report, report  # no environment with the worker's key is readable
    home = [line for line in report.splitlines() if line.startswith("home=")]
    assert home == ["home="], report  # the worker's home folder is not there
    assert "wrote-outside" not in report, report
    assert not (place.base / "written-by-the-hook").exists()


def probe_script(place: Deployment, socket_path: str) -> str:
    """Print whatever of the worker's surroundings a command can read."""
    return "; ".join(
        [
            f"cat {place.state}/tool-calls/* 2>/dev/null; ls -A {place.state} 2>/dev/null",
            f"cat {place.dotenv} 2>/dev/null",
            "cat /etc/shadow /etc/gshadow 2>/dev/null",
            f"ls -A {place.app} 2>/dev/null; cat {place.app}/app.env 2>/dev/null",
            f"ls -A {place.home} 2>/dev/null; cat {place.home}/.ssh/id_test 2>/dev/null",
            '/usr/bin/python3 -c "import socket; s = socket.socket(socket.AF_UNIX);'
            f" s.connect('{socket_path}'); print(s.recv(100))\" 2>/dev/null",
            "echo probe-finished",
        ]
    )


async def test_a_command_cannot_read_what_lies_around_the_workspace(
    client: Client, rig: Rig
) -> None:
    place = rig.place
    # A first command whose output the worker records in its state folder (not safe to retry).
    record = f"recorded-output-{place.secret}"
    await rig.fake.enqueue(call("call_1", "run_command", {"command": f"echo {record}"}), done())
    first = await run_approving(client, rig.queue, "first", approvals=1)
    assert tool_data(first, "call_1")["data"]["stdout"] == f"{record}\n"
    assert any(record in p.read_text() for p in (place.state / "tool-calls").iterdir())

    probe = probe_script(place, str(rig.socket.path))
    await rig.fake.enqueue(call("call_1", "run_command", {"command": probe}), done())
    second = await run_approving(client, rig.queue, "second", approvals=1)
    data = tool_data(second, "call_1")["data"]
    seen = data["stdout"]
    assert seen.endswith("probe-finished\n"), data
    assert record not in seen  # the state folder's records
    assert place.secret not in seen  # .env beside the workspace, the cwd's file, the home's key
    assert "root:" not in seen  # /etc/shadow
    assert "app.env" not in seen and "id_test" not in seen and ".ssh" not in seen
    assert "hello-from-the-host-socket" not in seen
    assert rig.socket.connections == 0
