"""Figure 5, scale. Throughput: N concurrent runs of R rounds (200 × 10 in the full profile), in
rounds per second, AgentWorkflow with the real activities (an instant fake model server in a
process of its own, the real `list_dir`) against the fair floor: the bare workflow making, per
round, the same streamed request with the agent's own headers and body bytes to the same server
and the same `list_dir`, with plain httpx, json and os and no project code (`bench.floor`; the
reference run's requests and the floor's are compared at the server before any batch). Both run
on one worker process, whose CPU time is read from /proc; agent and floor batches are
interleaved in pairs and each ratio is given with its spread over the pairs.

The worker's CPU per round is a figure of its own, against the floor's on the same process.

Report-only variants, each on a worker process of its own against its own floor: the agent with
compiled bytecode (what a machine without PYTHONDONTWRITEBYTECODE has), in Temporal's default
sandbox (`workflows.run.agent` imported again for every run, as before `activities.sandbox_runner`),
and the workflow alone (model and tool faked in-process). The paused runs are figure `paused`."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from bench.bare_workflow import BareInput, BareWorkflow
from bench.fake_llm import FakeLlmProcess
from bench.floor import check_same_requests, save_record
from bench.harness import Bench, bounded, history_bytes, new_id, new_queue
from bench.procstat import cpu_seconds, total_cpu_seconds
from bench.report import Figure, pair_spread
from bench.worker_proc import worker_process
from workflows.model import AgentRunInput, AgentRunOptions, AgentRunResult, ChatMessage
from workflows.run.agent import AgentWorkflow

VARIANT_PAIRS = 1
"""Pairs for each report-only variant (one keeps `full` within its time)."""


@dataclass
class Batch:
    """One batch of N concurrent runs on one worker process."""

    kind: str
    rounds_per_second: float
    worker_cpu_ms_per_round: float
    server_cpu_ms_per_round: float
    """The Temporal dev server's CPU per round (on 2 cores it competes with the worker)."""
    model_requests: int
    request_bytes: float
    """Mean bytes of one model request's body, as the fake server received them."""
    events_per_run: int
    history_bytes_per_run: int
    activities_per_run: dict[str, int]


REPEATS = 1_000
"""`max_repeats` of the agent's runs: the fake model asks for the same `list_dir` every round, and
the default limit (3) would answer the fourth without running it, where the floor runs it."""


def agent_input(rounds: int) -> AgentRunInput:
    return AgentRunInput(
        messages=[ChatMessage.user("go")],
        options=AgentRunOptions(max_rounds=rounds, tools=["list_dir"], max_repeats=REPEATS),
    )


async def start(b: Bench, kind: str, task_queue: str, rounds: int) -> WorkflowHandle[Any, Any]:
    if kind == "agent":
        return await b.client.start_workflow(
            AgentWorkflow.run,
            agent_input(rounds),
            id=new_id("bench-scale-agent"),
            task_queue=task_queue,
        )
    return await b.client.start_workflow(
        BareWorkflow.run,
        BareInput(rounds=rounds),
        id=new_id("bench-scale-bare"),
        task_queue=task_queue,
    )


async def finished(kind: str, handle: WorkflowHandle[Any, Any]) -> None:
    result = await handle.result()
    if kind == "agent":
        assert isinstance(result, AgentRunResult)
        if result.finish_reason != "max_rounds":
            raise RuntimeError(f"agent run ended {result.finish_reason}: {result.error}")


async def shape(handle: WorkflowHandle[Any, Any]) -> tuple[int, int, dict[str, int]]:
    """Events, history bytes and activities (by type) of one run."""
    history = await handle.fetch_history()
    kinds = Counter(
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    )
    return len(history.events), history_bytes(history.events), dict(sorted(kinds.items()))


async def batch(
    b: Bench, kind: str, task_queue: str, worker_pid: int, server: FakeLlmProcess | None
) -> Batch:
    p = b.profile
    before = server.stats() if server is not None else None
    cpu = cpu_seconds(worker_pid)
    server_cpu = total_cpu_seconds(b.server_pids)
    began = time.monotonic()
    starts = [start(b, kind, task_queue, p.scale_rounds) for _ in range(p.scale_runs)]
    handles = await bounded(starts)
    await asyncio.gather(*(finished(kind, h) for h in handles))
    elapsed = time.monotonic() - began
    rounds = p.scale_runs * p.scale_rounds
    cpu = cpu_seconds(worker_pid) - cpu
    server_cpu = total_cpu_seconds(b.server_pids) - server_cpu
    requests, body = 0, 0
    if server is not None and before is not None:
        after = server.stats()
        requests = after["requests"] - before["requests"]
        body = after["body_bytes"] - before["body_bytes"]
    events, size, activities = await shape(handles[0])
    return Batch(
        kind=kind,
        rounds_per_second=rounds / elapsed,
        worker_cpu_ms_per_round=1000 * cpu / rounds,
        server_cpu_ms_per_round=1000 * server_cpu / rounds,
        model_requests=requests,
        request_bytes=body / requests if requests else 0.0,
        events_per_run=events,
        history_bytes_per_run=size,
        activities_per_run=activities,
    )


