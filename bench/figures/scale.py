"""Figure 5, scale. (a) Throughput: N concurrent runs of R rounds, rounds per second, AgentWorkflow
(real activities, instant fake model, `list_dir`) against the bare workflow, interleaved.
(b) Many runs paused on approval on one worker, run as a subprocess so its RSS is its own:
memory once all are paused, and the time to approve them all and see them finish, against the
same number of bare runs paused on a signal (in a fresh worker process of their own)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHandle

from bench.agent_activities import agent_activities
from bench.bare_workflow import SIGNAL_GO, BareInput, BareWorkflow
from bench.fake_llm import FakeLlmProcess
from bench.harness import Bench, new_id, new_queue, worker
from bench.report import Figure
from bench.stubs import LIST_DIR, FakeAgent, Stamps, bare_activities
from workflows import names
from workflows.agent import AgentWorkflow
from workflows.model import AgentRunInput, AgentRunOptions, AgentStatus, ChatMessage

CONCURRENCY = 50
"""Client calls in flight at once (starts, queries, signals)."""


async def bounded(calls: list[Any], limit: int = CONCURRENCY) -> list[Any]:
    gate = asyncio.Semaphore(limit)

    async def one(call: Any) -> Any:
        async with gate:
            return await call

    return await asyncio.gather(*(one(c) for c in calls))


async def start(b: Bench, kind: str, task_queue: str, rounds: int, paused: bool) -> Any:
    if kind == "agent":
        options = AgentRunOptions(max_rounds=rounds, tools=None if paused else ["list_dir"])
        return await b.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(messages=[ChatMessage.user("go")], options=options),
            id=new_id("bench-scale-agent"),
            task_queue=task_queue,
        )
    return await b.client.start_workflow(
        BareWorkflow.run,
        BareInput(rounds=rounds, pause_for_signal=paused),
        id=new_id("bench-scale-bare"),
        task_queue=task_queue,
    )


async def throughput(b: Bench, kind: str, task_queue: str) -> float:
    p = b.profile
    began = time.monotonic()
    handles = await bounded(
        [start(b, kind, task_queue, p.scale_rounds, False) for _ in range(p.scale_runs)]
    )
    await asyncio.gather(*(h.result() for h in handles))
    return p.scale_runs * p.scale_rounds / (time.monotonic() - began)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


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
    proc = await asyncio.create_subprocess_exec(
        *[
            sys.executable,
            "-m",
            "bench.worker_proc",
            "--address",
            b.target_host,
            "--task-queue",
            task_queue,
            "--kind",
            kind,
        ],
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        if line.strip() != "ready":
            raise RuntimeError(f"worker process did not start: {line!r}")
        idle = rss_kib(proc.pid)
        n = b.profile.paused_runs
        handles = await bounded([start(b, kind, task_queue, 1, True) for _ in range(n)])
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
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


async def measure(b: Bench) -> list[Figure]:
    p = b.profile
    task_queue = new_queue("scale")
    agent: list[float] = []
    bare: list[float] = []
    with FakeLlmProcess(mode="instant", content_size=200) as server:
        async with agent_activities(b.client, server.base_url, b.workdir / "scale") as (
            acts,
            label,
            _,
        ):
            async with worker(b.client, task_queue, [*acts, *bare_activities(Stamps())]):
                for i in range(p.scale_pairs):
                    order = ("agent", "bare") if i % 2 == 0 else ("bare", "agent")
                    for kind in order:
                        rate = await throughput(b, kind, task_queue)
                        (agent if kind == "agent" else bare).append(rate)
    # The same, with the model and the tool replaced by in-process fakes under the real activity
    # names: the workflow's own cost, without the `messages` query and the HTTP call per round.
    logic: list[float] = []
    logic_bare: list[float] = []
    logic_queue = new_queue("scale-logic")
    fakes = FakeAgent(content_size=200, tool=LIST_DIR).activities()
    async with worker(b.client, logic_queue, [*fakes, *bare_activities(Stamps())]):
        for i in range(p.scale_logic_pairs):
            order = ("agent", "bare") if i % 2 == 0 else ("bare", "agent")
            for kind in order:
                rate = await throughput(b, kind, logic_queue)
                (logic if kind == "agent" else logic_bare).append(rate)
    parked_agent = await paused_runs(b, "agent")
    parked_bare = await paused_runs(b, "bare")
    b.details["scale"] = {
        "activities": label,
        "agent_rounds_per_second": agent,
        "bare_rounds_per_second": bare,
        "agent_logic_rounds_per_second": logic,
        "bare_logic_rounds_per_second": logic_bare,
        "paused_agent": parked_agent,
        "paused_bare": parked_bare,
    }
    n = p.paused_runs
    per_run = (parked_agent["paused_rss_kib"] - parked_agent["idle_rss_kib"]) / n
    per_run_bare = (parked_bare["paused_rss_kib"] - parked_bare["idle_rss_kib"]) / n
    small = "" if p.name == "full" else " (quick: reduced counts)"
    return [
        Figure(
            key="scale.throughput",
            label=f"5. {p.scale_runs} concurrent runs × {p.scale_rounds} rounds{small}",
            value=sum(agent) / len(agent),
            unit="rounds/s",
            floor=sum(bare) / len(bare),
            floor_label="bare wf",
            target_kind="ratio_min",
            target=0.9,
            note=f"{p.scale_pairs} interleaved pair(s); {label}; fake model answering at once",
        ),
        Figure(
            key="scale.throughput_logic",
            label=f"5. same, model and tool faked in-process{small}",
            value=sum(logic) / len(logic),
            unit="rounds/s",
            floor=sum(logic_bare) / len(logic_bare),
            floor_label="bare wf",
            note=(
                "AgentWorkflow with in-process fakes of call_llm/execute_tool: the workflow's own"
                " cost; the gap to the row above is the per-round `messages` query and HTTP call;"
                " report only"
            ),
        ),
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
