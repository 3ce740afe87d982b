"""The built-in file-manager tools, all confined to the workspace folder.

Each returns the `data` of the envelope, or raises `ToolError` for an expected failure. File-system
work runs in a thread so the worker's event loop (and its heartbeats) keep going; every path is
walked by descriptor (see `fs`), so a symlink swapped in mid-call is refused, not followed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from activities.tools.base import (
    OpenedCheck,
    Tool,
    ToolError,
    ToolFunction,
    ToolFunctionChecked,
    ToolRegistry,
    string_argument,
)
from activities.tools.commands import run_command
from activities.tools.fs import Workspace, open_file, open_folder, os_error, preview
from activities.tools.sandbox import CommandPolicy, choose_policy
from workflows.contract.tool_results import TRUNCATION_MARKER
from workflows.shown import shorten

READ_LIMIT_BYTES = 64 * 1024
"""`read_file` reads at most this much of a file."""
READ_TEXT_LIMIT = 12_000
"""…and returns at most this many characters (the tool message is bounded to 16,000)."""
COMMAND_TIMEOUT_MARGIN_SECONDS = 30.0
"""`run_command`'s activity may take this much longer than the command's own time limit."""
MAX_ENTRIES = 300
"""`list_dir` lists at most this many entries (then says how many it left out)."""

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


# ---- list_dir ----


def _checked(workspace: Workspace, fd: int, walked: str, check: OpenedCheck) -> None:
    """`check` the path `fd` really opened; `fd` is closed when the check refuses."""
    try:
        check("path", workspace.real_relative(fd, walked))
    except BaseException:
        os.close(fd)
        raise


def _list_dir(
    workspace: Workspace, args: dict[str, Any], check: OpenedCheck
) -> list[dict[str, Any]]:
    """Symlinks that stay inside the workspace are followed to the folder they name (each hop
    walked by descriptor); the entries listed are not followed (a link shows as `symlink`)."""
    raw = string_argument(args, "path", ".")
    with workspace.locate(raw, follow_last=True) as located:
        folder = open_folder(located)
        walked = located.relative
    _checked(workspace, folder, walked, check)
    try:
        with os.scandir(folder) as scan:
            items = sorted(scan, key=lambda e: e.name)
        entries: list[dict[str, Any]] = []
        for entry in items[:MAX_ENTRIES]:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:  # gone since the listing
                continue
            if stat.S_ISLNK(info.st_mode):
                kind, size = "symlink", None
            elif stat.S_ISDIR(info.st_mode):
                kind, size = "dir", None
            else:
                kind, size = "file", info.st_size
            entries.append({"name": entry.name, "kind": kind, "size": size})
    finally:
        os.close(folder)
    if len(items) > MAX_ENTRIES:
        left = len(items) - MAX_ENTRIES
        entries.append({"name": f"…[{left} more entries not listed]", "kind": "note", "size": None})
    return entries


# ---- read_file ----


def _read_file(workspace: Workspace, args: dict[str, Any], check: OpenedCheck) -> str:
    """Symlinks that stay inside the workspace are followed (each hop walked by descriptor);
    a file with more than one hard link is refused, since its other name may be outside. What
    was opened is checked (`check`) before a byte is read from it."""
    raw = string_argument(args, "path")
    with workspace.locate(raw, follow_last=True) as located:
        fd = open_file(located)
        relative = located.relative
    _checked(workspace, fd, relative, check)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f"'{preview(relative)}' is not a regular file")
        if info.st_nlink > 1:
            raise ToolError(
                f"'{preview(relative)}' has {info.st_nlink} hard links (another name for it may "
                "be outside the workspace); refused"
            )
        head = handle.read(READ_LIMIT_BYTES)
    text = head.decode("utf-8", errors="replace")
    if info.st_size > READ_LIMIT_BYTES:
        text += f"\n…[file is {info.st_size} bytes; only the first {READ_LIMIT_BYTES} were read]"
    return shorten(text, READ_TEXT_LIMIT, TRUNCATION_MARKER, within=True)


# ---- delete_path ----


def _count_files(folder: int, name: str) -> int:
    return sum(len(files) for _, _, files, _ in os.fwalk(name, dir_fd=folder))


def _delete_path(workspace: Workspace, args: dict[str, Any], check: OpenedCheck) -> dict[str, Any]:
    """Deletes the entry itself: a symlink is removed, never followed (one that points out of
    the workspace is refused all the same). Everything happens relative to the descriptor of
    the folder holding the entry, whose real path is checked (`check`) first."""
    raw = string_argument(args, "path")
    with workspace.locate(raw, follow_last=False) as located:
        if located.is_root or located.name is None:
            raise ToolError("refusing to delete the workspace folder itself")
        check("path", workspace.entry_relative(located))
        name, relative = located.name, located.relative
        try:
            info = os.stat(name, dir_fd=located.folder, follow_symlinks=False)
        except OSError as err:
            raise os_error(err, relative) from None
        if stat.S_ISLNK(info.st_mode):
            workspace.locate(raw, follow_last=True).close()  # refused when it leads out
            kind = "symlink"
        else:
            kind = "dir" if stat.S_ISDIR(info.st_mode) else "file"
        try:
            if kind == "dir":
                files = _count_files(located.folder, name)
                shutil.rmtree(name, dir_fd=located.folder)  # removes links inside, never follows
            else:
                files = 1
                os.unlink(name, dir_fd=located.folder)
        except OSError as err:
            raise os_error(err, relative) from None
    return {"path": relative, "kind": kind, "files": files}


# ---- the registry ----


FileTool = Callable[[Workspace, dict[str, Any], OpenedCheck], Any]


def _no_check(parameter: str, opened: str) -> None:
    """The check of a worker without enforced rules: anything opened may be used."""


def _threaded(function: FileTool, workspace: Workspace) -> tuple[ToolFunction, ToolFunctionChecked]:
    """A file tool run in a thread, without and with a check of what it opens (`Tool.run`,
    `Tool.run_checked`); an OS error it did not expect still names the path relative to the
    workspace (never the worker's absolute path)."""

    def guarded(args: dict[str, Any], check: OpenedCheck) -> Any:
        try:
            return function(workspace, args, check)
        except OSError as err:
            shown = workspace.relative_text(str(err.filename)) if err.filename else "?"
            raise os_error(err, shown) from None

    async def run_checked(args: dict[str, Any], check: OpenedCheck) -> Any:
        return await asyncio.to_thread(guarded, args, check)

    async def run(args: dict[str, Any]) -> Any:
        return await run_checked(args, _no_check)

    return run, run_checked


def _isolation_text(policy: CommandPolicy) -> str:
    if policy.sandbox != "bwrap":
        return ""
    return "Only the workspace is writable" + ("" if policy.network else "; no network") + ". "


def build_default_registry(
    workspace: Path,
    command_timeout_seconds: float = 30.0,
    *,
    commands: CommandPolicy | None = None,
) -> ToolRegistry:
    """The four built-in tools, confined to `workspace` (which must exist). `commands` says
    how `run_command` runs (default: in bubblewrap when it works here, with no network)."""
    ws = Workspace.at(workspace)
    policy = commands if commands is not None else choose_policy("auto")
    if not ws.root.is_dir():
        raise ValueError(f"workspace folder {ws.root} does not exist")
    listing, reading, deleting = (_threaded(f, ws) for f in (_list_dir, _read_file, _delete_path))
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
                run=listing[0],
                run_checked=listing[1],
                path_parameters=("path",),
                path_root=str(ws.root),
                opened_path=partial(ws.opened_path, follow_last=True),
            ),
            Tool(
                name="read_file",
                description=f"Read a text file in the workspace (up to {READ_LIMIT_BYTES} bytes).",
                parameters=PATH_PARAMETERS,
                run=reading[0],
                run_checked=reading[1],
                path_parameters=("path",),
                path_root=str(ws.root),
                opened_path=partial(ws.opened_path, follow_last=True),
            ),
            Tool(
                name="run_command",
                description=(
                    "Run a shell command in the workspace folder and return its stdout, stderr "
                    f"and exit code. Times out after {command_timeout_seconds:g} seconds. "
                    + _isolation_text(policy)
                    + "Needs a human's approval."
                ),
                parameters={
                    "type": "object",
                    "properties": {
                        "command": {"type": "string", "description": "e.g. 'ls -la'"},
                    },
                    "required": ["command"],
                    "additionalProperties": False,
                },
                run=partial(run_command, ws, command_timeout_seconds, policy),
                requires_approval=True,
                safe_to_retry=False,
                # The command's own limit, plus time to kill it and collect its output: Temporal
                # must never time out a command that its own limit would still let run.
                timeout_seconds=command_timeout_seconds + COMMAND_TIMEOUT_MARGIN_SECONDS,
            ),
            Tool(
                name="delete_path",
                description=(
                    "Delete a file or a folder (with everything in it) in the workspace. "
                    "Needs a human's approval."
                ),
                parameters=PATH_PARAMETERS,
                run=deleting[0],
                run_checked=deleting[1],
                path_parameters=("path",),
                path_root=str(ws.root),
                opened_path=partial(ws.opened_path, follow_last=False),  # the entry itself
                requires_approval=True,
                safe_to_retry=False,
            ),
        ]
    )
