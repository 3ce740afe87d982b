"""Limits that hold for every user: an approved command starts at most
`AGENT_COMMAND_MAX_PROCESSES` processes and uses at most `AGENT_COMMAND_MAX_MEMORY_MB` of memory,
also when the worker runs as root and also when the worker's user already runs hundreds of
threads. Tried from outside: a real `python worker.py` (as root, with its own cgroup per command;
and as an unprivileged user that already runs a 600-thread process, where rlimits counted the
kernel's way are what is left), the scripted model, real bubblewrap.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.reliability.processes import ROOT, ManagedProcess, stopping
from tests.sandbox_support import Deployment, deployment, deployment_env, run_approving
from workflows.model import AgentRunResult

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (.ci/run installs it)"
)

FORK_BOMB = (
    '/usr/bin/python3 -c "import os, time\n'
    "started = 0\n"
    "try:\n"
    "    while started < 1000:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(30); os._exit(0)\n"
    "        started += 1\n"
    "except OSError as err:\n"
    "    print('refused', err.errno)\n"
    "print('started', started)\""
)
"""Forks sleeping children until the kernel refuses one (or 1,000 are running)."""
MEMORY_HOG = (
    '/usr/bin/python3 -c "block = bytearray(300 << 20)\n'
    "block[::4096] = bytes(len(range(0, len(block), 4096)))\n"
    "print('allocated', len(block) >> 20, 'MiB')\""
)
"""Allocates and touches 300 MiB."""


def command_result(result: AgentRunResult) -> dict[str, object]:
    [tool] = [m for m in result.messages if m.role == "tool"]
    parsed: dict[str, object] = json.loads(tool.content)
    assert parsed["ok"] is True, parsed
    data = parsed["data"]
    assert isinstance(data, dict)
    return data


def started_count(data: dict[str, object]) -> int:
    lines = str(data["stdout"]).split()
    return int(lines[lines.index("started") + 1])


def cgroups_writable() -> bool:
    """Whether a cgroup hierarchy with the pids controller may be written here."""
    candidates = ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"]
    return any(os.access(p, os.W_OK) and (Path(p) / "cgroup.procs").exists() for p in candidates)


@pytest.mark.skipif(
    os.geteuid() != 0 or not cgroups_writable(),
    reason="needs root where the worker may create cgroups",
)
async def test_as_root_a_fork_bomb_and_a_memory_hog_stop_at_the_limits(
    client: Client, task_queue: str
) -> None:
    with deployment() as place:
        env = deployment_env(
            place,
            address=client.service_client.config.target_host,
            task_queue=task_queue,
            llm_base_url=None,
            AGENT_COMMAND_MAX_PROCESSES="40",
            AGENT_COMMAND_MAX_MEMORY_MB="100",
        )
        worker = ManagedProcess(
            "root-worker",
            [sys.executable, str(ROOT / "worker.py")],
            env=env,
            cwd=place.app,
            log_dir=place.base / "logs",
        )
        with stopping(worker):
            ready = await worker.wait_for_line("worker ready", timeout=90)
            bomb = command_result(await run_approving(client, task_queue, f"run: {FORK_BOMB}"))
            hog = command_result(await run_approving(client, task_queue, f"run: {MEMORY_HOG}"))
    forked = started_count(bomb)
    assert 30 <= forked < 40, bomb  # up to the limit (the sandbox's own processes count too)
    assert "refused 11" in str(bomb["stdout"])  # EAGAIN from fork
    assert "allocated" not in str(hog["stdout"]), hog
    assert hog["exit_code"] != 0
    assert " limits=cgroup" in ready, ready
    assert "the command reached its limit of 40 processes" in str(bomb["stderr"])
    assert "the command reached its memory limit of 100 MB" in str(hog["stderr"]), hog


# ---- a user that already runs a thread-heavy process ----


def site_packages() -> str:
    return next(p for p in sys.path if p.endswith("site-packages") and sys.prefix in p)


def system_python() -> str | None:
    """A Python of the OS that another user can run (the venv's may live in root's home), of the
    venv's version so its compiled packages load."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@contextlib.contextmanager