async def pairs(
    b: Bench, task_queue: str, worker_pid: int, server: FakeLlmProcess | None, count: int
) -> list[tuple[Batch, Batch]]:
    """`count` interleaved (agent, floor) pairs, the order flipped every pair."""
    out: list[tuple[Batch, Batch]] = []
    for i in range(count):
        order = ("agent", "bare") if i % 2 == 0 else ("bare", "agent")
        done = {kind: await batch(b, kind, task_queue, worker_pid, server) for kind in order}
        out.append((done["agent"], done["bare"]))
        a, f = done["agent"], done["bare"]
        print(
            f"[bench] {task_queue} pair {i + 1}: {a.rounds_per_second:.1f} vs"
            f" {f.rounds_per_second:.1f} rounds/s, worker CPU {a.worker_cpu_ms_per_round:.1f} vs"
            f" {f.worker_cpu_ms_per_round:.1f} ms/round",
            file=sys.stderr,
            flush=True,
        )
    return out


async def reference_run(b: Bench, task_queue: str, record: Path, server: FakeLlmProcess) -> None:
    """One agent run of R rounds (it also warms the worker up): the bodies of its model requests,
    as the server received them, are what the floor sends, round by round. Then one floor run of
    R rounds, whose requests must be the agent's (head and body, round by round)."""
    rounds = b.profile.scale_rounds
    before = server.stats()["requests"]
    await finished("agent", await start(b, "agent", task_queue, rounds))
    made = server.stats()["requests"] - before
    if made != rounds:
        raise RuntimeError(f"the reference run made {made} model requests in {rounds} rounds")
    agent = server.recent(rounds)
    save_record(record, [r["body"] for r in agent])
    await finished("bare", await start(b, "bare", task_queue, rounds))
    check_same_requests(agent, server.recent(rounds))


def variant_env(name: str, workdir: Path) -> dict[str, str] | None:
    env = dict(os.environ)
    if name == "pyc":
        # Bytecode written once to a cache of the bench's own, and read by every run's import.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    return env


async def fair_pairs(
    b: Bench, server: FakeLlmProcess, variant: str, count: int
) -> list[tuple[Batch, Batch]]:
    """`count` pairs on a fresh worker process of the `variant` (plain, pyc, reimport)."""
    workdir = b.workdir / f"scale-{variant}"
    workdir.mkdir(parents=True, exist_ok=True)
    record = workdir / "floor-record.json"
    task_queue = new_queue(f"scale-{variant}")
    extra = [
        *["--llm-url", server.base_url, "--workdir", str(workdir)],
        *["--floor-record", str(record)],
        *(["--reimport"] if variant == "reimport" else []),
    ]
    env = variant_env(variant, workdir)
    async with worker_process(b.target_host, task_queue, "fair", *extra, env=env) as proc:
        await reference_run(b, task_queue, record, server)
        return await pairs(b, task_queue, proc.pid, server, count)


async def logic_pairs(b: Bench, count: int) -> list[tuple[Batch, Batch]]:
    task_queue = new_queue("scale-logic")
    async with worker_process(b.target_host, task_queue, "logic") as proc:
        await finished("agent", await start(b, "agent", task_queue, b.profile.scale_rounds))
        return await pairs(b, task_queue, proc.pid, None, count)


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def throughput_figure(
    key: str, label: str, done: list[tuple[Batch, Batch]], floor_label: str, **kw: Any
) -> Figure:
    agent = [a.rounds_per_second for a, _ in done]
    floor = [f.rounds_per_second for _, f in done]
    return Figure(
        key=key,
        label=label,
        value=mean(agent),
        unit="rounds/s",
        floor=mean(floor),
        floor_label=floor_label,
        spread=pair_spread(agent, floor),
        **kw,
    )


def cpu_figure(done: list[tuple[Batch, Batch]], load: str, small: str) -> Figure:
    """The worker process's CPU per round (`/proc`, user + system, all threads), agent against
    the fair floor on the same process, pair by pair."""
    agent = [a.worker_cpu_ms_per_round for a, _ in done]
    floor = [f.worker_cpu_ms_per_round for _, f in done]
    return Figure(
        key="scale.worker_cpu_per_round",
        label=f"5. worker CPU ms/round, agent vs fair floor, {load}{small}",
        value=mean(agent),
        unit="ms",
        floor=mean(floor),
        floor_label="fair floor",
        spread=pair_spread(agent, floor),
        target_kind="ratio_max",
        target=1.3,
        note=(
            "the worker process's user + system CPU time over each batch (/proc), per round;"
            f" ratio against the floor's batches of the same run, {len(done)} interleaved pair(s)"
        ),
    )


