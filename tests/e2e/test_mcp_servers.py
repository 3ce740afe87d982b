"""The worker's MCP sessions against real server processes, without Temporal: start, a server
that does not start, restarts, at-most-once for tools that are not safe to retry, the
environment a stdio server gets. And the pure parts: the config file, names, results."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import mcp_types
import pytest

from activities.tools import Tool, ToolError
from activities.tools.mcp import McpServer, McpServers, McpStartError, offered_name, result_data
from activities.tools.mcp_config import McpConfigError, McpServerConfig, load_config, parse_config
from activities.tools.mcp_sandbox import ServerSandbox
from activities.tools.sandbox import choose_policy
from tests.helpers import wait_until
from tests.reliability.processes import ROOT
from tests.sandbox_support import server_entry, server_pids

BIN = Path(sys.executable).parent
POLICY = choose_policy("auto")
"""Sandboxed where bubblewrap works (as the worker runs them), else unsandboxed."""
if not POLICY.runs_commands:
    POLICY = choose_policy("off")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def sandbox_for(workspace: Path) -> ServerSandbox:
    return ServerSandbox(POLICY, workspace)


def own(notes: Path | None = None, *, mark: str = "", **entry: Any) -> dict[str, Any]:
    extra = {} if notes is None else {"NOTES_FILE": str(notes)}
    return {**server_entry(mark=mark or uuid.uuid4().hex, **extra), **entry}


async def started(servers: dict[str, Any], workspace: Path) -> tuple[McpServers, dict[str, Tool]]:
    group = McpServers(parse_config({"mcpServers": servers}), sandbox=sandbox_for(workspace))
    await group.start()
    return group, {t.name: t for _, tools in group.tools() for t in tools}


async def the_server(mark: str) -> int:
    """The host pid of the one live server process with this mark."""
    found: list[int] = await wait_until(lambda: server_pids(mark), timeout=10)
    assert len(found) == 1, found
    return found[0]


async def test_annotations_decide_approval_and_retries(workspace):
    group, tools = await started({"own": own()}, workspace)
    try:
        assert (tools["own__echo"].requires_approval, tools["own__echo"].safe_to_retry) == (
            False,
            True,
        )
        assert (tools["own__note"].requires_approval, tools["own__note"].safe_to_retry) == (
            True,
            False,
        )
        assert "own__odd_name_with_spaces" in tools
        assert tools["own__echo"].parameters["properties"]["text"]["type"] == "string"
    finally:
        await group.aclose()


async def test_never_and_always_override_the_annotations(workspace):
    servers = {"a": own(approval="always"), "n": own(approval="never")}
    group, tools = await started(servers, workspace)
    try:
        assert tools["a__echo"].requires_approval is True
        assert tools["n__note"].requires_approval is False
        assert tools["n__note"].safe_to_retry is False  # retries still follow the annotations
    finally:
        await group.aclose()


async def test_a_tool_not_safe_to_retry_runs_once_on_a_live_server_without_a_restart(workspace):
    notes, mark = workspace / "notes.txt", uuid.uuid4().hex
    group, tools = await started({"own": own(notes, mark=mark)}, workspace)
    try:
        before = await the_server(mark)
        await tools["own__note"].run({"line": "one"})
        assert await the_server(mark) == before  # the liveness check restarted nothing
        # Dead before the call: started again, then the call is sent once.
        os.kill(before, signal.SIGKILL)
        await tools["own__note"].run({"line": "two"})
        assert notes.read_text() == "one\ntwo\n"
        assert await the_server(mark) != before
    finally:
        await group.aclose()


async def test_a_server_dying_during_a_call_that_is_not_safe_to_retry_is_not_called_again(
    workspace,
):
    notes = workspace / "notes.txt"
    group, tools = await started({"own": own(notes)}, workspace)
    try:
        with pytest.raises(ToolError, match=r"^MCP server 'own' failed: "):
            await tools["own__crash"].run({"line": "once"})
        assert notes.read_text() == "once\n"  # not tried a second time
        # The next call finds a new server.
        assert await tools["own__echo"].run({"text": "x"}) == {"text": "x", "length": 1}
    finally:
        await group.aclose()


async def test_a_command_that_does_not_exist_stops_the_start_naming_the_server(workspace):
    group = McpServers(
        parse_config({"mcpServers": {"fine": own(), "broken": {"command": "no-such-mcp-server"}}}),
        sandbox=sandbox_for(workspace),
    )
    with pytest.raises(McpStartError) as caught:
        await group.start()
    message = str(caught.value)
    assert message.startswith("MCP server 'broken' did not start: ")
    assert "no-such-mcp-server" in message and "\n" not in message


async def test_a_server_that_never_answers_stops_the_start_after_the_timeout(workspace):
    config = McpServerConfig(name="silent", command="sleep", args=("600",))
    server = McpServer(config, sandbox_for(workspace))
    with pytest.raises(McpStartError, match=r"^MCP server 'silent' did not start and list its"):
        await server.start(within=1.0)


async def test_a_tool_error_and_a_refused_call_are_error_results(workspace):
    group, tools = await started({"own": own()}, workspace)
    try:
        with pytest.raises(ToolError, match="fail"):
            await tools["own__fail"].run({"reason": "because"})
        with pytest.raises(ToolError, match="text"):
            await tools["own__echo"].run({"wrong": 1})
    finally:
        await group.aclose()


async def test_the_time_server_from_pypi_lists_and_answers(workspace):
    servers = {"time": {"command": str(BIN / "mcp-server-time")}}
    group, tools = await started(servers, workspace)
    try:
        assert {"time__get_current_time", "time__convert_time"} <= set(tools)
        data = await tools["time__get_current_time"].run({"timezone": "Europe/Paris"})
        assert data["timezone"] == "Europe/Paris"
    finally:
        await group.aclose()


# ---------------------------------------------------------------- pure parts


def test_offered_names_fit_the_model_s_pattern():
    assert offered_name("git", "git_status") == "git__git_status"
    assert offered_name("s", "a.b/c d") == "s__a_b_c_d"
    long_a = offered_name("server", "x" * 80 + "a")
    long_b = offered_name("server", "x" * 80 + "b")
    assert len(long_a) == len(long_b) == 64
    assert long_a != long_b
    assert long_a.startswith("server__xxx")


def _tool(name: str, **annotations: bool) -> mcp_types.Tool:
    return mcp_types.Tool(
        name=name,
        input_schema={"type": "object"},
        annotations=mcp_types.ToolAnnotations(**annotations) if annotations else None,
    )


def test_two_tools_of_one_server_that_come_out_with_one_name_are_refused():
    server = McpServer(McpServerConfig(name="s", command="x"), None)
    server.tools = [_tool("a.b"), _tool("a/b")]
    with pytest.raises(
        McpConfigError, match=re.escape("'a.b' and 'a/b' would both be offered as 's__a_b'")
    ):
        server.as_tools()


def test_approval_and_retry_from_annotations_without_a_server():
    server = McpServer(McpServerConfig(name="s", command="x"), None)
    server.tools = [
        _tool("plain"),
        _tool("reader", read_only_hint=True),
        _tool("idem", idempotent_hint=True),
        _tool("ro_false", read_only_hint=False, destructive_hint=True),
    ]
    got = {t.name: (t.requires_approval, t.safe_to_retry) for t in server.as_tools()}
    assert got == {
        "s__plain": (True, False),
        "s__reader": (False, True),
        "s__idem": (True, True),
        "s__ro_false": (True, False),
    }


def test_results_structured_text_and_errors():
    text = mcp_types.TextContent(text="line one")
    second = mcp_types.TextContent(text="line two")
    assert result_data(mcp_types.CallToolResult(content=[text, second])) == "line one\nline two"
    structured = mcp_types.CallToolResult(content=[text], structured_content={"n": 1})
    assert result_data(structured) == {"n": 1}
    with pytest.raises(ToolError, match=r"^line one$"):
        result_data(mcp_types.CallToolResult(content=[text], is_error=True))


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ({"bad name!": {"command": "x"}}, "must match ^[a-zA-Z0-9_-]+$"),
        ({"s": {}}, 'needs either "command" (stdio) or "url" (HTTP)'),
        ({"s": {"command": "x", "url": "http://h/mcp"}}, "needs either"),
        ({"s": {"url": "ftp://h"}}, "must start with http:// or https://"),
        ({"s": {"command": "x", "approval": "sometimes"}}, '"approval" must be one of'),
        ({"s": {"command": "x", "args": "--flag"}}, '"args" must be a list of strings'),
        ({"s": {"command": "x", "env": {"A": 1}}}, '"env" must be an object of strings'),
    ],
)
def test_config_mistakes_are_one_line_each(servers, message):
    with pytest.raises(McpConfigError) as caught:
        parse_config({"mcpServers": servers})
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_config_file_must_be_json_with_mcp_servers(tmp_path):
    path = tmp_path / "mcp.json"
    with pytest.raises(McpConfigError, match="cannot read"):
        load_config(path)
    path.write_text("{not json")
    with pytest.raises(McpConfigError, match="is not JSON"):
        load_config(path)
    path.write_text('{"servers": {}}')
    with pytest.raises(McpConfigError, match='"mcpServers" object'):
        load_config(path)
    path.write_text(
        '{"mcpServers": {"t": {"url": "http://127.0.0.1:1/mcp", "headers": {"A": "b"}}}}'
    )
    (config,) = load_config(path)
    assert (config.name, config.url, dict(config.headers)) == (
        "t",
        "http://127.0.0.1:1/mcp",
        {"A": "b"},
    )


async def test_parallel_calls_share_one_session_and_one_restart(workspace):
    mark = uuid.uuid4().hex
    group, tools = await started({"own": own(mark=mark)}, workspace)
    try:
        replies = await asyncio.gather(
            *(tools["own__echo"].run({"text": str(i)}) for i in range(10))
        )
        assert [r["text"] for r in replies] == [str(i) for i in range(10)]
        before = await the_server(mark)
        os.kill(before, signal.SIGKILL)
        await asyncio.gather(*(tools["own__pid"].run({}) for _ in range(5)))
        after = await the_server(mark)  # exactly one new server for all five calls
        assert after != before
    finally:
        await group.aclose()


async def test_closing_stops_the_server_processes(workspace):
    mark = uuid.uuid4().hex
    group, _ = await started({"own": own(mark=mark)}, workspace)
    pid = await the_server(mark)
    await group.aclose()
    assert not _exists(pid)


def _exists(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def test_a_server_s_long_description_is_cut():
    server = McpServer(McpServerConfig(name="s", command="x"), None)
    long_tool = _tool("long")
    server.tools = [long_tool.model_copy(update={"description": "d" * 50_000})]
    (tool,) = server.as_tools()
    assert len(tool.description) == 4_000


# ---------------------------------------------------------------- the sandbox of a stdio server

needs_sandbox = pytest.mark.skipif(
    POLICY.sandbox != "bwrap", reason="bubblewrap does not work here (.ci/run installs it)"
)


@needs_sandbox
async def test_a_stdio_server_sees_the_workspace_and_not_the_worker_s_places(workspace, tmp_path):
    (workspace / "inside.txt").write_text("in the workspace\n")
    beside = tmp_path / "beside.env"
    beside.write_text("TOKEN=kept-from-the-server\n")
    group, tools = await started({"own": own()}, workspace)
    try:
        where = await tools["own__surroundings"].run({})
        inside = await tools["own__look"].run({"path": str(workspace / "inside.txt")})
        outside = await tools["own__look"].run({"path": str(beside)})
        repo = await tools["own__look"].run({"path": str(ROOT / "worker.py")})
    finally:
        await group.aclose()
    assert where["cwd"] == where["home"] == str(workspace.resolve())
    assert where["interfaces"] == ["lo"]  # its own network namespace, with no uplink
    assert inside == "in the workspace\n"
    assert outside.startswith("cannot read: No such file")
    assert repo.startswith("cannot read: No such file")  # only the tests folder is bound


@needs_sandbox
async def test_network_true_gives_a_stdio_server_its_own_uplink(workspace):
    group, tools = await started({"net": own(network=True)}, workspace)
    try:
        where = await tools["net__surroundings"].run({})
    finally:
        await group.aclose()
    assert where["interfaces"] == ["lo", "tap0"]  # slirp4netns's device, not the host's


async def test_without_a_sandbox_a_stdio_server_is_refused_unless_sandbox_is_off(workspace):
    nowhere = choose_policy("off")
    refused = ServerSandbox(
        type(nowhere)("none", reason="bwrap is not installed", runs_commands=False), workspace
    )
    configs = parse_config({"mcpServers": {"git": {"command": "mcp-server-git"}}})
    with pytest.raises(McpConfigError) as caught:
        McpServers(configs, sandbox=refused)
    assert str(caught.value) == (
        "MCP server 'git' must run in the sandbox, which does not work here (bwrap is not"
        " installed); set AGENT_SANDBOX=off to run MCP servers and commands unsandboxed"
    )
    http = parse_config({"mcpServers": {"web": {"url": "http://127.0.0.1:1/mcp"}}})
    McpServers(http, sandbox=refused)  # an HTTP server runs elsewhere: nothing to sandbox
    McpServers(configs, sandbox=ServerSandbox(nowhere, workspace))  # AGENT_SANDBOX=off


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"command": "x", "network": "yes"}, '"network" must be true or false'),
        ({"command": "x", "read_only": ["relative/path"]}, "is not absolute"),
        ({"command": "x", "read_only": ["/no/such/folder/here"]}, "does not exist"),
        ({"url": "http://h/mcp", "network": True}, '"network" and "read_only" are for stdio'),
    ],
)
def test_sandbox_fields_of_an_entry_are_checked(entry, message):
    with pytest.raises(McpConfigError) as caught:
        parse_config({"mcpServers": {"s": entry}})
    assert message in str(caught.value) and "\n" not in str(caught.value)
