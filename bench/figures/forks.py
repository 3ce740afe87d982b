"""Figure 17, fork and what-if: how long `starter what-if` takes over many recorded calls, and
how long a fork of a long run takes to reach its first model call.

- What-if: `runs` runs of `rounds` rounds, each reply `calls` calls of `list_dir` that the run's
  own rule allows (so every call has a decision in the audit), recorded on the dev server with
  fake activities; then `starter.what_if_runs.what_if` (what the command and the web page run)
  over all of them, with a proposed enforced rule that sends a tenth of them to a person. The
  floor is reading the same histories without deciding anything (describe and fetch, as many at
  once as what-if fetches): what the replay and the decisions add.
- Fork: one run of `fork_rounds` rounds (one call each, allowed without asking), whose last reply
  asks for `run_command` and waits. It is forked at the round before that reply
  (`starter.fork.fork_run`) twice: while it waits (its record read by replaying its current
  generation), and after it was cancelled (its record read from its result). The time is from
  the fork's start (reading the original included) to the fork's first `call_llm` starting on the
  worker. The floor is a new run started with the same conversation, to its first `call_llm`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.client import Client

from bench.harness import Bench, median, new_id, new_queue, worker
from bench.report import Figure
from starter.fork import fork_run, plan_fork
from starter.run_state import read_run
from starter.what_if import ProposedPolicy
from starter.what_if_runs import FETCHING, what_if
from workflows import names
from workflows.contract.rules import ApprovalPolicy, PolicyRule
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    ChatMessage,
    LlmRequest,
    LlmResponse,
    SummaryRequest,
    SummaryResponse,
    ToolCall,
    ToolRequest,
    ToolSpec,
    WorkerSetup,
)


@dataclass(frozen=True)
class Shape:
    runs: int
    rounds: int
    calls: int
    fork_rounds: int
    repeats: int


SHAPES = {
    "quick": Shape(runs=10, rounds=5, calls=10, fork_rounds=100, repeats=1),
    "full": Shape(runs=100, rounds=10, calls=10, fork_rounds=1_000, repeats=3),
}
WHAT_IF_TARGET_SECONDS = 10.0
FORK_TARGET_SECONDS = 2.0
PATH = {"type": "object", "properties": {"path": {"type": "string"}}}
LIST_DIR = ToolSpec(
    name="list_dir", description="List a folder", parameters=PATH, path_parameters=["path"]
)
RUN_COMMAND = ToolSpec(
    name="run_command",
    description="Run a shell command",
    parameters={"type": "object", "properties": {"command": {"type": "string"}}},
    requires_approval=True,
    safe_to_retry=False,
)
PROPOSED = ProposedPolicy(
    enforced=[PolicyRule(tool="list_dir", when={"path": "d1/*"}, decision="ask")]
)
"""Sends the calls of round 1 (a tenth of the what-if runs' calls) to a person."""


@dataclass
class Fakes:
    """Fake activities: the what-if runs' replies (`calls` list_dir calls a round), the long
    run's (one call a round, then a command that waits), and the time each run's first model
    call started."""

    shape: Shape
    first_call: dict[str, float]
    called: asyncio.Event = field(default_factory=asyncio.Event)

    def activities(self) -> list[Callable[..., Any]]:
        shape, first_call = self.shape, self.first_call

        @activity.defn(name=names.ACTIVITY_WORKER_SETUP)
        async def worker_setup() -> WorkerSetup:
            return WorkerSetup(tools=[LIST_DIR, RUN_COMMAND])

        @activity.defn(name=names.ACTIVITY_CALL_LLM)
        async def call_llm(request: LlmRequest) -> LlmResponse:
            workflow_id = request.workflow_id
            if workflow_id not in first_call:
                first_call[workflow_id] = time.monotonic()
                self.called.set()
            if workflow_id.startswith("bench-whatif-") and request.round < shape.rounds:
                calls = [
                    ToolCall(
                        id=f"c{i}",
                        name="list_dir",
                        arguments=json.dumps({"path": f"d{request.round}/{i}"}),
                    )
                    for i in range(shape.calls)
                ]
                return LlmResponse(message=ChatMessage.assistant("", calls))
            if workflow_id.startswith("bench-forkee-"):
                last = request.round >= shape.fork_rounds - 1
                call = ToolCall(
                    id="c0",
                    name="run_command" if last else "list_dir",
                    arguments=json.dumps(
                        {"command": "ls"} if last else {"path": f"r{request.round}"}
                    ),
                )
                return LlmResponse(message=ChatMessage.assistant("x" * 100, [call]))
            return LlmResponse(message=ChatMessage.assistant("done"))

        @activity.defn(name=names.ACTIVITY_SUMMARIZE)
        async def summarize_conversation(request: SummaryRequest) -> SummaryResponse:
            return SummaryResponse(text="summary")

        @activity.defn(name=names.ACTIVITY_EXECUTE_TOOL)
        async def execute_tool(request: ToolRequest) -> str:
            return "y" * 100

        return [worker_setup, call_llm, summarize_conversation, execute_tool]


async def first_call_after(fakes: Fakes, workflow_id: str, started: float) -> float:
    while workflow_id not in fakes.first_call:
        fakes.called.clear()
        await asyncio.wait_for(fakes.called.wait(), 120)
    return fakes.first_call[workflow_id] - started


async def record_what_if_runs(client: Client, queue: str, shape: Shape) -> list[str]:
    options = AgentRunOptions(
        max_rounds=shape.rounds + 1,
        max_repeats=1_000,
        approval_policy=ApprovalPolicy(rules=[PolicyRule(tool="list_dir", decision="allow")]),
    )
    handles = [
        await client.start_workflow(
            "AgentWorkflow",
            AgentRunInput(messages=[ChatMessage.user("look around")], options=options),
            id=new_id("bench-whatif"),
            task_queue=queue,
        )
        for _ in range(shape.runs)
    ]
    await asyncio.gather(*(handle.result() for handle in handles))
    return [handle.id for handle in handles]


async def fetch_only(client: Client, workflow_ids: list[str]) -> None:
    """The floor: the same histories read, nothing decided."""
    limit = asyncio.Semaphore(FETCHING)

    async def one(workflow_id: str) -> None:
        async with limit:
            handle = client.get_workflow_handle(workflow_id)
            description = await handle.describe()
            await client.get_workflow_handle(workflow_id, run_id=description.run_id).fetch_history()

    await asyncio.gather(*(one(w) for w in workflow_ids))


async def measure_what_if(b: Bench, client: Client, queue: str, shape: Shape) -> list[Figure]:
    ids = await record_what_if_runs(client, queue, shape)
    seconds: list[float] = []
    floors: list[float] = []
    calls = changed = 0
    for _ in range(shape.repeats):
        began = time.perf_counter()
        await fetch_only(client, ids)
        floors.append(time.perf_counter() - began)
        began = time.perf_counter()
        report = await what_if(client, PROPOSED, ids)
        seconds.append(time.perf_counter() - began)
        calls = len(report.calls)
        changed = sum(1 for d in report.calls if d.changed)
        if report.unreadable:
            raise RuntimeError(f"what-if could not read {report.unreadable[:3]}")
    expected = shape.runs * shape.rounds * shape.calls
    if calls != expected:
        raise RuntimeError(f"what-if saw {calls} calls, not {expected}")
    b.details["forks.what_if"] = {
        "runs": shape.runs,
        "rounds": shape.rounds,
        "calls_per_reply": shape.calls,
        "calls": calls,
        "changed": changed,
        "seconds": seconds,
        "fetch_only_seconds": floors,
    }
    return [
        Figure(
            key="forks.what_if_seconds",
            label=f"17. what-if over {calls:,} recorded calls",
            value=median(seconds),
            unit="s",
            floor=median(floors),
            floor_label="fetch only",
            target_kind="value_max" if b.profile.name == "full" else "none",
            target=WHAT_IF_TARGET_SECONDS if b.profile.name == "full" else None,
            note=(
                f"{shape.runs} runs x {shape.rounds} rounds x {shape.calls} calls a reply, each"
                f" allowed by the run's rule; {changed} would now ask; median of"
                f" {shape.repeats}; {1e3 * median(seconds) / calls:.2f} ms a call"
            ),
        )
    ]


async def measure_fork(b: Bench, client: Client, queue: str, fakes: Fakes) -> list[Figure]:
    shape = fakes.shape
    forkee = new_id("bench-forkee")
    options = AgentRunOptions(max_rounds=shape.fork_rounds + 1)
    handle = await client.start_workflow(
        "AgentWorkflow",
        AgentRunInput(messages=[ChatMessage.user("go")], options=options),
        id=forkee,
        task_queue=queue,
    )
    while True:  # until it waits for its command
        state = await handle.query(names.QUERY_STATUS)
        if state.get("phase") == "awaiting_approval":
            break
        await asyncio.sleep(0.5)
    at = shape.fork_rounds - 2

    async def fork_seconds() -> float:
        began = time.monotonic()
        forked = await fork_run(client, forkee, task_queue=queue, round=at, new_id=new_id("f"))
        return await first_call_after(fakes, forked.workflow_id, began)

    async def plain_seconds() -> float:
        record = (await read_run(client, forkee)).messages
        plan = plan_fork(forkee, record, at, None)
        began = time.monotonic()
        plain = new_id("bench-plain")
        await client.start_workflow(
            "AgentWorkflow",
            AgentRunInput(messages=plan.messages, options=AgentRunOptions(max_rounds=2)),
            id=plain,
            task_queue=queue,
        )
        return await first_call_after(fakes, plain, began)

    open_runs = [await fork_seconds() for _ in range(shape.repeats)]
    open_floor = [await plain_seconds() for _ in range(shape.repeats)]
    await handle.signal(names.SIGNAL_CANCEL, {})
    await handle.result()
    closed = [await fork_seconds() for _ in range(shape.repeats)]
    closed_floor = [await plain_seconds() for _ in range(shape.repeats)]
    history = await handle.fetch_history()
    b.details["forks.fork"] = {
        "rounds": shape.fork_rounds,
        "fork_round": at,
        "closed_seconds": closed,
        "open_seconds": open_runs,
        "plain_start_seconds": closed_floor + open_floor,
        "last_generation_events": len(history.events),
    }
    floor = median(closed_floor + open_floor)
    return [
        Figure(
            key="forks.fork_first_call",
            label=f"17. fork of a {shape.fork_rounds:,}-round run to its first model call",
            value=median(closed),
            unit="s",
            floor=floor,
            floor_label="new run, same messages",
            target_kind="value_max" if b.profile.name == "full" else "none",
            target=FORK_TARGET_SECONDS if b.profile.name == "full" else None,
            note=(
                f"the original finished (cancelled while waiting): its record from its result;"
                f" forked at round {at}; median of {shape.repeats}"
            ),
        ),
        Figure(
            key="forks.fork_first_call_open",
            label=f"17. the same, the original still waiting ({shape.fork_rounds:,} rounds)",
            value=median(open_runs),
            unit="s",
            floor=floor,
            floor_label="new run, same messages",
            note=(
                "its record read by replaying its current generation"
                f" ({len(history.events):,} events); median of {shape.repeats}; report only"
            ),
        ),
    ]


async def measure(b: Bench) -> list[Figure]:
    shape = SHAPES.get(b.profile.name, SHAPES["full"])
    queue = new_queue("forks")
    fakes = Fakes(shape, {})
    async with worker(b.client, queue, fakes.activities()):
        figures = await measure_what_if(b, b.client, queue, shape)
        figures += await measure_fork(b, b.client, queue, fakes)
    return figures
