"""The built-in file-manager tools of SPEC §7, all confined to the workspace folder.

Each returns the `data` of the seed's envelope, or raises `ToolError` for an expected failure.
File-system work runs in a thread so the worker's event loop (and its heartbeats) keep going.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
from functools import partial
from pathlib import Path
from typing import Any

from activities.tools.base import Tool, ToolError, ToolRegistry, Workspace, string_argument
from workflows.reconstruction import bound_text

READ_LIMIT_BYTES = 64 * 1024
"""`read_file` reads at most this much of a file."""
READ_TEXT_LIMIT = 12_000
"""…and returns at most this many characters (the tool message is bounded to 16,000)."""
STDOUT_LIMIT = 8_000
STDERR_LIMIT = 4_000
MAX_ENTRIES = 300
"""`list_dir` lists at most this many entries (then says how many it left out)."""

_SECRET_ENV = re.compile(r"(API_?KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)

PATH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "description": "A path relative to the workspace folder, e.g. '.' or 'notes.txt'.",
        }
    },
    "required": ["path"],
    "additionalProperties": False,
}


def _kind(path: Path) -> str:
    if path.is_symlink():
        return "symlink"
    return "dir" if path.is_dir() else "file"


# ---- list_dir ----


def _list_dir(workspace: Workspace, args: dict[str, Any]) -> list[dict[str, Any]]:
    raw = string_argument(args, "path", ".")
    folder = workspace.locate(raw).resolve()
    if not folder.exists():
        raise ToolError(f"'{raw}' does not exist")
    if not folder.is_dir():
        raise ToolError(f"'{raw}' is not a folder")
    entries: list[dict[str, Any]] = []
    with os.scandir(folder) as scan:
        items = sorted(scan, key=lambda e: e.name)
    for entry in items[:MAX_ENTRIES]:
        if entry.is_symlink():
            kind, size = "symlink", None
        elif entry.is_dir(follow_symlinks=False):
            kind, size = "dir", None
        else:
            kind, size = "file", entry.stat(follow_symlinks=False).st_size
        entries.append({"name": entry.name, "kind": kind, "size": size})
    if len(items) > MAX_ENTRIES:
        left = len(items) - MAX_ENTRIES
        entries.append({"name": f"…[{left} more entries not listed]", "kind": "note", "size": None})
    return entries


# ---- read_file ----


def _read_file(workspace: Workspace, args: dict[str, Any]) -> str:
    raw = string_argument(args, "path")
    target = workspace.locate(raw).resolve()
    if not target.exists():
        raise ToolError(f"'{raw}' does not exist")
    if not target.is_file():
        raise ToolError(f"'{raw}' is not a regular file")
    size = target.stat().st_size
    with target.open("rb") as handle:
        head = handle.read(READ_LIMIT_BYTES)
    text = head.decode("utf-8", errors="replace")
    if size > READ_LIMIT_BYTES:
        text += f"\n…[file is {size} bytes; only the first {READ_LIMIT_BYTES} were read]"
    return bound_text(text, READ_TEXT_LIMIT)


# ---- delete_path ----


def _delete_path(workspace: Workspace, args: dict[str, Any]) -> dict[str, Any]:
    raw = string_argument(args, "path")
    target = workspace.locate(raw)
    if target == workspace.root:
        raise ToolError("refusing to delete the workspace folder itself")
    if not target.is_symlink() and not target.exists():
        raise ToolError(f"'{raw}' does not exist")
    kind = _kind(target)
    relative = workspace.relative(target)
    if kind == "dir":
        files = sum(len(names) for _, _, names in os.walk(target))
        shutil.rmtree(target)  # does not follow symlinks inside: it removes the links
    else:
        files = 1
        target.unlink()
    return {"path": relative, "kind": kind, "files": files}


# ---- run_command ----


def _command_env() -> dict[str, str]:
    """The worker's environment minus anything that looks like a secret (the LLM key above all):
    whatever a command prints goes to the model and into the run's history."""
    return {k: v for k, v in os.environ.items() if not _SECRET_ENV.search(k)}


