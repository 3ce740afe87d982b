"""The resource limits of a command: how many processes it may start and how much memory it may
use in all, plus per-process rlimits (address space, file size, CPU time, open files).

Where the worker may create a cgroup (`cgroups`), the process and memory limits are the
command's cgroup's and hold for root too. Elsewhere they fall back to rlimits, counted the way
the kernel counts: RLIMIT_NPROC is checked against every task (thread) of the user's real uid, so
the command may add `max_processes` to the threads the user runs now (a user with a 600-thread
process can still run commands), and memory is capped per process (RLIMIT_DATA). Root is exempt
from RLIMIT_NPROC: without a cgroup, a worker running as root has no process limit, and says so.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from activities.tools.cgroups import cgroup_support, join_groups

DEFAULT_MAX_PROCESSES = 256
DEFAULT_MAX_MEMORY_MB = 1024
ADDRESS_SPACE_BYTES = 4 * 1024**3
"""Virtual memory per process (generous: runtimes such as node or the JVM reserve a lot)."""
FILE_SIZE_BYTES = 1024**3
"""The largest file a command may write."""
OPEN_FILES = 1024

Enforcement = Literal["cgroup2", "cgroup1", "rlimit"]


@dataclass(frozen=True)
class CommandLimits:
    """`AGENT_COMMAND_MAX_PROCESSES` and `AGENT_COMMAND_MAX_MEMORY_MB`."""

    max_processes: int = DEFAULT_MAX_PROCESSES
    """Processes and threads a command may have at once (with a cgroup: in all)."""
    max_memory_mb: int = DEFAULT_MAX_MEMORY_MB
    """Memory a command may use (with a cgroup: in all; else per process)."""


def enforcement() -> Enforcement:
    """How the process and memory limits are enforced on this machine (for the ready line)."""
    support = cgroup_support()
    return "rlimit" if support is None else support.kind


def enforcement_gap() -> str | None:
    """Why the limits do not hold for this worker, or None when they do."""
    if enforcement() == "rlimit" and os.getuid() == 0:
        return (
            "the worker runs as root and cannot create a cgroup here, so commands have no limit"
            " on processes (RLIMIT_NPROC does not bind root) and only a per-process memory limit;"
            " run it as a dedicated user, or where it may create a cgroup"
        )
    return None


def user_threads(uid: int | None = None) -> int:
    """The tasks (threads) of every process whose real uid is `uid`: what RLIMIT_NPROC counts."""
    uid = os.getuid() if uid is None else uid
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", encoding="ascii", errors="replace") as fh:
                status = fh.read()
        except OSError:
            continue
        real = threads = None
        for line in status.splitlines():
            if line.startswith("Uid:"):
                real = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
        if real == uid and threads is not None:
            count += threads
    return count


def limits_preexec(
    cpu_seconds: float,
    limits: CommandLimits | None = None,
    procs_files: tuple[str, ...] = (),
) -> Callable[[], None]:
    """A function for the child just before exec: join the command's cgroups (`procs_files`,
    when it has them) and set its rlimits. It only makes os calls and `setrlimit` (no locks, no
    imports), which is what makes it safe in a threaded worker."""
    limits = limits or CommandLimits()
    wanted = [
        (resource.RLIMIT_AS, ADDRESS_SPACE_BYTES),
        (resource.RLIMIT_FSIZE, FILE_SIZE_BYTES),
        (resource.RLIMIT_CPU, max(1, int(cpu_seconds) + 1)),
        (resource.RLIMIT_NOFILE, OPEN_FILES),
    ]
    if not procs_files:  # no cgroup: the kernel's own per-user count, and memory per process
        wanted.append((resource.RLIMIT_NPROC, user_threads() + limits.max_processes))
        wanted.append((resource.RLIMIT_DATA, limits.max_memory_mb * 1024 * 1024))
    # Never raise a hard limit the worker already has lower (that would fail in the child).
    plan: list[tuple[int, int]] = []
    for which, value in wanted:
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        plan.append((which, value))

    def apply() -> None:
        join_groups(procs_files)
        for which, value in plan:
            resource.setrlimit(which, (value, value))

    return apply
