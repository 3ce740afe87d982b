"""Tools from MCP servers, as `Tool`s of the worker's registry (the client side of MCP).

`AGENT_MCP_CONFIG` names a JSON file in the common `mcpServers` format (`mcp_config`). The
worker starts every server once, at its own start, and keeps one session per server for its
lifetime. Each session is owned by one task that enters and leaves the SDK's contexts (the SDK's
task groups must be left by the task that entered them); calls run in the activity's own task
against that session, so a cancelled activity cancels its call and nothing else.

Each server tool is offered as `NAME__TOOL` and runs through `execute_tool` like any other tool:
approval and at-most-once come from the tool's annotations (`readOnlyHint` needs no approval;
`readOnlyHint` or `idempotentHint` makes it safe to retry). A stdio server runs in the sandbox
(`mcp_sandbox`): only PATH, HOME and LANG plus its entry's `env`, never the worker's secrets, and
only the system folders, the workspace and its own program to see.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TextIO

import httpx2
import mcp
import mcp_types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from activities.tools.base import Tool, ToolError
from activities.tools.cgroups import CommandGroup
from activities.tools.mcp_config import (
    Approval,
    McpConfigError,
    McpServerConfig,
    load_config,
)
from activities.tools.mcp_sandbox import ServerSandbox, unsandboxed_parameters

START_TIMEOUT_SECONDS = 30.0
"""A server must start and list its tools within this long, or the worker does not start."""
STOP_TIMEOUT_SECONDS = 10.0
PING_TIMEOUT_SECONDS = 5.0
"""How long a liveness check (before a tool that is not safe to retry) waits for an answer."""
NAME_LIMIT = 64
"""Tool names the model sees fit `^[a-zA-Z0-9_-]{1,64}$`."""
DESCRIPTION_LIMIT = 4_000
"""A server's tool description is cut to this many characters (it travels in every request)."""

_NOT_NAME = re.compile(r"[^a-zA-Z0-9_-]")


class McpStartError(RuntimeError):
    """A server did not start or did not list its tools in time (one line naming it)."""


class _Broken(Exception):
    """The session cannot carry a call any more: the server died or the connection broke."""


# ---------------------------------------------------------------- names and results


def offered_name(server: str, tool: str) -> str:
    """`NAME__TOOL`, other characters of the tool's name as `_`; shortened with a hash of the
    full name when longer than 64 characters, so two long names stay apart."""
    name = f"{server}__{_NOT_NAME.sub('_', tool)}"
    if len(name) <= NAME_LIMIT:
        return name
    digest = hashlib.sha256(f"{server}\x00{tool}".encode()).hexdigest()[:10]
    return f"{name[: NAME_LIMIT - len(digest) - 1]}_{digest}"


def result_data(result: mcp_types.CallToolResult) -> Any:
    """The `data` of `{"ok": true, …}`: `structuredContent`, else the text items joined by
    newlines. `isError` raises ToolError with the server's text."""
    texts = [item.text for item in result.content if isinstance(item, mcp_types.TextContent)]
    if result.is_error:
        raise ToolError("\n".join(texts) or "the tool reported an error")
    if result.structured_content is not None:
        return result.structured_content
    return "\n".join(texts)


def _needs_approval(tool: mcp_types.Tool, approval: Approval) -> bool:
    if approval != "annotations":
        return approval == "always"
    return not (tool.annotations is not None and tool.annotations.read_only_hint is True)


def _safe_to_retry(tool: mcp_types.Tool) -> bool:
    notes = tool.annotations
    return notes is not None and (notes.read_only_hint is True or notes.idempotent_hint is True)


# ---------------------------------------------------------------- one session


def _tail(log: TextIO | None, chars: int = 300) -> str:
    """The last line the server wrote to its stderr (for a failure message)."""
    if log is None:
        return ""
    with contextlib.suppress(OSError, ValueError):
        log.flush()
        log.seek(0, os.SEEK_END)
        size = log.tell()
        log.seek(max(0, size - 4096))
        lines = [line.strip() for line in log.read().splitlines() if line.strip()]
        log.seek(0, os.SEEK_END)
        if lines:
            return lines[-1][-chars:]
    return ""


def _reason(err: BaseException) -> str:
    if isinstance(err, BaseExceptionGroup):
        return "; ".join(_reason(e) for e in err.exceptions)
    text = str(err).strip()
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