async def _drain(stream: asyncio.StreamReader | None, limit: int) -> tuple[bytes, int]:
    """Read a stream to its end, keeping at most `limit` bytes; returns (kept, total)."""
    if stream is None:
        return b"", 0
    kept = bytearray()
    total = 0
    while chunk := await stream.read(65536):
        total += len(chunk)
        if len(kept) < limit:
            kept.extend(chunk[: limit - len(kept)])
    return bytes(kept), total


def _text(kept: bytes, total: int, limit: int) -> str:
    text = kept.decode("utf-8", errors="replace")
    if total > len(kept):
        text += f"\n…[truncated {total - len(kept)} bytes of output]"
    return bound_text(text, limit + 100)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _reap(process: asyncio.subprocess.Process, *tasks: asyncio.Future[Any]) -> None:
    try:
        await asyncio.wait_for(process.wait(), 5)
    except TimeoutError:
        pass
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def run_command(
    workspace: Workspace, limit_seconds: float, args: dict[str, Any]
) -> dict[str, Any]:
    """Run a shell command in the workspace, in its own process group (so a timeout or a
    cancellation kills everything it started), with bounded output."""
    command = string_argument(args, "command")
    if not command.strip():
        raise ToolError("command must not be empty")
    process = await asyncio.create_subprocess_shell(
        command,
        cwd=workspace.root,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        env=_command_env(),
    )
    out = asyncio.ensure_future(_drain(process.stdout, STDOUT_LIMIT))
    err = asyncio.ensure_future(_drain(process.stderr, STDERR_LIMIT))
    waiter = asyncio.ensure_future(process.wait())
    try:
        done, _ = await asyncio.wait({out, err, waiter}, timeout=limit_seconds)
    except BaseException:  # cancelled (the activity was cancelled): kill it all, then go
        _kill_group(process)
        waiter.cancel()
        await asyncio.shield(_reap(process, out, err))
        raise
    if len(done) < 3:
        _kill_group(process)
        waiter.cancel()
        await _reap(process, out, err)
        raise ToolError(f"command timed out after {limit_seconds:g} s and was killed: {command}")
    stdout, stdout_total = out.result()
    stderr, stderr_total = err.result()
    return {
        "stdout": _text(stdout, stdout_total, STDOUT_LIMIT),
        "stderr": _text(stderr, stderr_total, STDERR_LIMIT),
        "exit_code": waiter.result(),
    }


# ---- the registry ----


def _threaded(function: Any, workspace: Workspace) -> Any:
    async def run(args: dict[str, Any]) -> Any:
        return await asyncio.to_thread(function, workspace, args)

    return run


def build_default_registry(workspace: Path, command_timeout_seconds: float = 30.0) -> ToolRegistry:
    """The four built-in tools, confined to `workspace` (which must exist)."""
    ws = Workspace.at(workspace)
    if not ws.root.is_dir():
        raise ValueError(f"workspace folder {ws.root} does not exist")
    return ToolRegistry(
        [
            Tool(
                name="list_dir",
                description=(
                    "List the entries of a folder in the workspace: name, kind (file, dir or "
                    "symlink) and size in bytes."
                ),
                parameters={
                    **PATH_PARAMETERS,
                    "required": [],
                },
                run=_threaded(_list_dir, ws),
            ),
            Tool(
                name="read_file",
                description=f"Read a text file in the workspace (up to {READ_LIMIT_BYTES} bytes).",
                parameters=PATH_PARAMETERS,
                run=_threaded(_read_file, ws),
            ),
            Tool(
                name="run_command",
                description=(
                    "Run a shell command in the workspace folder and return its stdout, stderr "
                    f"and exit code. Times out after {command_timeout_seconds:g} seconds. "
                    "Needs a human's approval."
                ),
                parameters={
                    "type": "object",
                    "properties": {
                        "command": {"type": "string", "description": "e.g. 'ls -la'"},
                    },
                    "required": ["command"],
                    "additionalProperties": False,
                },
                run=partial(run_command, ws, command_timeout_seconds),
                requires_approval=True,
                safe_to_retry=False,
            ),
            Tool(
                name="delete_path",
                description=(
                    "Delete a file or a folder (with everything in it) in the workspace. "
                    "Needs a human's approval."
                ),
                parameters=PATH_PARAMETERS,
                run=_threaded(_delete_path, ws),
                requires_approval=True,
                safe_to_retry=False,
            ),
        ]
    )
