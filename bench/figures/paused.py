"""Part of figure 5, measured on its own (`python -m bench --only paused`): many runs paused on
approval on one worker, run as a subprocess so its RSS is its own: memory once all are paused,
and the time to approve them all and see them finish, against the same number of bare runs
paused on a signal (in a fresh worker process of their own)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio.client import WorkflowHandle

from bench.bare_workflow import SIGNAL_GO, BareInput, BareWorkflow
from bench.harness import Bench, bounded, new_id, new_queue
from bench.procstat import rss_kib
from bench.report import Figure
from bench.worker_proc import worker_process
from workflows import names
from workflows.model import AgentRunInput, AgentRunOptions, AgentStatus, ChatMessage
from workflows.run.agent import AgentWorkflow


async def start_paused(b: Bench, kind: str, task_queue: str) -> WorkflowHandle[Any, Any]:
    if kind == "agent":
        return await b.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(messages=[ChatMessage.user("go")], options=AgentRunOptions(max_rounds=2)),
            id=new_id("bench-paused-agent"),
            task_queue=task_queue,
        )
    return await b.client.start_workflow(
        BareWorkflow.run,
        BareInput(rounds=1, pause_for_signal=True),
        id=new_id("bench-paused-bare"),
        task_queue=task_queue,
    )


async def is_paused(kind: str, handle: WorkflowHandle[Any, Any]) -> bool:
    if kind == "agent":
        status: AgentStatus = await handle.query(names.QUERY_STATUS, result_type=AgentStatus)
        return status.phase == "awaiting_approval"
    paused: bool = await handle.query(BareWorkflow.paused)
    return paused


async def approve(kind: str, handle: WorkflowHandle[Any, Any]) -> None:
    if kind == "agent":
        await handle.signal(names.SIGNAL_TOOL_APPROVAL, {"call_id": "call_0", "approved": True})
    else:
        await handle.signal(SIGNAL_GO)


async def paused_runs(b: Bench, kind: str) -> dict[str, float]:
    """Start a worker process, park N runs on it, measure RSS, approve all, time to finish."""
    task_queue = new_queue(f"paused-{kind}")
    async with worker_process(b.target_host, task_queue, kind) as proc:
        idle = rss_kib(proc.pid)
        n = b.profile.paused_runs
        handles = await bounded([start_paused(b, kind, task_queue) for _ in range(n)])
        waiting = list(handles)
        deadline = time.monotonic() + 300
        while waiting and time.monotonic() < deadline:
            flags = await bounded([is_paused(kind, h) for h in waiting])
            waiting = [h for h, ok in zip(waiting, flags, strict=True) if not ok]
            if waiting:
                await asyncio.sleep(0.2)
        if waiting:
            raise RuntimeError(f"{len(waiting)} runs never paused")
        await asyncio.sleep(1.0)  # let the worker settle before reading its memory
        parked = rss_kib(proc.pid)
        began = time.monotonic()
        await bounded([approve(kind, h) for h in handles])
        await asyncio.gather(*(h.result() for h in handles))
        finish = time.monotonic() - began
    return {"idle_rss_kib": idle, "paused_rss_kib": parked, "approve_all_seconds": finish}


async def measure(b: Bench) -> list[Figure]:
    parked_agent = await paused_runs(b, "agent")
    parked_bare = await paused_runs(b, "bare")
    b.details["paused"] = {"agent": parked_agent, "bare": parked_bare}
    n = b.profile.paused_runs
    per_run = (parked_agent["paused_rss_kib"] - parked_agent["idle_rss_kib"]) / n
    per_run_bare = (parked_bare["paused_rss_kib"] - parked_bare["idle_rss_kib"]) / n
    small = "" if b.profile.name == "full" else " (quick: reduced counts)"
    return [
        Figure(
            key="scale.paused_rss",
            label=f"5. worker RSS, {n} runs paused{small}",
            value=parked_agent["paused_rss_kib"] / 1024,
            unit="MiB",
            floor=parked_bare["paused_rss_kib"] / 1024,
            floor_label="bare wf",
            note=(
                f"worker subprocess; idle {parked_agent['idle_rss_kib'] / 1024:.0f} MiB; "
                f"{per_run:.0f} KiB per paused agent run vs {per_run_bare:.0f} KiB per bare run; "
                "report only"
            ),
        ),
        Figure(
            key="scale.approve_all",
            label=f"5. approve {n} paused runs → all finished{small}",
            value=parked_agent["approve_all_seconds"],
            unit="s",
            floor=parked_bare["approve_all_seconds"],
            floor_label="bare wf",
            note="agent: tool + closing model call per run; bare: two no-op steps; report only",
        ),
    ]