class _Session:
    """One connection to a server, from the handshake to the end: entered and left by its own
    task. Calls use `client` from the caller's task."""

    def __init__(self, config: McpServerConfig, sandbox: ServerSandbox | None) -> None:
        self.config = config
        self.sandbox = sandbox
        self.group: CommandGroup | None = None
        """The cgroup a sandboxed stdio server runs in (removed when the session ends)."""
        self.client: mcp.Client | None = None
        self.stderr: TextIO | None = (
            None
            if config.command is None
            else tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        )
        """The server's stderr, kept to quote its last line when it fails."""
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[mcp.Client] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._own(), name=f"mcp-{config.name}")

    @property
    def alive(self) -> bool:
        return self.client is not None and not self._task.done()

    async def _transport(self, stack: AsyncExitStack) -> Any:
        config = self.config
        if config.url is not None:
            http = httpx2.AsyncClient(
                headers=dict(config.headers), timeout=httpx2.Timeout(30.0, read=300.0)
            )
            await stack.enter_async_context(http)
            return streamable_http_client(config.url, http_client=http)
        assert self.stderr is not None
        if self.sandbox is None:
            return stdio_client(unsandboxed_parameters(config), errlog=self.stderr)
        parameters, self.group = await asyncio.to_thread(self.sandbox.launch, config)
        return stdio_client(parameters, errlog=self.stderr)

    async def _own(self) -> None:
        try:
            async with AsyncExitStack() as stack:
                transport = await self._transport(stack)
                client = mcp.Client(
                    transport,
                    cache=None,
                    client_info=mcp_types.Implementation(name="durable-agent", version="1"),
                )
                await stack.enter_async_context(client)
                self.client = client
                self._ready.set_result(client)
                await self._stop.wait()
        except BaseException as err:
            if not self._ready.done():
                self._ready.set_exception(_Broken(self._describe(err)))
            if not isinstance(err, Exception):  # cancelled, or the process is ending
                raise
        finally:
            self.client = None
            if self.group is not None:
                group, self.group = self.group, None
                await asyncio.to_thread(group.close)

    def _describe(self, err: BaseException) -> str:
        said = _tail(self.stderr)
        return _reason(err) + (f" (its stderr: {said})" if said else "")

    async def connected(self) -> mcp.Client:
        return await asyncio.shield(self._ready)

    async def answers(self) -> bool:
        client = self.client
        if client is None or self._task.done():
            return False
        try:
            # A one-page tool listing: answered in every protocol version (ping is not).
            await asyncio.wait_for(client.list_tools(), PING_TIMEOUT_SECONDS)
        except Exception:
            return False
        return True

    async def call(self, tool: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        client = self.client
        if client is None or self._task.done():
            raise _Broken("the session is closed")
        try:
            return await client.call_tool(tool, arguments)
        except MCPError as err:
            if err.code == mcp_types.CONNECTION_CLOSED:
                raise _Broken(self._describe(err)) from err
            raise ToolError(f"MCP server '{self.config.name}' refused the call: {err}") from err
        except ValidationError as err:  # alive, but its answer does not fit the protocol
            raise ToolError(
                f"MCP server '{self.config.name}' sent a result that could not be read:"
                f" {err.error_count()} problem(s), e.g. {err.errors()[0]['msg']}"
            ) from err
        except Exception as err:  # the process or the connection is gone
            raise _Broken(self._describe(err)) from err

    async def close(self) -> None:
        self._stop.set()
        done: set[asyncio.Task[None]] = set()
        if self.client is not None:  # connected: it leaves at once; else it is mid-handshake
            done, _ = await asyncio.wait([self._task], timeout=STOP_TIMEOUT_SECONDS)
        if not done:
            self._task.cancel()
            await asyncio.wait([self._task], timeout=STOP_TIMEOUT_SECONDS)
        if self._task.done() and not self._task.cancelled():
            self._task.exception()  # retrieved: a server that died is not an error at shutdown
        if self.stderr is not None:
            self.stderr.close()


# ---------------------------------------------------------------- one server


class McpServer:
    """A configured server: its session, started again when it dies. `sandbox`: where a stdio
    server runs (None: unsandboxed, as `AGENT_SANDBOX=off` says)."""

    def __init__(self, config: McpServerConfig, sandbox: ServerSandbox | None) -> None:
        self.config = config
        self.sandbox = sandbox
        self._session: _Session | None = None
        self._lock = asyncio.Lock()
        self.tools: list[mcp_types.Tool] = []

    @property
    def name(self) -> str:
        return self.config.name

    async def start(self, within: float = START_TIMEOUT_SECONDS) -> list[mcp_types.Tool]:
        """Start the server and read its tool list (raises McpStartError naming it)."""
        session = _Session(self.config, self.sandbox)
        self._session = session
        try:
            self.tools = await asyncio.wait_for(self._list(session), within)
        except TimeoutError:
            await session.close()
            raise McpStartError(
                f"MCP server '{self.name}' did not start and list its tools within"
                f" {within:g} s{self._said(session)}"
            ) from None
        except Exception as err:  # it exited, or the handshake or the listing failed
            await session.close()
            raise McpStartError(f"MCP server '{self.name}' did not start: {err}") from None
        return self.tools

    @staticmethod
    def _said(session: _Session) -> str:
        said = _tail(session.stderr)
        return f" (its stderr: {said})" if said else ""

    @staticmethod
    async def _list(session: _Session) -> list[mcp_types.Tool]:
        client = await session.connected()
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(100):  # a server whose pages never end cannot hang the start
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def _restart(self, broken: _Session | None) -> _Session:
        async with self._lock:
            current = self._session
            if current is not None and current is not broken and current.alive:
                return current  # another call started it again already
            if current is not None:
                await current.close()
            session = _Session(self.config, self.sandbox)
            self._session = session
            try:
                await asyncio.wait_for(session.connected(), START_TIMEOUT_SECONDS)
            except TimeoutError:
                await session.close()
                again = f"it did not start again within {START_TIMEOUT_SECONDS:g} s"
                raise _Broken(again) from None
            return session

    async def call(
        self, tool: str, arguments: dict[str, Any], *, safe_to_retry: bool
    ) -> mcp_types.CallToolResult:
        """Call a tool. A server found dead is started again and the call tried once more; a
        tool that is not safe to retry is sent only to a server that answered a request just
        before, and never sent twice."""
        try:
            session = self._session
            if session is None or not session.alive:
                session = await self._restart(session)
            if not safe_to_retry:
                if not await session.answers():
                    session = await self._restart(session)
                return await session.call(tool, arguments)
            try:
                return await session.call(tool, arguments)
            except _Broken:
                session = await self._restart(session)
                return await session.call(tool, arguments)
        except _Broken as err:
            raise ToolError(f"MCP server '{self.name}' failed: {err}") from None

    def as_tools(self) -> list[Tool]:
        """The server's tools as registry `Tool`s named `NAME__TOOL` (raises McpConfigError
        when two of its tools come out with one name)."""
        offered: dict[str, str] = {}
        tools: list[Tool] = []
        for spec in self.tools:
            name = offered_name(self.name, spec.name)
            if name in offered:
                raise McpConfigError(
                    f"MCP server '{self.name}': its tools '{offered[name]}' and '{spec.name}'"
                    f" would both be offered as '{name}'"
                )
            offered[name] = spec.name
            safe = _safe_to_retry(spec)
            tools.append(
                Tool(
                    name=name,
                    description=(spec.description or spec.title or spec.name)[:DESCRIPTION_LIMIT],
                    parameters=spec.input_schema,
                    run=self._runner(spec.name, safe),
                    requires_approval=_needs_approval(spec, self.config.approval),
                    safe_to_retry=safe,
                )
            )
        return tools

    def _runner(self, tool: str, safe_to_retry: bool) -> Any:
        async def run(arguments: dict[str, Any]) -> Any:
            return result_data(await self.call(tool, arguments, safe_to_retry=safe_to_retry))

        return run

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


# ---------------------------------------------------------------- every server


class McpServers:
    """The servers of one configuration, started together and stopped together. `sandbox`:
    where the stdio servers run (None: unsandboxed). Raises McpConfigError when a server cannot
    run here as its entry says (no sandbox, no uplink for `"network": true`)."""

    def __init__(self, configs: list[McpServerConfig], *, sandbox: ServerSandbox | None) -> None:
        if sandbox is not None:
            for config in configs:
                sandbox.check(config)
        self.servers = [McpServer(config, sandbox) for config in configs]

    @classmethod
    def from_file(cls, path: Path, *, sandbox: ServerSandbox | None) -> McpServers:
        return cls(load_config(path), sandbox=sandbox)

    async def start(self, within: float = START_TIMEOUT_SECONDS) -> None:
        """Start every server at once; the first that fails stops them all (McpStartError)."""
        results = await asyncio.gather(
            *(server.start(within) for server in self.servers), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                await self.aclose()
                raise result

    def tools(self) -> list[tuple[str, list[Tool]]]:
        """Each server's tools, with the origin a name clash would name."""
        return [(f"MCP server '{s.name}'", s.as_tools()) for s in self.servers]

    async def aclose(self) -> None:
        await asyncio.gather(*(server.aclose() for server in self.servers))

    async def __aenter__(self) -> McpServers:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
