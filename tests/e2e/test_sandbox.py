"""What an approved `run_command` can reach, tried as a hostile model would: through the real
`execute_tool` (and once through a real `python worker.py`), in bubblewrap and without it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from temporalio.client import Client

from activities.agent_activities import AgentActivities
from activities.tools import build_default_registry
from activities.tools.sandbox import CommandPolicy, bwrap_status, choose_policy
from runtime.settings import Settings
from tests.helpers import start_run, wait_for_phase, wait_until
from tests.reliability.processes import ROOT, start_worker, stopping, worker_env
from workflows.model import AgentRunInput, ToolRequest

BWRAP = choose_policy("auto")
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (.ci/run installs it)"
)
"""Skipped only where bwrap is not installed at all; installed but not working is a failure."""


def test_bubblewrap_works_where_it_is_installed():
    if shutil.which("bwrap") is not None:
        assert BWRAP.sandbox == "bwrap", bwrap_status()[1]


PLAIN = choose_policy("off")
POLICIES = [pytest.param(BWRAP, id="bwrap", marks=needs_bwrap), pytest.param(PLAIN, id="none")]
SHELL_NOISE = {"PWD", "SHLVL", "_", "OLDPWD"}
"""Variables the shell itself sets."""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("remember the milk\n")
    return ws


def acts_for(workspace: Path, policy: CommandPolicy, timeout: float = 30.0) -> AgentActivities:
    settings = Settings(
        llm_base_url=None,
        llm_api_key=None,
        llm_model="scripted",
        workspace=workspace,
        state_dir=workspace.parent / "state",
        command_timeout_seconds=timeout,
    )
    registry = build_default_registry(workspace, timeout, commands=policy)
    return AgentActivities(cast(Client, None), settings, registry)


async def command(acts: AgentActivities, text: str) -> dict[str, Any]:
    content = await acts.execute_tool(
        ToolRequest(
            workflow_id="wf-sandbox",
            call_id=f"call-{uuid.uuid4()}",
            name="run_command",
            arguments={"command": text},
        )
    )
    result: dict[str, Any] = json.loads(content)
    assert result["ok"] is True, result
    return cast(dict[str, Any], result["data"])


def pids_running(*argv: str) -> list[int]:
    """Host pids of processes (not zombies) running exactly `argv`."""
    wanted = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if cmdline == wanted and state != "Z":
            found.append(int(entry.name))
    return found


def kill_leftovers(seconds: str) -> None:
    """If a test fails, do not leave its `sleep` behind (killed by pid)."""
    for pid in pids_running("sleep", seconds):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def marker_seconds() -> str:
    """A `sleep` argument no other process uses, to find the process from outside."""
    return f"300.{uuid.uuid4().int % 10**9}"


# ---- the environment ----


@pytest.mark.parametrize("policy", POLICIES)
async def test_env_shows_only_the_allow_list(workspace, policy, monkeypatch):
    monkeypatch.setenv("LLM_API_KEY", "sk-do-not-leak")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA-do-not-leak")
    monkeypatch.setenv("DATABASE_URL", "postgres://u:do-not-leak@db/x")
    monkeypatch.setenv("MY_TOOL_SETTING", "passed-on")
    allowed = CommandPolicy(policy.sandbox, env_names=("MY_TOOL_SETTING",), bwrap=policy.bwrap)
    data = await command(acts_for(workspace, allowed), "env")
    variables = dict(line.split("=", 1) for line in data["stdout"].splitlines() if "=" in line)
    assert set(variables) - SHELL_NOISE == {"PATH", "HOME", "LANG", "MY_TOOL_SETTING"}
    assert variables["HOME"] == str(workspace)
    assert variables["PATH"] == os.environ["PATH"]
    assert variables["MY_TOOL_SETTING"] == "passed-on"
    assert "do-not-leak" not in data["stdout"]


ENVIRON_PROBE = (
    "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' > seen.txt;"
    " grep -c -E '^(LLM_API_KEY|TEMPORAL_ADDRESS)=' seen.txt;"
    " grep -c '^PATH=' seen.txt"
)


@needs_bwrap
async def test_a_command_through_the_real_worker_cannot_read_its_environment(
    client, task_queue, tmp_path
):
    """The worker process holds LLM_API_KEY and its Temporal address in its environment; the
    command reads every /proc/*/environ it can see and finds neither."""
    workspace, state = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    secret = f"sk-sandbox-{uuid.uuid4()}"
    env = worker_env(
        address=client.service_client.config.target_host,
        task_queue=task_queue,
        workspace=workspace,
        state_dir=state,
        llm_base_url=None,
        extra={"LLM_API_KEY": secret},
    )
    worker = await start_worker("sandbox-worker", env, tmp_path / "logs")
    with stopping(worker):
        assert "sandbox=bwrap" in worker.output()[0]
        handle = await start_run(
            client, task_queue, AgentRunInput.from_prompt(f"run: {ENVIRON_PROBE}")
        )
        status = await wait_for_phase(handle, "awaiting_approval")
        [pending] = status.pending_approvals
        await handle.signal("tool_approval", {"call_id": pending.id, "approved": True})
        result = await handle.result()
    [tool] = [m for m in result.messages if m.role == "tool"]
    data = json.loads(tool.content)["data"]
    worker_keys, paths = data["stdout"].split()
    assert int(paths) >= 1  # it did read the environments it can see
    assert worker_keys == "0"
    assert secret not in (workspace / "seen.txt").read_text()


# ---- the file system ----


@pytest.mark.parametrize("policy", POLICIES)
async def test_a_command_writes_only_the_workspace(workspace, policy, tmp_path):
    name = f"sandbox-escape-{uuid.uuid4()}"
    home = Path(os.environ.get("HOME", "/root"))
    targets = [Path("/tmp") / name, home / name, tmp_path / name, Path("/var/tmp") / name]
    touches = "; ".join(f"touch {t}" for t in targets)
    try:
        data = await command(acts_for(workspace, policy), f"{touches}; echo kept > inside.txt")
        assert (workspace / "inside.txt").read_text() == "kept\n"
        escaped = [t for t in targets if t.exists()]
        if policy.sandbox == "bwrap":
            assert escaped == [], data
        else:  # without a sandbox a command writes what the worker can: the documented gap
            assert escaped, data
    finally:
        for target in targets:
            target.unlink(missing_ok=True)


@needs_bwrap
async def test_the_sandbox_hides_other_processes_and_has_limits(workspace):
    data = await command(
        acts_for(workspace, BWRAP), "ls -d /proc/[0-9]* | wc -l; cat /proc/self/limits"
    )
    count, *limits = data["stdout"].splitlines()
    assert int(count) <= 5  # bwrap's init, the shell and its pipeline: never the worker
    table = {line[:26].strip(): line[26:].split() for line in limits[1:]}
    assert table["Max file size"][:2] == ["1073741824", "1073741824"]
    assert table["Max address space"][:2] == ["4294967296", "4294967296"]
    assert table["Max cpu time"][0] == "31"
    from activities.tools.cgroups import cgroup_support

    if cgroup_support() is None:  # else the command's cgroup limits it (test_sandbox_limits)
        assert table["Max processes"][0] != "unlimited"
        assert table["Max data size"][0] == str(1024 * 1024 * 1024)


# ---- processes ----


@pytest.mark.parametrize("policy", POLICIES)
async def test_background_processes_end_when_the_command_ends(workspace, policy):
    quiet, detached = marker_seconds(), marker_seconds()
    text = f"nohup sleep {quiet} >/dev/null 2>&1 & echo started"
    if policy.sandbox == "bwrap":  # a new session escapes a process group, not the sandbox
        text += f"; setsid sleep {detached} >/dev/null 2>&1 &"
    try:
        data = await command(acts_for(workspace, policy), text)
        assert data["stdout"] == "started\n"
        await wait_until(lambda: not pids_running("sleep", quiet), timeout=3)
        assert not pids_running("sleep", detached)
    finally:
        kill_leftovers(quiet)
        kill_leftovers(detached)


@pytest.mark.parametrize("policy", POLICIES)
async def test_a_timeout_kills_everything_it_started(workspace, policy):
    seconds = marker_seconds()
    acts = acts_for(workspace, policy, timeout=0.5)
    content = await acts.execute_tool(
        ToolRequest(
            workflow_id="wf-sandbox",
            call_id="call-timeout",
            name="run_command",
            arguments={"command": f"sleep {seconds} & sleep {seconds}"},
        )
    )
    result = json.loads(content)
    assert result["ok"] is False and "timed out after 0.5 s" in result["error"]
    await wait_until(lambda: not pids_running("sleep", seconds), timeout=3)


# ---- the network ----


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on 127.0.0.1 that records what each connection sends."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    received: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    received.append(conn.recv(100))
                except OSError:
                    received.append(b"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], received
    finally:
        stop.set()
        thread.join(5)
        server.close()


def connect_text(port: int) -> str:
    return f"bash -c 'echo hello > /dev/tcp/127.0.0.1/{port}' 2>/dev/null && echo connected"


@pytest.mark.parametrize("network", [False, True], ids=["default", "network"])
@needs_bwrap
async def test_the_host_s_loopback_is_out_of_reach_with_or_without_the_network(
    workspace, listener, network
):
    if network and shutil.which("slirp4netns") is None:
        pytest.skip("slirp4netns is not installed (.ci/run installs it)")
    port, received = listener
    policy = CommandPolicy("bwrap", network=network, bwrap=BWRAP.bwrap)
    data = await command(acts_for(workspace, policy), connect_text(port) + "; cat /proc/net/dev")
    assert "connected" not in data["stdout"]
    assert received == []
    assert ("tap0:" in data["stdout"]) is network  # with the network: its own uplink device


# ---- the worker's start ----


def worker_start_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_"))}
    env.update(
        TEMPORAL_ADDRESS="127.0.0.1:1",  # never reached: the worker stops before connecting
        AGENT_WORKSPACE=str(tmp_path / "ws"),
        AGENT_STATE_DIR=str(tmp_path / "state"),
        **extra,
    )
    return env


def test_the_worker_refuses_to_start_without_a_sandbox_when_required(tmp_path):
    no_bwrap = tmp_path / "bin"
    no_bwrap.mkdir()
    (no_bwrap / "sh").symlink_to("/bin/sh")
    env = worker_start_env(tmp_path, AGENT_SANDBOX="required", PATH=str(no_bwrap))
    done = subprocess.run(
        [sys.executable, "worker.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("worker: AGENT_SANDBOX=required, but run_command cannot be sandboxed")
    assert "bwrap is not installed" in line and "not starting" in line
    assert done.stdout == ""


def test_the_worker_warns_when_commands_are_not_sandboxed(tmp_path):
    env = worker_start_env(tmp_path, AGENT_SANDBOX="off")
    done = subprocess.run(
        [sys.executable, "worker.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    warning, *rest = done.stderr.strip().splitlines()
    assert warning.startswith("worker: warning: run_command is not sandboxed (AGENT_SANDBOX=off)")
    assert "only PATH, HOME, LANG in their environment" in warning
    assert rest and "cannot reach Temporal" in rest[-1]


async def test_the_ready_line_says_which_sandbox(client, task_queue, tmp_path):
    from activities.tools.limits import enforcement

    limits = enforcement()
    for mode, expected in [("auto", BWRAP.sandbox), ("off", "none")]:
        env = worker_env(
            address=client.service_client.config.target_host,
            task_queue=f"{task_queue}-{mode}",
            workspace=tmp_path / "ws",
            state_dir=tmp_path / "state",
            llm_base_url=None,
            extra={"AGENT_SANDBOX": mode},
        )
        worker = await start_worker(f"ready-{mode}", env, tmp_path / "logs")
        with stopping(worker):
            ready = await worker.wait_for_line("worker ready")
        assert f" run_command=on limits={limits} sandbox={expected} " in ready, ready


def test_command_settings_from_env(tmp_path):
    base = {"AGENT_WORKSPACE": str(tmp_path / "w")}
    default = Settings.from_env(base)
    assert (default.sandbox, default.command_env, default.command_network) == ("auto", (), False)
    chosen = Settings.from_env(
        {
            **base,
            "AGENT_SANDBOX": " Required ",
            "AGENT_COMMAND_ENV": "GOPATH, NODE_OPTIONS GOPATH",
            "AGENT_COMMAND_NETWORK": "true",
        }
    )
    assert chosen.sandbox == "required"
    assert chosen.command_env == ("GOPATH", "NODE_OPTIONS")
    assert chosen.command_network is True
    with pytest.raises(ValueError, match="AGENT_SANDBOX must be one of auto, required, off"):
        Settings.from_env({**base, "AGENT_SANDBOX": "maybe"})
    with pytest.raises(ValueError, match="not a variable name"):
        Settings.from_env({**base, "AGENT_COMMAND_ENV": "OK,BAD=1"})


RUN_ONE_COMMAND = """
import asyncio, sys
from pathlib import Path
from activities.tools import build_default_registry
from activities.tools.sandbox import choose_policy
registry = build_default_registry(Path(sys.argv[1]), commands=choose_policy("required"))
asyncio.run(registry.get("run_command").run({"command": sys.argv[2]}))
"""


@needs_bwrap
async def test_a_killed_worker_takes_its_sandboxed_commands_with_it(workspace):
    seconds = marker_seconds()
    host = await asyncio.create_subprocess_exec(
        *[sys.executable, "-c", RUN_ONE_COMMAND, str(workspace), f"sleep {seconds} & wait"],
        cwd=ROOT,
    )
    try:
        await wait_until(lambda: pids_running("sleep", seconds), timeout=10)
        host.kill()  # SIGKILL: no cleanup runs in the worker
        await asyncio.wait_for(host.wait(), 10)
        await wait_until(lambda: not pids_running("sleep", seconds), timeout=5)
    finally:
        if host.returncode is None:
            host.kill()
            await host.wait()
        kill_leftovers(seconds)


# ---- one shell ----

SYSTEM_SH = os.path.realpath("/bin/sh")


@pytest.mark.parametrize("policy", POLICIES)
async def test_commands_run_with_the_sandbox_s_bin_sh_never_the_worker_s_shell(
    workspace, policy, monkeypatch
):
    """A rule means the same command everywhere: `/bin/sh`, whatever `$SHELL` the worker has.
    (Debian's dash has no `${x@P}`: the expansion that bash's sh would run is refused.)"""
    monkeypatch.setenv("SHELL", "/bin/bash")
    text = "readlink /proc/$$/exe; echo ${x=\\044\\(id\\)}${x@P}"
    data = await command(acts_for(workspace, policy), text)
    shell = data["stdout"].splitlines()[0]
    assert shell == SYSTEM_SH, data
    assert "uid=" not in data["stdout"]
