"""What every figure shares: the dev server, a worker on a fresh task queue, starting runs, and
reading a run's history across continue-as-new generations."""

from __future__ import annotations

import asyncio
import itertools
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.plugin import heartbeat_tuning
from activities.sandbox_runner import workflow_runner
from bench.bare_workflow import BareWorkflow
from runtime.connect import data_converter
from runtime.search_attributes import ensure_search_attributes
from workflows.run.agent import AgentWorkflow

DEV_SERVER_ARGS = ["--log-level", "error"]
"""Server defaults otherwise: the figures describe the product as deployed, so continue-as-new
is suggested at Temporal's own thresholds, not the tests' lowered ones."""


@dataclass(frozen=True)
class Profile:
    """How much each figure measures. `quick` keeps CI under two minutes."""

    name: str
    overhead_pairs: int
    overhead_rounds: int
    history_rounds: tuple[int, ...]
    history_sizes: tuple[int, ...]
    cancel_pairs: int
    cancel_stream_seconds: float
    approval_pairs: int
    scale_runs: int
    scale_rounds: int
    scale_pairs: int
    scale_logic_pairs: int
    """Pairs for the report-only decomposition (in-process fakes); one keeps `full` < 10 min."""
    scale_variants: bool
    """Whether to measure the report-only worker variants (compiled bytecode, `workflows/`
    imported again per run): `full` only, each costs a worker process and a pair."""
    paused_runs: int
    replay_rounds: int
    replay_repeats: int


QUICK = Profile("quick", 3, 10, (10, 100), (500, 5000), 1, 10.0, 5, 10, 5, 1, 1, False, 50, 100, 3)
FULL = Profile(
    "full", 6, 25, (10, 100, 1000), (500, 5000), 2, 20.0, 15, 200, 10, 3, 1, True, 1000, 300, 5
)


@dataclass
class Bench:
    """The context a figure runs in."""

    client: Client
    target_host: str
    profile: Profile
    workdir: Path
    details: dict[str, Any] = field(default_factory=dict)
    server_pids: list[int] = field(default_factory=list)
    """The dev server's processes (their CPU time is a figure's too, on a machine this small)."""


async def start_server() -> WorkflowEnvironment:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(Path(sys.executable).parent / "temporal"),
        data_converter=data_converter(),
        dev_server_extra_args=DEV_SERVER_ARGS,
    )
    await ensure_search_attributes(env.client)
    return env


def new_queue(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:8]}"


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def worker(
    client: Client,
    task_queue: str,
    activities: Sequence[Callable[..., Any]],
    *,
    reimport: bool = False,
    **kw: Any,
) -> Worker:
    """AgentWorkflow and the bare workflow on one worker, so both pay the same worker costs, in
    the product's sandbox (`activities.sandbox_runner`: `workflows/` passed through). `reimport`:
    Temporal's default sandbox instead, which imports `workflows.run.agent` again for every run (how
    the worker ran before; a report-only variant)."""
    runner = SandboxedWorkflowRunner() if reimport else workflow_runner()
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentWorkflow, BareWorkflow],
        activities=list(activities),
        workflow_runner=runner,
        **{**heartbeat_tuning(), **kw},
    )


async def generations(client: Client, workflow_id: str, run_id: str) -> list[WorkflowHistory]:
    """Every generation of a run, following continue-as-new from `run_id` (the first run)."""
    out: list[WorkflowHistory] = []
    current: str | None = run_id
    while current:
        history = await client.get_workflow_handle(workflow_id, run_id=current).fetch_history()
        out.append(history)
        last = history.events[-1] if history.events else None
        current = None
        if last is not None and last.event_type == (
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        ):
            attrs = last.workflow_execution_continued_as_new_event_attributes
            current = attrs.new_execution_run_id
    return out


def history_bytes(events: Sequence[HistoryEvent]) -> int:
    return sum(len(e.SerializeToString()) for e in events)


def round_times(history: WorkflowHistory, activity_type: str) -> list[float]:
    """Seconds between successive schedulings of `activity_type`: one per round (server clock)."""
    stamps = [
        e.event_time.ToDatetime().timestamp()
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity_type
    ]
    return [b - a for a, b in itertools.pairwise(stamps)]


CONCURRENCY = 50
"""Client calls in flight at once (starts, queries, signals) when a figure makes many."""


async def bounded(calls: Sequence[Awaitable[Any]], limit: int = CONCURRENCY) -> list[Any]:
    """Await `calls` with at most `limit` in flight; the results in order."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Awaitable[Any]) -> Any:
        async with gate:
            return await call

    return await asyncio.gather(*(one(c) for c in calls))


async def poll(
    check: Callable[[], Awaitable[bool]], limit: float = 60.0, interval: float = 0.02
) -> None:
    """Wait until `check()` is true: the bench only observes runs from outside, by query."""
    deadline = time.monotonic() + limit
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")
