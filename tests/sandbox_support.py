"""What the sandbox tests share: a deployment laid out the way an operator lays one out outside
/tmp and any home folder (`/var/tmp/...`, like `/srv/agent`), a real `python worker.py` started in
it, the fake model as its own process, and approving the calls the model makes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from tests.helpers import start_run, status, wait_until
from tests.reliability.processes import ROOT, ManagedProcess
from workflows.model import AgentRunInput, AgentRunResult

BIN = Path(sys.executable).parent


@dataclass
class Deployment:
    """`base/app` is the worker's working directory (with `app.env`), `base/srv/ws` the workspace,
    `base/srv/.env` a secret beside it, `base/srv/.agent-state` the default state folder,
    `base/home` the worker's HOME (with `.ssh/id_test`), `base/sock` a folder for UNIX sockets."""

    base: Path
    secret: str = field(default_factory=lambda: f"secret-{uuid.uuid4().hex}")

    @property
    def app(self) -> Path:
        return self.base / "app"

    @property
    def workspace(self) -> Path:
        return self.base / "srv" / "ws"

    @property
    def state(self) -> Path:
        return self.base / "srv" / ".agent-state"

    @property
    def dotenv(self) -> Path:
        return self.base / "srv" / ".env"

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def sockets(self) -> Path:
        return self.base / "sock"

    def lay_out(self) -> None:
        for folder in (self.app, self.workspace, self.home / ".ssh", self.sockets):
            folder.mkdir(parents=True, exist_ok=True)
        (self.app / "app.env").write_text(f"APP_TOKEN={self.secret}-cwd\n")
        self.dotenv.write_text(f"API_TOKEN={self.secret}-dotenv\n")
        (self.home / ".ssh" / "id_test").write_text(f"PRIVATE KEY {self.secret}-home\n")


@contextlib.contextmanager
def deployment() -> Iterator[Deployment]:
    """A fresh deployment under /var/tmp (outside /tmp, /run and any home), removed afterwards."""
    base = Path("/var/tmp") / f"durable-agent-test-{uuid.uuid4().hex[:12]}"
    place = Deployment(base)
    place.lay_out()
    try:
        yield place
    finally:
        shutil.rmtree(base, ignore_errors=True)


def deployment_env(
    place: Deployment, *, address: str, task_queue: str, llm_base_url: str | None, **extra: str
) -> dict[str, str]:
    """The worker's environment: the LLM key is the deployment's secret, HOME is its home, the
    state folder is left to its default (next to the workspace)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_")) and k != "PYTHONPATH"
    }
    env.update(
        TEMPORAL_ADDRESS=address,
        TEMPORAL_NAMESPACE="default",
        AGENT_TASK_QUEUE=task_queue,
        AGENT_WORKSPACE=str(place.workspace),
        LLM_API_KEY=f"sk-{place.secret}",
        LLM_MODEL="fake-model",
        HOME=str(place.home),
        PYTHONUNBUFFERED="1",
    )
    if llm_base_url:
        env["LLM_BASE_URL"] = llm_base_url
    env.update(extra)
    return env


async def start_deployed_worker(place: Deployment, env: dict[str, str]) -> ManagedProcess:
    """`python <repo>/worker.py` with the deployment's `app` folder as its working directory."""
    worker = ManagedProcess(
        "deployed-worker",
        [sys.executable, str(ROOT / "worker.py")],
        env=env,
        cwd=place.app,
        log_dir=place.base / "logs",
    )
    try:
        await worker.wait_for_line("worker ready", timeout=90)
    except BaseException:
        worker.stop()
        raise
    return worker


def mcp_config(place: Deployment, servers: dict[str, Any]) -> Path:
    path = place.app / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


async def run_approving(
    client: Client, task_queue: str, prompt: str, *, approvals: int = 10
) -> AgentRunResult:
    """Start a run and approve every call that waits for a person, until it ends."""
    handle: WorkflowHandle[Any, AgentRunResult] = await start_run(
        client, task_queue, AgentRunInput.from_prompt(prompt)
    )
    answered: set[str] = set()

    async def waiting_or_done() -> bool:
        now = await status(handle)
        if now.phase in ("completed", "failed", "cancelled", "finished"):
            return True
        for call in now.pending_approvals:
            if call.id not in answered and len(answered) < approvals:
                answered.add(call.id)
                await handle.signal("tool_approval", {"call_id": call.id, "approved": True})
        return False

    with contextlib.suppress(TimeoutError):
        await wait_until(waiting_or_done, timeout=60, interval=0.2)
    return await handle.result()


def tool_data(result: AgentRunResult, call_id: str) -> dict[str, Any]:
    """The parsed tool message the model got for `call_id`."""
    [message] = [m for m in result.messages if m.role == "tool" and m.tool_call_id == call_id]
    parsed: dict[str, Any] = json.loads(message.content)
    return parsed


class UnixListener:
    """A UNIX socket server the test runs: it records every connection and greets it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.connections = 0
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        os.chmod(path, 0o777)
        self._server.listen(8)
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            with conn:
                with contextlib.suppress(OSError):
                    conn.sendall(b"hello-from-the-host-socket\n")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._server.close()


def server_entry(*, mark: str, **env: str) -> dict[str, Any]:
    """Our own MCP server (`tests/mcp_server.py`) over stdio. In the sandbox it sees the
    repository's `tests` folder (`read_only`), nothing else of it; `MCP_TEST_MARK` lets a test find
    its process from outside (`server_pids`)."""
    return {
        "command": sys.executable,
        "args": ["-m", "tests.mcp_server", "stdio"],
        "env": {"PYTHONPATH": str(ROOT), "MCP_TEST_MARK": mark, **env},
        "read_only": [str(ROOT / "tests")],
    }


def server_pids(mark: str) -> list[int]:
    """Host pids of our own MCP server processes started with `MCP_TEST_MARK=mark` (the pid a
    sandboxed server reports is its PID namespace's, not the host's)."""
    wanted = [sys.executable, "-m", "tests.mcp_server", "stdio"]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
            if argv != wanted:
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        if state != "Z" and f"MCP_TEST_MARK={mark}".encode() in environ:
            found.append(int(entry.name))
    return found
