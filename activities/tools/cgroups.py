"""A cgroup per command: the process and memory limits that hold for every user, root included.

RLIMIT_NPROC does not bind root, and a memory rlimit is per process; a cgroup's `pids.max` and
memory limit bind the command and everything it starts, whoever runs the worker. The worker
looks once, at start, for a hierarchy it may create groups in: cgroup v2 (the `pids` and `memory`
controllers available below its own group), else cgroup v1 (the `pids` and `memory`
hierarchies). It creates its groups below its own (so limits set above it still apply), one per
command, removed when the command ends.

With cgroup v2 a group that holds processes cannot hand controllers to child groups; when the
worker's own group is in that state and holds only the worker, the worker moves itself into a
leaf group `durable-agent-worker-<pid>` first (what a systemd service with `Delegate=yes` expects).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

CgroupKind = Literal["cgroup2", "cgroup1"]
BASE_PREFIX = "durable-agent-"
_counter = itertools.count(1)


@dataclass(frozen=True)
class CgroupSupport:
    """Where this worker creates its command groups: one folder (v2) or one per hierarchy (v1:
    pids first, memory second)."""

    kind: CgroupKind
    bases: tuple[Path, ...]


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file system type, options) of the cgroup mounts, from mountinfo."""
    found: list[tuple[str, str, set[str]]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = set(fields[5].split(",")) | set(tail[2].split(","))
        found.append((fields[4].replace("\\040", " "), tail[0], options))
    return found


def _own_groups() -> dict[str, str]:
    """This process's group per hierarchy: `''` for v2, each controller name for v1."""
    groups: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if not controllers:
                groups[""] = path
            for name in controllers.split(","):
                groups[name] = path
    return groups


def _write(path: Path, text: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def _fresh_base(parent: Path) -> Path:
    """This worker's folder for its command groups. Empty ones of workers gone are removed (only
    empty ones: a process in one may belong to a worker this process cannot see)."""
    for stale in parent.glob(f"{BASE_PREFIX}[0-9]*"):
        pid = stale.name[len(BASE_PREFIX) :]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            remove_group(stale, kill=False, wait_seconds=0)
    base = parent / f"{BASE_PREFIX}{os.getpid()}"
    base.mkdir(exist_ok=True)
    return base


def _v2(mount: str, own: str) -> CgroupSupport | None:
    here = Path(mount) / own.lstrip("/")
    needed = {"pids", "memory"}
    try:
        if not needed <= set((here / "cgroup.controllers").read_text().split()):
            return None
        enabled = set((here / "cgroup.subtree_control").read_text().split())
        if not needed <= enabled:
            try:
                _write(here / "cgroup.subtree_control", "+pids +memory")
            except OSError as err:
                if err.errno != errno.EBUSY:
                    return None
                members = (here / "cgroup.procs").read_text().split()
                if members != [str(os.getpid())]:
                    return None
                leaf = here / f"{BASE_PREFIX}worker-{os.getpid()}"
                leaf.mkdir(exist_ok=True)
                _write(leaf / "cgroup.procs", str(os.getpid()))
                _write(here / "cgroup.subtree_control", "+pids +memory")
        base = _fresh_base(here)
        _write(base / "cgroup.subtree_control", "+pids +memory")
    except OSError:
        return None
    return CgroupSupport("cgroup2", (base,))


def _v1(mounts: list[tuple[str, str, set[str]]], own: dict[str, str]) -> CgroupSupport | None:
    bases: list[Path] = []
    for controller in ("pids", "memory"):
        found = (m for m, kind, opts in mounts if kind == "cgroup" and controller in opts)
        mount = next(found, None)
        if mount is None or controller not in own:
            return None
        try:
            bases.append(_fresh_base(Path(mount) / own[controller].lstrip("/")))
        except OSError:
            return None
    return CgroupSupport("cgroup1", tuple(bases))


@cache
def cgroup_support() -> CgroupSupport | None:
    """The cgroups this worker may create, found once per process (None: it may create none)."""
    mounts, own = _mounts(), _own_groups()
    unified = next((m for m, kind, _ in mounts if kind == "cgroup2"), None)
    if unified is not None and "" in own:
        found = _v2(unified, own[""])
        if found is not None:
            return found
    return _v1(mounts, own)


def _members(group: Path) -> list[int]:
    """The pids in `group` that this process can see (a pid of another PID namespace reads 0)."""
    with contextlib.suppress(OSError):
        return [pid for pid in map(int, (group / "cgroup.procs").read_text().split()) if pid > 1]
    return []


def remove_group(group: Path, *, kill: bool = True, wait_seconds: float = 2.0) -> bool:
    """Kill what is left in `group` and its children (with `kill`), then remove them. False if it
    is still busy after `wait_seconds` (a process in the middle of exiting): a later start
    removes it once it is empty."""
    children = [p for p in group.iterdir() if p.is_dir()] if group.is_dir() else []
    for child in children:
        remove_group(child, kill=kill, wait_seconds=wait_seconds)
    deadline = time.monotonic() + wait_seconds
    while True:
        for pid in _members(group) if kill else ():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            group.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as err:
            if err.errno != errno.EBUSY or time.monotonic() > deadline:
                return False
        time.sleep(0.02)


def _event_count(path: Path, key: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


class CommandGroup:
    """The cgroup(s) of one command: created with its limits, joined by the command's first
    process before it runs anything, removed (with whatever is left in it) at the end."""

    def __init__(self, support: CgroupSupport, max_processes: int, max_memory_mb: int) -> None:
        self.support = support
        name = f"cmd-{next(_counter)}"
        self.groups = tuple(base / name for base in support.bases)
        memory = str(max_memory_mb * 1024 * 1024)
        try:
            for group in self.groups:
                group.mkdir()
            if support.kind == "cgroup2":
                (group,) = self.groups
                _write(group / "pids.max", str(max_processes))
                _write(group / "memory.max", memory)
                with contextlib.suppress(OSError):  # no swap accounting: nothing to cap
                    _write(group / "memory.swap.max", "0")
            else:
                pids, mem = self.groups
                _write(pids / "pids.max", str(max_processes))
                _write(mem / "memory.limit_in_bytes", memory)
                with contextlib.suppress(OSError):
                    _write(mem / "memory.memsw.limit_in_bytes", memory)
        except OSError:
            self.close()
            raise

    @property
    def procs_files(self) -> tuple[str, ...]:
        """The files the command's first process writes its pid to (to join before exec)."""
        return tuple(str(group / "cgroup.procs") for group in self.groups)

    def refused_forks(self) -> int:
        """How many times the process limit refused a new process or thread."""
        return _event_count(self.groups[0] / "pids.events", "max")

    def memory_kills(self) -> int:
        """How many processes the memory limit's OOM killer ended."""
        if self.support.kind == "cgroup2":
            return _event_count(self.groups[0] / "memory.events", "oom_kill")
        return _event_count(self.groups[1] / "memory.oom_control", "oom_kill")

    def close(self) -> None:
        for group in self.groups:
            remove_group(group)


def join_groups(procs_files: tuple[str, ...]) -> None:
    """In the child before exec: move this process into the command's groups (os calls only)."""
    pid = str(os.getpid()).encode()
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, pid)
        finally:
            os.close(fd)
