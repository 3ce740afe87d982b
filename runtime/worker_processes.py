"""Several worker processes on one machine: `python worker.py --processes N` (or
AGENT_WORKER_PROCESSES=N) runs N copies of the same worker, each a process of its own with its
own Temporal client, polling the same task queue.

One Python worker runs its workflow code on one core (the interpreter lock), so on a machine
with several cores the worker is the bottleneck long before the server is; Temporal spreads the
runs over every process polling the queue, as it would over workers on several machines.

This is a thin loop, not a process manager: it starts the first copy and waits for its ready line
(so a setting it cannot use is said once, by that copy, and the loop exits with its code), then
the others, and says `worker processes ready: N (pids …)` once every copy polls (followed by
every copy's metrics address when AGENT_METRICS_ADDRESS is set: copy i serves on its PORT + i).
It passes the copies' output through and forwards SIGTERM and SIGINT to every copy; when one
copy ends, it stops the others and exits with that copy's code, so whatever supervises the
worker (systemd, Kubernetes) sees it end and restarts the whole. On Linux each copy is also sent
SIGTERM should the loop itself die.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from runtime.setting_error import SettingError

ENV_PROCESSES = "AGENT_WORKER_PROCESSES"
FLAG = "--processes"
MAX_PROCESSES = 64
READY_PREFIX = "worker ready"
"""How a copy's ready line begins (worker.py)."""
STOP_SECONDS = 30.0
"""How long the copies get to stop after SIGTERM before they are killed."""
PR_SET_PDEATHSIG = 1


class WorkerProcessesError(SettingError):
    """A process count that cannot be used; the message names the flag or the variable."""


def _count(text: str, where: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_PROCESSES:
        raise WorkerProcessesError(
            f"{where}={text.strip()[:40]!r} is not a whole number from 1 to {MAX_PROCESSES}"
        )
    return value


def process_count(flag: str | None, environ: Mapping[str, str]) -> int:
    """How many copies to run: `--processes`, else AGENT_WORKER_PROCESSES, else 1."""
    if flag is not None:
        return _count(flag, FLAG)
    text = environ.get(ENV_PROCESSES, "").strip()
    return _count(text, ENV_PROCESSES) if text else 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the loop dies (Linux; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Copies:
    """The running copies of one worker command."""

    def __init__(
        self,
        command: Sequence[str],
        environ: Mapping[str, str],
        own: Sequence[Mapping[str, str]] = (),
    ) -> None:
        self._command = list(command)
        self._env = {**environ, ENV_PROCESSES: "1"}  # a copy serves; it starts no copies
        self._own = list(own)
        """The settings of each copy of its own (copy i: `own[i]`), e.g. its metrics port."""
        self.procs: list[asyncio.subprocess.Process] = []
        self._pumps: list[asyncio.Task[None]] = []

    async def start(self) -> tuple[asyncio.subprocess.Process, asyncio.Future[None]]:
        """Start the next copy; the future is done once it printed its ready line."""
        index = len(self.procs)
        own = self._own[index] if index < len(self._own) else {}
        proc = await asyncio.create_subprocess_exec(
            *self._command,
            stdout=asyncio.subprocess.PIPE,
            env={**self._env, **own},
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.procs.append(proc)
        self._pumps.append(asyncio.create_task(self._pump(proc, ready)))
        return proc, ready

    @staticmethod
    async def _pump(proc: asyncio.subprocess.Process, ready: asyncio.Future[None]) -> None:
        """Pass the copy's output through, line by line, noting its ready line."""
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace")
            sys.stdout.write(line)
            sys.stdout.flush()
            if line.startswith(READY_PREFIX) and not ready.done():
                ready.set_result(None)

    def signal_all(self, sig: int) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)

    async def stop(self) -> None:
        """SIGTERM to every copy still running; SIGKILL to any not gone in STOP_SECONDS."""
        self.signal_all(signal.SIGTERM)
        waits = [proc.wait() for proc in self.procs]
        try:
            await asyncio.wait_for(asyncio.gather(*waits), STOP_SECONDS)
        except TimeoutError:
            self.signal_all(signal.SIGKILL)
            await asyncio.gather(*(proc.wait() for proc in self.procs))
        await asyncio.gather(*self._pumps, return_exceptions=True)


def exit_code(proc: asyncio.subprocess.Process) -> int:
    """A copy's exit code as a shell shows it (128 + N for a copy killed by signal N)."""
    code = proc.returncode or 0
    return code if code >= 0 else 128 - code


async def _ready_or_exit(
    proc: asyncio.subprocess.Process, ready: asyncio.Future[None]
) -> int | None:
    """None once the copy is ready; its exit code if it ended first."""
    ended = asyncio.ensure_future(proc.wait())
    either: list[asyncio.Future[Any]] = [ended, ready]
    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    if ready.done():
        ended.cancel()
        return None
    await ended
    return exit_code(proc)


async def run_copies(
    count: int,
    command: Sequence[str],
    environ: Mapping[str, str],
    own: Sequence[Mapping[str, str]] = (),
    ready_note: str = "",
) -> int:
    """Run `count` copies of `command` until one ends or a signal stops them; the exit code.
    `own[i]`: settings of copy i's own; `ready_note` ends the ready line (every copy's metrics
    address, say)."""
    copies = Copies(command, environ, own)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    try:
        first, ready = await copies.start()
        code = await _wait_ready(first, ready, stopping)
        if code is not None:
            return code
        others = [await copies.start() for _ in range(count - 1)]
        for proc, proc_ready in others:
            code = await _wait_ready(proc, proc_ready, stopping)
            if code is not None:
                return code
        pids = " ".join(str(proc.pid) for proc in copies.procs)
        print(f"worker processes ready: {count} (pids {pids}){ready_note}", flush=True)
        ended = [asyncio.ensure_future(proc.wait()) for proc in copies.procs]
        stop = asyncio.ensure_future(stopping.wait())
        await asyncio.wait([*ended, stop], return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        gone = [proc for proc in copies.procs if proc.returncode is not None]
        await copies.stop()
        if gone and not stopping.is_set():
            return exit_code(gone[0])  # one copy ended on its own: its code
        return max(exit_code(proc) for proc in copies.procs)
    finally:
        await copies.stop()


async def _wait_ready(
    first: asyncio.subprocess.Process, ready: asyncio.Future[None], stopping: asyncio.Event
) -> int | None:
    """Wait for a copy's ready line; its exit code if it ended (or a signal came) first."""
    starting = asyncio.ensure_future(_ready_or_exit(first, ready))
    stop = asyncio.ensure_future(stopping.wait())
    await asyncio.wait([starting, stop], return_when=asyncio.FIRST_COMPLETED)
    stop.cancel()
    if starting.done():
        return starting.result()
    starting.cancel()
    with contextlib.suppress(ProcessLookupError):
        first.send_signal(signal.SIGTERM)
    await first.wait()
    return exit_code(first)
