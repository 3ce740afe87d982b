"""Figure 6, several worker processes: the product's own `python worker.py --processes 2` (two
full workers, each a process with its own client, on one task queue) against `--processes 1`, on
the same load as figure 5 (N concurrent runs × R rounds, the real activities against an instant
fake model server in a process of its own). Both worker groups start first and stay up (an idle
worker only long-polls); their batches are interleaved in pairs. The workers' CPU time is read
from /proc, and the machine's load average is noted: on a shared machine other work takes cores
the second process would use."""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.fake_llm import FakeLlmProcess
from bench.figures.scale import agent_input, finished
from bench.harness import Bench, bounded, new_id, new_queue
from bench.procstat import cpu_seconds, total_cpu_seconds
from bench.report import Figure, pair_spread
from workflows.run.agent import AgentWorkflow

ROOT = Path(__file__).resolve().parents[2]
PAIRS = {"quick": 1, "full": 2}
WARM_UP_RUNS = 10
READY_SECONDS = 120.0


@dataclass
class Group:
    """`python worker.py --processes N` and what it runs on."""

    processes: int
    task_queue: str
    proc: asyncio.subprocess.Process
    pids: list[int]


@dataclass
class Batch:
    processes: int
    rounds_per_second: float
    worker_cpu_ms_per_round: float
    cpu_share: list[float]
    """Each worker process's part of the workers' CPU time (both work when it is near 0.5)."""
    server_cpu_ms_per_round: float
    load_average: float


def worker_environ(b: Bench, task_queue: str, base_url: str, workdir: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_")) and k != "PYTHONPATH"
    }
    workspace = workdir / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.txt").write_text("bench\n")
    env.update(
        {
            "TEMPORAL_ADDRESS": b.target_host,
            "AGENT_TASK_QUEUE": task_queue,
            "AGENT_WORKSPACE": str(workspace),
            "AGENT_STATE_DIR": str(workdir / "state"),
            "AGENT_SANDBOX": "off",  # no command runs here; this skips the bwrap probe
            "LLM_BASE_URL": base_url,
            "LLM_API_KEY": "bench-key",
            "LLM_MODEL": "bench-model",
        }
    )
    return env


async def _read_until(proc: asyncio.subprocess.Process, prefix: str, want: int) -> list[str]:
    """Lines of the worker's stdout until `want` of them start with `prefix`."""
    assert proc.stdout is not None
    seen: list[str] = []
    while sum(line.startswith(prefix) for line in seen) < want:
        raw = await proc.stdout.readline()
        if not raw:
            raise RuntimeError(f"worker exited ({await proc.wait()}) before it was ready: {seen}")
        seen.append(raw.decode().strip())
    return seen


@contextlib.asynccontextmanager
async def group(b: Bench, processes: int, base_url: str) -> AsyncIterator[Group]:
    task_queue = new_queue(f"processes{processes}")
    workdir = b.workdir / f"processes{processes}"
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, str(ROOT / "worker.py"), "--processes", str(processes)],
        cwd=ROOT,
        env=worker_environ(b, task_queue, base_url, workdir),
        stdout=asyncio.subprocess.PIPE,
    )
    drain: asyncio.Task[None] | None = None
    try:
        if processes == 1:
            await asyncio.wait_for(_read_until(proc, "worker ready", 1), READY_SECONDS)
            pids = [proc.pid]
        else:
            lines = await asyncio.wait_for(
                _read_until(proc, "worker processes ready", 1), READY_SECONDS
            )
            started = next(x for x in lines if x.startswith("worker processes ready"))
            pids = [int(p) for p in started.split("(pids ")[1].rstrip(")").split()]
        drain = asyncio.create_task(_drain(proc))
        yield Group(processes, task_queue, proc, pids)
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 60)
        if drain is not None:
            drain.cancel()


async def _drain(proc: asyncio.subprocess.Process) -> None:
    """Keep reading the worker's stdout, so its pipe never fills."""
    assert proc.stdout is not None
    while await proc.stdout.readline():
        pass


async def runs(b: Bench, g: Group, count: int, rounds: int) -> None:
    handles = await bounded(
        [
            b.client.start_workflow(
                AgentWorkflow.run,
                agent_input(rounds),
                id=new_id(f"bench-processes{g.processes}"),
                task_queue=g.task_queue,
            )
            for _ in range(count)
        ]
    )
    await asyncio.gather(*(finished("agent", h) for h in handles))


async def batch(b: Bench, g: Group) -> Batch:
    p = b.profile
    cpu = [cpu_seconds(pid) for pid in g.pids]
    server = total_cpu_seconds(b.server_pids)
    began = time.monotonic()
    await runs(b, g, p.scale_runs, p.scale_rounds)
    elapsed = time.monotonic() - began
    rounds = p.scale_runs * p.scale_rounds
    used = [cpu_seconds(pid) - before for pid, before in zip(g.pids, cpu, strict=True)]
    return Batch(
        processes=g.processes,
        rounds_per_second=rounds / elapsed,
        worker_cpu_ms_per_round=1000 * sum(used) / rounds,
        cpu_share=[round(u / sum(used), 2) for u in used] if sum(used) else [],
        server_cpu_ms_per_round=1000 * (total_cpu_seconds(b.server_pids) - server) / rounds,
        load_average=os.getloadavg()[0],
    )


async def measure(b: Bench) -> list[Figure]:
    p = b.profile
    count = PAIRS.get(p.name, PAIRS["full"])
    done: list[tuple[Batch, Batch]] = []
    with FakeLlmProcess(mode="instant", content_size=200) as server:
        async with group(b, 1, server.base_url) as one, group(b, 2, server.base_url) as two:
            for g in (one, two):  # warm-up: imports, connections, every process polling
                await runs(b, g, WARM_UP_RUNS * g.processes, p.scale_rounds)
            for i in range(count):
                order = (one, two) if i % 2 == 0 else (two, one)
                result = {g.processes: await batch(b, g) for g in order}
                done.append((result[2], result[1]))
    b.details["processes"] = {"pairs": [[asdict(a), asdict(f)] for a, f in done]}
    two_rates = [a.rounds_per_second for a, _ in done]
    one_rates = [f.rounds_per_second for _, f in done]
    cpu_two = statistics.fmean(a.worker_cpu_ms_per_round for a, _ in done)
    cpu_one = statistics.fmean(f.worker_cpu_ms_per_round for _, f in done)
    shares = [a.cpu_share for a, _ in done]
    server_cpu = statistics.fmean(x.server_cpu_ms_per_round for pair in done for x in pair)
    load = statistics.fmean(x.load_average for pair in done for x in pair)
    small = "" if p.name == "full" else " (quick: reduced counts)"
    return [
        Figure(
            key="processes.throughput",
            label=f"6. 2 worker processes vs 1, {p.scale_runs} runs × {p.scale_rounds}{small}",
            value=statistics.fmean(two_rates),
            unit="rounds/s",
            floor=statistics.fmean(one_rates),
            floor_label="1 process",
            spread=pair_spread(two_rates, one_rates),
            target_kind="ratio_min",
            target=1.5,
            note=(
                f"python worker.py --processes 2 vs --processes 1, {count} interleaved pair(s);"
                f" real activities, fake model answering at once; workers' CPU"
                f" {cpu_two:.1f} ms/round (2 processes, shares {shares}) vs {cpu_one:.1f} (1),"
                f" the Temporal server's {server_cpu:.1f}; {os.cpu_count()}"
                f" cores, load average {load:.1f} during the batches (the dev server, the fake"
                " model server and the bench's client share the cores)"
            ),
        )
    ]
