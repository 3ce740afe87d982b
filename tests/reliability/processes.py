"""Real processes for the reliability suites: a Temporal dev server with a database file,
`python worker.py` subprocesses, the fake OpenAI server as a subprocess, and the `temporal` CLI /
starter as a user runs them. Every process is started by pid and stopped by pid (SIGTERM, wait,
SIGKILL); nothing here kills by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import DEV_SERVER_ARGS, venv_binary
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: `worker.py` and the `starter` package live here."""


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


class ManagedProcess:
    """A subprocess whose stdout is collected line by line in a thread (the pipe never fills),
    with stderr going to a log file. Stopped with SIGTERM, a wait, then SIGKILL."""

    def __init__(
        self,
        name: str,
        args: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
        log_dir: Path,
    ) -> None:
        self.name = name
        self.args = list(args)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = log_dir / f"{name}-{time.monotonic_ns()}.stderr.log"
        self._stderr = self.stderr_path.open("wb")
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            self.args,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            errors="replace",
        )
        self._reader = threading.Thread(target=self._read, name=f"{name}-stdout", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def output(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def stderr_tail(self, chars: int = 2000) -> str:
        """The end of what the process wrote to stderr (it writes to the file itself: nothing of
        it is buffered here, and the file may be read after `stop` closed our handle)."""
        with contextlib.suppress(OSError):
            return self.stderr_path.read_text(errors="replace")[-chars:]
        return ""

    async def wait_for_line(self, prefix: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.output():
                if line.startswith(prefix):
                    return line
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} before printing {prefix!r};"
                    f" stderr:\n{self.stderr_tail()}"
                )
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{self.name} did not print {prefix!r} within {timeout}s")

    def kill(self) -> None:
        """SIGKILL, as a crash: no cleanup runs in the process."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        with contextlib.suppress(OSError):
            self._stderr.close()
        return self.proc.returncode


# ---------------------------------------------------------------- the dev server


@dataclass
class DevServer:
    """`temporal server start-dev` with a database file, so it can stop and start again with
    its state (workflows, timers, search attributes) intact."""

    db_file: Path
    log_dir: Path
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    process: ManagedProcess | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self, timeout: float = 60.0) -> None:
        args = [
            venv_binary("temporal"),
            "server",
            "start-dev",
            "--db-filename",
            str(self.db_file),
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--ui-port",
            str(self.ui_port),
            "--headless",
            *DEV_SERVER_ARGS,
        ]
        self.process = ManagedProcess("temporal-dev", args, log_dir=self.log_dir)
        deadline = time.monotonic() + timeout
        while not port_open(self.port):
            if self.process.proc.poll() is not None:
                raise RuntimeError(
                    f"dev server exited with {self.process.proc.returncode}:"
                    f" {self.process.stderr_tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError("dev server did not open its port")
            await asyncio.sleep(0.1)

    def stop(self) -> int | None:
        if self.process is None:
            return None
        code = self.process.stop(timeout=20)
        self.process = None
        return code


# ---------------------------------------------------------------- workers


def worker_env(
    *,
    address: str,
    task_queue: str,
    workspace: Path,
    state_dir: Path,
    llm_base_url: str | None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_")) and k != "PYTHONPATH"
    }
    env.update(
        {
            "TEMPORAL_ADDRESS": address,
            "TEMPORAL_NAMESPACE": "default",
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_WORKSPACE": str(workspace),
            "AGENT_STATE_DIR": str(state_dir),
            "LLM_API_KEY": "sk-reliability-test",
            "LLM_MODEL": "fake-model",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if llm_base_url:
        env["LLM_BASE_URL"] = llm_base_url
    if extra:
        env.update(extra)
    return env


async def start_worker(name: str, env: dict[str, str], log_dir: Path) -> ManagedProcess:
    """`python worker.py`, returned once it printed `worker ready`."""
    worker = ManagedProcess(name, [sys.executable, "worker.py"], env=env, log_dir=log_dir)
    try:
        await worker.wait_for_line("worker ready", timeout=90)
    except BaseException:
        worker.stop()
        raise
    return worker


WORKER_CLEAN_EXIT_CODES = {0}
"""worker.py leaves through `os._exit(code)` after a graceful stop (see `runtime.process.exit_now`), so the
SDK's interpreter-exit crash (a known SDK problem) cannot replace the code: 0 is expected."""


@contextlib.contextmanager
def stopping(*processes: ManagedProcess) -> Iterator[None]:
    try:
        yield
    finally:
        for process in processes:
            process.stop()


# ---------------------------------------------------------------- user commands


@dataclass
class CommandResult:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return (self.stdout + self.stderr).strip()

    def summary(self, limit: int = 240) -> str:
        text = " ".join(self.output.split())
        if len(text) > limit:
            text = text[: limit - 3] + "..."
        return f"exit {self.returncode}: {text}" if text else f"exit {self.returncode}"


async def run_command(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
    input_bytes: bytes | None = None,
) -> CommandResult:
    """Run a command to its end (in a thread, so the event loop and in-process workers go on)."""

    def run() -> CommandResult:
        done = subprocess.run(
            list(args),
            cwd=ROOT,
            env=env,
            input=input_bytes,
            capture_output=True,
            timeout=timeout,
        )
        return CommandResult(
            list(args),
            done.returncode,
            done.stdout.decode("utf-8", errors="replace"),
            done.stderr.decode("utf-8", errors="replace"),
        )

    return await asyncio.to_thread(run)


async def temporal_cli(address: str, *args: str, timeout: float = 60.0) -> CommandResult:
    """`temporal <args> --address <address>`, as a user types it."""
    return await run_command(
        [venv_binary("temporal"), *args, "--address", address], timeout=timeout
    )


async def signal_cli(
    address: str, workflow_id: str, name: str, input_text: str | None
) -> CommandResult:
    """`temporal workflow signal --workflow-id W --name NAME [--input JSON]`."""
    args = ["workflow", "signal", "--workflow-id", workflow_id, "--name", name]
    if input_text is not None:
        args += ["--input", input_text]
    return await temporal_cli(address, *args)


async def starter(
    address: str, task_queue: str, *args: str, timeout: float = 90.0
) -> CommandResult:
    """`python -m starter <args>` against `address`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_"))}
    env.update({"TEMPORAL_ADDRESS": address, "AGENT_TASK_QUEUE": task_queue})
    return await run_command([sys.executable, "-m", "starter", *args], env=env, timeout=timeout)


# ---------------------------------------------------------------- the fake LLM as a process


class FakeLLMProcess:
    """`python -m tests.fake_openai --port N` as its own process, driven over its control
    endpoints (`POST /_fake/enqueue`, `GET /_fake/requests`)."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.process = ManagedProcess(
            "fake-openai",
            [sys.executable, "-m", "tests.fake_openai", "--port", str(self.port)],
            log_dir=log_dir,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    async def ready(self) -> None:
        await self.process.wait_for_line("listening on", timeout=30)

    async def enqueue(self, *behaviours: dict[str, object]) -> None:
        async with httpx.AsyncClient() as http:
            response = await http.post(f"{self.url}/_fake/enqueue", json=list(behaviours))
            response.raise_for_status()

    async def snapshot(self) -> dict[str, Any]:
        async with httpx.AsyncClient() as http:
            response = await http.get(f"{self.url}/_fake/requests")
            response.raise_for_status()
            value: dict[str, Any] = response.json()
            return value

    async def requests(self) -> list[dict[str, Any]]:
        requests: list[dict[str, Any]] = (await self.snapshot())["requests"]
        return requests

    def stop(self) -> int | None:
        return self.process.stop()