def cost_note(done: list[tuple[Batch, Batch]]) -> str:
    a, f = done[0]
    cpu_a = mean([x.worker_cpu_ms_per_round for x, _ in done])
    cpu_f = mean([y.worker_cpu_ms_per_round for _, y in done])
    server_a = mean([x.server_cpu_ms_per_round for x, _ in done])
    server_f = mean([y.server_cpu_ms_per_round for _, y in done])
    return (
        f"worker CPU {cpu_a:.1f} ms/round vs floor {cpu_f:.1f}, Temporal server CPU"
        f" {server_a:.1f} vs {server_f:.1f}; a run writes {a.events_per_run}"
        f" history events vs {f.events_per_run} ({a.history_bytes_per_run:,} B vs"
        f" {f.history_bytes_per_run:,} B); activities {a.activities_per_run} vs"
        f" {f.activities_per_run}"
    )


def variant_figures(runs: dict[str, list[tuple[Batch, Batch]]], small: str) -> list[Figure]:
    """The report-only worker variants, when they were measured."""
    if "pyc" not in runs:
        return []
    return [
        throughput_figure(
            "scale.throughput_pyc",
            f"5. same, compiled bytecode{small}",
            runs["pyc"],
            "fair floor",
            note=(
                "the worker without PYTHONDONTWRITEBYTECODE (bytecode cached in the bench's own"
                " PYTHONPYCACHEPREFIX): the modules the sandbox imports again for every run (the"
                " floor's bench/bare_workflow.py; none of workflows/, passed through) are not"
                " compiled again; report only;"
                f" {cost_note(runs['pyc'])}"
            ),
        ),
        throughput_figure(
            "scale.throughput_reimport",
            f"5. same, workflows.run.agent imported again per run{small}",
            runs["reimport"],
            "fair floor",
            note=(
                "Temporal's default sandbox, as the worker ran before activities.sandbox_runner:"
                " the workflow's module and the package imported (and compiled) again for every"
                f" run; report only; {cost_note(runs['reimport'])}"
            ),
        ),
    ]


async def measure(b: Bench) -> list[Figure]:
    p = b.profile
    runs: dict[str, list[tuple[Batch, Batch]]] = {}
    with FakeLlmProcess(mode="instant", content_size=200) as server:
        runs["fair"] = await fair_pairs(b, server, "plain", p.scale_pairs)
        if p.scale_variants:
            runs["pyc"] = await fair_pairs(b, server, "pyc", VARIANT_PAIRS)
            runs["reimport"] = await fair_pairs(b, server, "reimport", VARIANT_PAIRS)
    runs["logic"] = await logic_pairs(b, p.scale_logic_pairs)
    b.details["scale"] = {
        "activities": "real activities.AgentActivities in a worker process of their own",
        "pairs": {k: [[asdict(a), asdict(f)] for a, f in v] for k, v in runs.items()},
    }
    fair = runs["fair"]
    a0, f0 = fair[0]
    bytes_note = (
        f"model request {a0.request_bytes:,.0f} B mean vs floor {f0.request_bytes:,.0f} B"
        f" ({a0.model_requests} vs {f0.model_requests} requests)"
    )
    small = "" if p.name == "full" else " (quick: reduced counts)"
    load = f"{p.scale_runs} runs × {p.scale_rounds} rounds"
    return [
        throughput_figure(
            "scale.throughput",
            f"5. rounds/s, agent vs fair floor, {load}{small}",
            fair,
            "fair floor",
            target_kind="ratio_min",
            target=0.85,
            note=(
                f"{p.scale_runs} concurrent runs of {p.scale_rounds} rounds a batch;"
                f" {len(fair)} interleaved pair(s) on one worker process; real activities, fake"
                " model answering at once; the floor makes the agent's streamed request (its"
                " headers and body bytes) and list_dir per round with plain httpx, json and os,"
                f" no project code; {bytes_note}; {cost_note(fair)}"
            ),
        ),
        cpu_figure(fair, load, small),
        *variant_figures(runs, small),
        throughput_figure(
            "scale.throughput_logic",
            f"5. same, model and tool faked in-process{small}",
            runs["logic"],
            "bare wf",
            note=(
                "AgentWorkflow with in-process fakes of its activities against the bare"
                " workflow's no-op steps: the workflow's own cost; report only;"
                f" {cost_note(runs['logic'])}"
            ),
        ),
    ]
