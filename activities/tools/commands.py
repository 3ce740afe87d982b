"""`run_command`: a shell command in the workspace, sandboxed when the machine allows it
(see `sandbox`), with a timeout, resource limits (its own cgroup where the worker may create
one, see `limits`) and bounded output; nothing it started outlives it."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass, field
from typing import Any

from activities.tools.base import ToolError, string_argument
from activities.tools.cgroups import CommandGroup, cgroup_support
from activities.tools.fs import Workspace, os_error, preview
from activities.tools.limits import limits_preexec
from activities.tools.sandbox import SHELL, CommandPolicy, bwrap_argv, command_env
from activities.tools.uplink import NetworkUnavailable, launcher_argv
from workflows.contract.tool_results import TRUNCATION_MARKER
from workflows.shown import shorten

STDOUT_LIMIT = 8_000
STDERR_LIMIT = 4_000
DRAIN_AFTER_EXIT_SECONDS = 2.0
"""After the command exits, how long to wait for output still in the pipes (a process that
escaped the group in an unsandboxed run can hold them open)."""


@dataclass
class _Capture:
    """A stream read to its end, keeping at most `limit` bytes."""

    limit: int
    kept: bytearray = field(default_factory=bytearray)
    total: int = 0

    async def drain(self, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        while chunk := await stream.read(65536):
            self.total += len(chunk)
            if len(self.kept) < self.limit:
                self.kept.extend(chunk[: self.limit - len(self.kept)])

    def text(self) -> str:
        text = self.kept.decode("utf-8", errors="replace")
        if self.total > len(self.kept):
            text += f"\n…[truncated {self.total - len(self.kept)} bytes of output]"
        return shorten(text, self.limit + 100, TRUNCATION_MARKER, within=True)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the command's process group (with bwrap: bwrap itself, whose sandbox then ends)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _settle(tasks: list[asyncio.Future[Any]], seconds: float) -> None:
    if tasks:
        await asyncio.wait(tasks, timeout=seconds)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _reap(process: asyncio.subprocess.Process, tasks: list[asyncio.Future[Any]]) -> None:
    try:
        await asyncio.wait_for(process.wait(), 5)
    except TimeoutError:
        pass
    await _settle(tasks, DRAIN_AFTER_EXIT_SECONDS)


def command_argv(policy: CommandPolicy, workspace: Workspace, command: str) -> list[str]:
    """`/bin/sh -c COMMAND`, in bwrap when sandboxed (through the launcher when the command gets
    an uplink)."""
    shell = [SHELL, "-c", command]
    if policy.sandbox != "bwrap" or not policy.bwrap:
        return shell
    inner = bwrap_argv(policy.bwrap, workspace.root, shell, private=policy.private)
    try:
        uplink = policy.uplink_tool()
    except NetworkUnavailable as err:
        raise ToolError(str(err)) from None
    return inner if uplink is None else launcher_argv(inner, uplink=uplink)


def _command_group(policy: CommandPolicy) -> CommandGroup | None:
    support = cgroup_support()
    if support is None:
        return None
    limits = policy.limits
    try:
        return CommandGroup(support, limits.max_processes, limits.max_memory_mb)
    except OSError as err:
        raise ToolError(f"could not create the command's cgroup ({err.strerror})") from None


def _limit_notes(group: CommandGroup | None, policy: CommandPolicy) -> list[str]:
    """What the limits stopped, for the model (appended to stderr)."""
    notes: list[str] = []
    if group is None:
        return notes
    refused = group.refused_forks()
    if refused:
        notes.append(
            f"[{refused} new process(es) refused: the command reached its limit of"
            f" {policy.limits.max_processes} processes]"
        )
    killed = group.memory_kills()
    if killed:
        notes.append(
            f"[{killed} process(es) killed: the command reached its memory limit of"
            f" {policy.limits.max_memory_mb} MB]"
        )
    return notes


async def run_command(
    workspace: Workspace, limit_seconds: float, policy: CommandPolicy, args: dict[str, Any]
) -> dict[str, Any]:
    """Run a shell command in the workspace. It runs in its own process group (in bwrap: its own
    namespaces too), and when it exits, times out or is cancelled every process it started is
    killed."""
    command = string_argument(args, "command")
    if not command.strip():
        raise ToolError("command must not be empty")
    if not policy.runs_commands:
        raise ToolError(f"run_command is off: commands cannot be sandboxed here ({policy.reason})")
    argv = command_argv(policy, workspace, command)
    group = _command_group(policy)
    try:
        return await _run(workspace, limit_seconds, policy, command, argv, group)
    finally:
        if group is not None:
            await asyncio.shield(asyncio.to_thread(group.close))


async def _run(
    workspace: Workspace,
    limit_seconds: float,
    policy: CommandPolicy,
    command: str,
    argv: list[str],
    group: CommandGroup | None,
) -> dict[str, Any]:
    joins = group.procs_files if group is not None else ()
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=workspace.root,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            env=command_env(workspace.root, policy.env_names),
            preexec_fn=limits_preexec(limit_seconds, policy.limits, joins),
        )
    except OSError as problem:  # e.g. the workspace folder was removed
        raise os_error(problem, ".") from None
    out, err = _Capture(STDOUT_LIMIT), _Capture(STDERR_LIMIT)
    readers: list[asyncio.Future[Any]] = [
        asyncio.ensure_future(out.drain(process.stdout)),
        asyncio.ensure_future(err.drain(process.stderr)),
    ]
    try:
        exit_code = await asyncio.wait_for(process.wait(), timeout=limit_seconds)
    except TimeoutError:
        _kill_group(process)
        await _reap(process, readers)
        raise ToolError(
            f"command timed out after {limit_seconds:g} s and was killed: {preview(command)}"
        ) from None
    except BaseException:  # cancelled (the activity was cancelled): kill it all, then go
        _kill_group(process)
        await asyncio.shield(_reap(process, readers))
        raise
    # A normal exit: whatever it left running in the background goes too.
    _kill_group(process)
    await _settle(readers, DRAIN_AFTER_EXIT_SECONDS)
    stderr = err.text()
    notes = _limit_notes(group, policy)
    if notes:
        stderr += ("\n" if stderr and not stderr.endswith("\n") else "") + "\n".join(notes)
    return {"stdout": out.text(), "stderr": stderr, "exit_code": exit_code}
