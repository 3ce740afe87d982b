"""Figure 1, per-round overhead: AgentWorkflow with the real activities against an instant fake
model and the `list_dir` tool, against the fair floor (the bare workflow making the agent's own
model request and `list_dir` per round with plain httpx, json and os, `bench.floor`) on the same
worker and server, interleaved. The in-process floor calls the floor's two steps in a plain loop,
without Temporal: what a round costs with no orchestration and no project code at all."""

from __future__ import annotations

import time
from pathlib import Path

from bench.agent_activities import API_KEY, agent_activities, bench_workspace
from bench.bare_workflow import ACTIVITY_STEP_A, BareInput, BareWorkflow, StepInput
from bench.fake_llm import FakeLlmServer
from bench.figures.scale import REPEATS
from bench.floor import FairFloor, check_same_requests, save_record
from bench.harness import Bench, median, new_id, new_queue, round_times, worker
from bench.report import Figure
from workflows import names
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage
from workflows.run.agent import AgentWorkflow


async def agent_round_times(b: Bench, task_queue: str, rounds: int) -> list[float]:
    """Round times of one agent run."""
    options = AgentRunOptions(max_rounds=rounds, tools=["list_dir"], max_repeats=REPEATS)
    handle = await b.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(messages=[ChatMessage.user("list the workspace")], options=options),
        id=new_id("bench-overhead-agent"),
        task_queue=task_queue,
    )
    result = await handle.result()
    if result.finish_reason != "max_rounds":
        raise RuntimeError(f"agent run ended {result.finish_reason}: {result.error}")
    return round_times(await handle.fetch_history(), names.ACTIVITY_CALL_LLM)


async def bare_round_times(b: Bench, task_queue: str, rounds: int) -> list[float]:
    handle = await b.client.start_workflow(
        BareWorkflow.run,
        BareInput(rounds=rounds),
        id=new_id("bench-overhead-bare"),
        task_queue=task_queue,
    )
    await handle.result()
    return round_times(await handle.fetch_history(), ACTIVITY_STEP_A)


async def reference_run(
    b: Bench, task_queue: str, rounds: int, server: FakeLlmServer, record: Path
) -> None:
    """One agent run (it also warms the worker up): the bodies of its model requests, as the
    server received them, are what the floor sends, round by round. Then one floor run, whose
    requests must be the agent's (head and body, round by round)."""
    before = server.requests
    await agent_round_times(b, task_queue, rounds)
    if server.requests - before != rounds:
        raise RuntimeError(f"the reference run made {server.requests - before} model requests")
    agent = server.recent(rounds)
    save_record(record, [r["body"] for r in agent])
    await bare_round_times(b, task_queue, rounds)
    check_same_requests(agent, server.recent(rounds))


async def in_process_round_times(floor: FairFloor, rounds: int) -> list[float]:
    """The floor's two steps called directly in a plain loop (no Temporal)."""
    model_call, list_dir = floor.activities()
    times: list[float] = []
    for round_ in range(rounds):
        step = StepInput(workflow_id="local", round=round_)
        start = time.perf_counter()
        await model_call(step)
        await list_dir(step)
        times.append(time.perf_counter() - start)
    return times


async def measure(b: Bench) -> list[Figure]:
    p = b.profile
    task_queue = new_queue("overhead")
    agent: list[float] = []
    bare: list[float] = []
    record = b.workdir / "overhead-record.json"
    workdir = b.workdir / "overhead"
    with FakeLlmServer(mode="instant", content_size=200, tool="list_dir") as server:
        async with (
            FairFloor(server.base_url, API_KEY, bench_workspace(workdir), record) as floor,
            agent_activities(b.client, server.base_url, workdir) as (acts, label, _),
        ):
            async with worker(b.client, task_queue, [*acts, *floor.activities()]):
                # Warm-up (imports, sandbox, pools), and the record the floor sends.
                await reference_run(b, task_queue, p.overhead_rounds, server, record)
                for i in range(p.overhead_pairs):
                    # A, B, A, B … with the order flipped every pair, so drift hits both.
                    if i % 2 == 0:
                        agent += await agent_round_times(b, task_queue, p.overhead_rounds)
                        bare += await bare_round_times(b, task_queue, p.overhead_rounds)
                    else:
                        bare += await bare_round_times(b, task_queue, p.overhead_rounds)
                        agent += await agent_round_times(b, task_queue, p.overhead_rounds)
            in_process = await in_process_round_times(floor, p.overhead_rounds)
    b.details["overhead"] = {
        "activities": label,
        "agent_round_seconds": agent,
        "bare_round_seconds": bare,
        "in_process_round_seconds": in_process,
    }
    agent_ms, bare_ms, local_ms = (1000 * median(x) for x in (agent, bare, in_process))
    note = (
        f"{p.overhead_pairs} interleaved pairs of {p.overhead_rounds}-round runs; {label}; "
        "fake OpenAI server answering at once; tool list_dir; the floor makes the agent's model "
        "request (its headers and body bytes) and list_dir per round with plain httpx, json and "
        "os, no project code; per-round = time between successive call_llm schedulings (server "
        "clock)"
    )
    return [
        Figure(
            key="overhead.per_round",
            label="1. per-round time, agent vs bare",
            value=agent_ms,
            unit="ms",
            floor=bare_ms,
            floor_label="fair floor",
            target_kind="ratio_max",
            target=1.05,
            note=note,
        ),
        Figure(
            key="overhead.in_process",
            label="1. per-round time, agent vs in-process floor",
            value=agent_ms,
            unit="ms",
            floor=local_ms,
            floor_label="floor, no Temporal",
            note=(
                "the fair floor's two steps (the same model request, the same listing; plain"
                " httpx, json and os) called in a plain loop, without Temporal"
            ),
        ),
    ]
