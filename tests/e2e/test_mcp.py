"""Tools from real MCP servers, through the production worker (`run_worker`): the real
`call_llm` over httpx against the OpenAI-compatible server on 127.0.0.1 (scripted tool calls),
the real `execute_tool`, and real MCP servers as processes: `mcp-server-time` and
`mcp-server-git` from PyPI, and our own (`tests/mcp_server.py`) over stdio and streamable HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from activities.plugin import AgentPlugin, run_worker
from runtime.settings import Settings
from tests.fake_openai import FakeOpenAI, FakeOpenAIServer, text, tool_calls
from tests.helpers import events, of_type, start_run, wait_for_phase, wait_until
from tests.ports import free_port
from tests.reliability.processes import ROOT, port_open
from tests.sandbox_support import server_entry, server_pids
from workflows.model import AgentRunInput

BIN = Path(sys.executable).parent


def tool_content(result: Any, call_id: str) -> dict[str, Any]:
    """The parsed tool message the model got for `call_id`."""
    (message,) = [m for m in result.messages if m.role == "tool" and m.tool_call_id == call_id]
    parsed: dict[str, Any] = json.loads(message.content)
    return parsed


def own_stdio_server(mark: str = "", **env: str) -> dict[str, Any]:
    return server_entry(mark=mark or uuid.uuid4().hex, **env)


@contextlib.asynccontextmanager
async def agent_worker(
    client: Client, task_queue: str, tmp_path: Path, servers: dict[str, Any], **settings: Any
) -> AsyncIterator[FakeOpenAIServer]:
    """The fake model and a production worker with these MCP servers; yields the fake model."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    with FakeOpenAI() as fake:
        ready = asyncio.Event()
        stop = asyncio.Event()
        worker = asyncio.create_task(
            run_worker(
                client,
                Settings(
                    llm_base_url=fake.base_url,
                    llm_api_key="sk-test",
                    llm_model="fake-model",
                    workspace=workspace,
                    state_dir=tmp_path / "state",
                    mcp_config=config,
                    **settings,
                ),
                queue=task_queue,
                stop=stop,
                ready=lambda _q: ready.set(),
            )
        )
        try:
            done, _ = await asyncio.wait(
                [worker, asyncio.create_task(ready.wait())],
                timeout=60,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if worker in done:
                worker.result()  # the start failed: raise its error
            yield fake
        finally:
            stop.set()
            await worker


def offered(fake: FakeOpenAIServer, index: int = 0) -> dict[str, dict[str, Any]]:
    """The tools of the model's `index`-th request, by name."""
    return {t["function"]["name"]: t["function"] for t in fake.requests[index]["tools"]}


async def test_a_read_only_time_tool_runs_without_approval_and_its_result_reaches_the_model(
    client, task_queue, tmp_path
):
    servers = {"time": {"command": str(BIN / "mcp-server-time"), "args": []}}
    async with agent_worker(client, task_queue, tmp_path, servers) as fake:
        fake.enqueue(
            tool_calls(("call_1", "time__get_current_time", '{"timezone": "UTC"}')),
            text("It is now."),
        )
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("what time?"))
        result = await handle.result()
        log = await events(handle)
    assert result.finish_reason == "stop"
    assert of_type(log, "awaiting_approval") == []
    content = tool_content(result, "call_1")
    assert content["ok"] is True
    assert content["data"]["timezone"] == "UTC"
    assert content["data"]["datetime"].endswith("+00:00")
    # What the model got in its second request is that same result.
    sent = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"]
    assert json.loads(sent[0]["content"])["data"]["datetime"] == content["data"]["datetime"]
    tools = offered(fake)
    assert "timezone" in tools["time__get_current_time"]["parameters"]["properties"]
    assert {"time__convert_time", "list_dir", "run_command"} <= set(tools)


