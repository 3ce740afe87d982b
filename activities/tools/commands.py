"""`run_command`: a shell command in the workspace, sandboxed when the machine allows it
(see `sandbox`), with a timeout, resource limits and bounded output; nothing it started
outlives it."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass, field
from typing import Any

from activities.tools.base import ToolError, string_argument
from activities.tools.fs import Workspace, os_error, preview
from activities.tools.sandbox import CommandPolicy, bwrap_argv, command_env, limits_preexec
from workflows.tool_results import bound_text

STDOUT_LIMIT = 8_000
STDERR_LIMIT = 4_000
DRAIN_AFTER_EXIT_SECONDS = 2.0
"""After the command exits, how long to wait for output still in the pipes (a process that
escaped the group in an unsandboxed run can hold them open)."""
SHELL = "/bin/sh"


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
        return bound_text(text, self.limit + 100)


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
    shell = [SHELL, "-c", command]
    if policy.sandbox == "bwrap" and policy.bwrap:
        return bwrap_argv(policy.bwrap, workspace.root, shell, network=policy.network)
    return shell


async def run_command(
    workspace: Workspace, limit_seconds: float, policy: CommandPolicy, args: dict[str, Any]
) -> dict[str, Any]:
    """Run a shell command in the workspace. It runs in its own process group (in bwrap: its own
    namespaces too), and when it exits, times out or is cancelled every process it started is
    killed."""
    command = string_argument(args, "command")
    if not command.strip():
        raise ToolError("command must not be empty")
    try:
        process = await asyncio.create_subprocess_exec(
            *command_argv(policy, workspace, command),
            cwd=workspace.root,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            env=command_env(workspace.root, policy.env_names),
            preexec_fn=limits_preexec(limit_seconds),
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
    return {"stdout": out.text(), "stderr": err.text(), "exit_code": exit_code}
