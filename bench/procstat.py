"""What the kernel says about a process: its memory (RSS) and the CPU time it used, so a figure
can charge a worker process its own cost (Linux `/proc`)."""

from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` so far (its threads included, not its children)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def total_cpu_seconds(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def children(name: str, parent: int | None = None) -> list[int]:
    """Pids of the processes `parent` (default: this one) started whose command is `name`."""
    parent = os.getpid() if parent is None else parent
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == parent and comm == name:
            found.append(int(entry.name))
    return found


def thread_cpu_seconds(pid: int) -> dict[tuple[int, str], float]:
    """User + system CPU time of each thread of `pid` so far, by (thread id, thread name)."""
    out: dict[tuple[int, str], float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[(int(task.name), name)] = (int(fields[11]) + int(fields[12])) / TICKS
    return out