async def test_a_plain_worker_given_the_plugin_runs_the_mcp_servers_for_as_long_as_it_runs(
    client, task_queue, tmp_path
):
    """`Worker(client, plugins=[AgentPlugin(...)])`, no `run_worker`: the plugin's run context
    starts the servers when the worker runs and stops them when it stops."""
    mark = uuid.uuid4().hex
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"own": own_stdio_server(mark)}}))
    (tmp_path / "ws").mkdir()
    with FakeOpenAI() as fake:
        settings = Settings(
            llm_base_url=fake.base_url,
            llm_api_key="sk-test",
            llm_model="fake-model",
            workspace=tmp_path / "ws",
            state_dir=tmp_path / "state",
            mcp_config=config,
        )
        plugin = AgentPlugin(settings=settings)
        assert server_pids(mark) == []  # built, not started
        fake.enqueue(tool_calls(("call_1", "own__pid", "{}")), text("done"))
        async with Worker(client, task_queue=task_queue, plugins=[plugin]):
            handle = await start_run(client, task_queue, AgentRunInput.from_prompt("pid?"))
            result = await handle.result()
            running = server_pids(mark)
    assert result.finish_reason == "stop"
    assert tool_content(result, "call_1")["ok"] is True
    assert "own__pid" in offered(fake)
    assert len(running) == 1
    await wait_until(lambda: all(_zombie(pid) for pid in running))  # stopped with the worker


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository in the workspace (a stdio server sees the workspace, nothing beside it)."""
    path = tmp_path / "ws" / "repo"
    path.mkdir(parents=True)
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (path / "README").write_text("hello\n")
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    return path


def branches(repo: Path) -> set[str]:
    out = subprocess.run(
        ["git", "-C", str(repo), "branch", "--format=%(refname:short)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return set(out.split())


async def test_git_reads_run_and_writes_wait_for_approval(client, task_queue, tmp_path, repo):
    servers = {"git": {"command": str(BIN / "mcp-server-git"), "args": ["--repository", str(repo)]}}
    path = json.dumps(str(repo))
    async with agent_worker(client, task_queue, tmp_path, servers) as fake:
        fake.enqueue(
            tool_calls(("call_1", "git__git_status", f'{{"repo_path": {path}}}')),
            tool_calls(
                (
                    "call_2",
                    "git__git_create_branch",
                    f'{{"repo_path": {path}, "branch_name": "feature"}}',
                )
            ),
            text("Branch made."),
            tool_calls(
                (
                    "call_3",
                    "git__git_create_branch",
                    f'{{"repo_path": {path}, "branch_name": "unwanted"}}',
                )
            ),
            text("Understood."),
        )
        approved = await start_run(client, task_queue, AgentRunInput.from_prompt("branch"))
        status = await wait_for_phase(approved, "awaiting_approval")
        assert [c.name for c in status.pending_approvals] == ["git__git_create_branch"]
        assert branches(repo) == {"main"}  # nothing happened before the answer
        await approved.signal("tool_approval", {"call_id": "call_2", "approved": True})
        result = await approved.result()

        rejected = await start_run(client, task_queue, AgentRunInput.from_prompt("again"))
        await wait_for_phase(rejected, "awaiting_approval")
        await rejected.signal(
            "tool_approval", {"call_id": "call_3", "approved": False, "reason": "no"}
        )
        second = await rejected.result()
    status_result = tool_content(result, "call_1")
    assert status_result["ok"] is True
    assert "On branch main" in status_result["data"]
    assert tool_content(result, "call_2")["ok"] is True
    assert branches(repo) == {"main", "feature"}  # approved: the repository changed
    assert [m.content for m in second.messages if m.role == "tool"] == ["Rejected: no"]
    assert branches(repo) == {"main", "feature"}  # rejected: unchanged


async def test_a_killed_stdio_server_is_started_again_for_the_next_call(
    client, task_queue, tmp_path
):
    mark = uuid.uuid4().hex
    servers = {"own": own_stdio_server(mark)}
    async with agent_worker(client, task_queue, tmp_path, servers) as fake:
        fake.enqueue(tool_calls(("call_1", "own__pid", "{}")), text("first"))
        first = await (await start_run(client, task_queue, AgentRunInput.from_prompt("a"))).result()
        assert tool_content(first, "call_1")["ok"] is True
        [pid] = server_pids(mark)  # its host pid (it reports its own PID namespace's)
        os.kill(pid, signal.SIGKILL)
        await wait_until(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid))
        fake.enqueue(
            tool_calls(("call_1", "own__pid", "{}")),
            tool_calls(("call_2", "own__echo", '{"text": "still here"}')),
            text("second"),
        )
        second = await (
            await start_run(client, task_queue, AgentRunInput.from_prompt("b"))
        ).result()
        [new_pid] = server_pids(mark)
    again = tool_content(second, "call_1")
    assert again["ok"] is True, again
    assert new_pid != pid  # a new server process answered
    assert tool_content(second, "call_2") == {
        "ok": True,
        "data": {"text": "still here", "length": 10},
    }


def _zombie(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    return True


class HttpServer:
    """Our own streamable-HTTP MCP server on 127.0.0.1, started and stopped by pid."""

    def __init__(self, folder: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.notes = folder / "notes.txt"
        self.log_path = folder / "http-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "NOTES_FILE": str(self.notes)}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.mcp_server", "http", "--port", str(self.port)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        for _ in range(400):
            if port_open(self.port) or self.proc.poll() is not None:
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert port_open(self.port), self.log_path.read_text()

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def http_server(tmp_path: Path) -> Any:
    server = HttpServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_a_streamable_http_server_of_our_own(client, task_queue, tmp_path, http_server):
    url, notes = http_server.url, http_server.notes
    servers = {"web": {"url": url, "headers": {"X-Test": "1"}}}
    async with agent_worker(client, task_queue, tmp_path, servers) as fake:
        fake.enqueue(
            tool_calls(
                ("call_1", "web__echo", '{"text": "over http"}'),
                ("call_2", "web__fail", '{"reason": "on purpose"}'),
                ("call_3", "web__odd_name_with_spaces", "{}"),
            ),
            tool_calls(("call_4", "web__note", '{"line": "approved note"}')),
            text("done"),
        )
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("web"))
        status = await wait_for_phase(handle, "awaiting_approval")
        assert [c.name for c in status.pending_approvals] == ["web__note"]
        assert not notes.exists()
        await handle.signal("tool_approval", {"call_id": "call_4", "approved": True})
        result = await handle.result()
    assert tool_content(result, "call_1") == {
        "ok": True,
        "data": {"text": "over http", "length": 9},
    }
    failed = tool_content(result, "call_2")
    assert failed["ok"] is False and "fail" in failed["error"], failed
    assert tool_content(result, "call_3") == {"ok": True, "data": "odd"}
    assert tool_content(result, "call_4")["ok"] is True
    assert notes.read_text() == "approved note\n"


async def test_an_immediate_cancel_reaches_a_running_mcp_call(client, task_queue, tmp_path):
    async with agent_worker(client, task_queue, tmp_path, {"own": own_stdio_server()}) as fake:
        fake.enqueue(tool_calls(("call_1", "own__wait", '{"seconds": 300}')))
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("wait"))

        async def calling() -> bool:
            return bool(of_type(await events(handle), "tool_call"))

        await wait_until(calling)
        await asyncio.sleep(1.0)  # the activity is in the server's call now
        await handle.signal("cancel", {"immediate": True, "reason": "enough"})
        result = await asyncio.wait_for(handle.result(), 60)  # far less than the 300 s call
        # The session survived the cancelled call: the next run's call is answered.
        fake.enqueue(tool_calls(("call_1", "own__echo", '{"text": "after"}')), text("ok"))
        after = await (await start_run(client, task_queue, AgentRunInput.from_prompt("e"))).result()
    assert result.finish_reason == "cancelled"
    assert tool_content(after, "call_1")["ok"] is True


async def test_a_stdio_server_gets_no_secrets_from_the_worker(
    client, task_queue, tmp_path, monkeypatch
):
    monkeypatch.setenv("LLM_API_KEY", "sk-must-not-leak")
    monkeypatch.setenv("AGENT_ENCRYPTION_KEY_EXTRA", "secret")
    servers = {"own": own_stdio_server(CHOSEN="yes")}
    async with agent_worker(client, task_queue, tmp_path, servers) as fake:
        fake.enqueue(tool_calls(("call_1", "own__environment", "{}")), text("ok"))
        result = await (
            await start_run(client, task_queue, AgentRunInput.from_prompt("e"))
        ).result()
    names = set(tool_content(result, "call_1")["data"].split("\n"))
    allowed = {"PATH", "HOME", "LANG", "PYTHONPATH", "MCP_TEST_MARK", "CHOSEN"}
    assert names - {"PWD"} == allowed  # bubblewrap sets PWD (the workspace) with --chdir


async def test_the_entry_can_require_approval_for_every_tool(client, task_queue, tmp_path):
    servers = {"time": {"command": str(BIN / "mcp-server-time"), "approval": "always"}}
    async with agent_worker(client, task_queue, tmp_path, servers) as fake:
        fake.enqueue(
            tool_calls(("call_1", "time__get_current_time", '{"timezone": "UTC"}')),
            text("ok"),
        )
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("time"))
        status = await wait_for_phase(handle, "awaiting_approval")
        assert [c.name for c in status.pending_approvals] == ["time__get_current_time"]
        await handle.signal("tool_approval", {"call_id": "call_1", "approved": True})
        result = await handle.result()
    assert tool_content(result, "call_1")["ok"] is True


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found


async def test_python_worker_py_starts_its_mcp_servers_and_stops_them(client, task_queue, tmp_path):
    from tests.reliability.processes import WORKER_CLEAN_EXIT_CODES, start_worker, worker_env

    config = tmp_path / "mcp.json"
    servers = {"own": own_stdio_server(), "time": {"command": str(BIN / "mcp-server-time")}}
    config.write_text(json.dumps({"mcpServers": servers}))
    env = worker_env(
        address=client.service_client.config.target_host,
        task_queue=task_queue,
        workspace=tmp_path / "ws",
        state_dir=tmp_path / "state",
        llm_base_url=None,
        extra={"AGENT_MCP_CONFIG": str(config), "AGENT_BUILTIN_TOOLS": "no"},
    )
    worker = await start_worker("mcp-worker", env, tmp_path / "logs")
    try:
        ready = await worker.wait_for_line("worker ready")
        assert " tools=12 " in ready, ready  # 10 of our own server, 2 of the time server
        servers_running = children(worker.pid)
        assert len(servers_running) == 2, servers_running
    finally:
        code = worker.stop()
    assert code in WORKER_CLEAN_EXIT_CODES, worker.stderr_tail()
    assert [p for p in servers_running if _running(p)] == []


def _running(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and not _zombie(pid)


async def test_an_http_server_that_went_away_is_an_error_result_until_it_is_back(
    client, task_queue, tmp_path, http_server
):
    servers = {"web": {"url": http_server.url}}
    echo = ("call_1", "web__echo", '{"text": "hi"}')
    async with agent_worker(client, task_queue, tmp_path, servers) as fake:

        async def one_run() -> Any:
            fake.enqueue(tool_calls(echo), text("done"))
            handle = await start_run(client, task_queue, AgentRunInput.from_prompt("echo"))
            return await handle.result()

        before = await one_run()
        http_server.stop()
        gone = await one_run()
        http_server.start()
        back = await one_run()
    assert tool_content(before, "call_1")["ok"] is True
    failed = tool_content(gone, "call_1")
    assert failed["ok"] is False and failed["data"] is None
    assert failed["error"].startswith("MCP server 'web' failed: "), failed
    assert gone.finish_reason == "stop"  # the run went on
    assert tool_content(back, "call_1") == {"ok": True, "data": {"text": "hi", "length": 2}}