def threads_of(uid: int, count: int, python: str) -> Iterator[ManagedProcess]:
    """A process of `uid` that runs `count` sleeping threads."""
    code = (
        "import threading, time\n"
        f"for _ in range({count}):\n"
        "    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
        "print('threads running', flush=True)\n"
        "time.sleep(600)\n"
    )
    holder = ManagedProcess(
        "thread-holder",
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", python, "-c", code],
        log_dir=Path("/var/tmp"),
        cwd=Path("/"),
    )
    with stopping(holder):
        yield holder


def readable_by_anyone(path: Path) -> bool:
    """Whether a user of no group can read `path` (every folder above it searchable)."""
    path = path.resolve()
    if not path.stat().st_mode & stat.S_IROTH:
        return False
    return all(parent.stat().st_mode & stat.S_IXOTH for parent in path.parents)


def user_worker(place: Deployment, env: dict[str, str], uid: int, python: str) -> ManagedProcess:
    env = {**env, "PYTHONPATH": f"{ROOT}:{site_packages()}"}
    return ManagedProcess(
        "user-worker",
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            python,
            str(ROOT / "worker.py"),
        ],
        env=env,
        cwd=place.app,
        log_dir=place.base / "logs",
    )


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or system_python() is None,
    reason="needs root (to switch to a fresh uid with setpriv) and a system Python",
)
async def test_a_user_with_a_600_thread_process_can_run_commands_and_is_still_limited(
    client: Client, task_queue: str
) -> None:
    python = system_python()
    assert python is not None
    for needed in (ROOT / "worker.py", Path(site_packages()) / "temporalio" / "__init__.py"):
        if not readable_by_anyone(needed):  # e.g. a clone inside a mode-700 temporary folder
            pytest.skip(f"another user cannot read {needed} (a folder above it is private)")
    uid = random.randint(61_000, 64_000)  # a uid no process runs as
    with deployment() as place:
        for folder in [place.base, *place.base.rglob("*")]:
            os.chown(folder, uid, uid)
        env = deployment_env(
            place,
            address=client.service_client.config.target_host,
            task_queue=task_queue,
            llm_base_url=None,
            AGENT_COMMAND_MAX_PROCESSES="50",
        )
        with threads_of(uid, 600, python) as holder:
            await holder.wait_for_line("threads running", timeout=60)
            worker = user_worker(place, env, uid, python)
            with stopping(worker):
                ready = await worker.wait_for_line("worker ready", timeout=120)
                plain = command_result(await run_approving(client, task_queue, "run: echo ok"))
                bomb = command_result(await run_approving(client, task_queue, f"run: {FORK_BOMB}"))
    assert plain == {"stdout": "ok\n", "stderr": "", "exit_code": 0}, plain
    forked = started_count(bomb)
    assert 40 <= forked <= 50, bomb  # the worker's own threads come and go around the count
    assert "refused 11" in str(bomb["stdout"])
    assert " limits=rlimit " in ready, ready  # a user who may not create cgroups here


def test_the_limits_are_settings(tmp_path: Path) -> None:
    from runtime.settings import Settings

    base = {"AGENT_WORKSPACE": str(tmp_path / "w")}
    default = Settings.from_env(base)
    assert (default.command_max_processes, default.command_max_memory_mb) == (256, 1024)
    chosen = Settings.from_env(
        {**base, "AGENT_COMMAND_MAX_PROCESSES": "64", "AGENT_COMMAND_MAX_MEMORY_MB": "512"}
    )
    assert (chosen.command_max_processes, chosen.command_max_memory_mb) == (64, 512)
    for name in ("AGENT_COMMAND_MAX_PROCESSES", "AGENT_COMMAND_MAX_MEMORY_MB"):
        with pytest.raises(ValueError, match=f"^{name} must be a positive whole number"):
            Settings.from_env({**base, name: "lots"})


def test_a_bad_limit_stops_the_worker_naming_the_variable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_"))}
    env.update(
        TEMPORAL_ADDRESS="127.0.0.1:1",
        AGENT_WORKSPACE=str(tmp_path / "ws"),
        AGENT_COMMAND_MAX_MEMORY_MB="0",
    )
    done = subprocess.run(
        [sys.executable, "worker.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "worker: AGENT_COMMAND_MAX_MEMORY_MB must be a positive whole number, got '0'"
    )
