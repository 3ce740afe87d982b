"""Figure 18, sub-agents: what a `delegate` call costs against the same work done inline.

- `sub_agents.history_bytes`: the parent's history bytes (every event, as the server keeps it)
  of a run whose one reply asks 10 sub-agents, each answering in one round with S characters,
  against a run whose one reply asks 10 inline tool calls, each returning S characters. What a
  sub-agent adds to its parent: the child's start (its input: the system prompt, the task, the
  options), the child's result (its whole conversation, `AgentRunResult.messages`) and the
  reports it sends (at its end with its audit). Its own conversation is in its own history
  (the note gives their bytes). Report only.
- `sub_agents.delegate_round`: the orchestration cost of one `delegate` (the child's start, its
  one round, its result back in the parent), as the parent's round: from its model call to its
  next model call on the server's clock, against one inline tool call's round measured the same
  way. Interleaved pairs; target ≤ 1.5×.

The model and the tool are in-process fakes registered under the real activity names (the subject
is what the workflow does): the model answers by the run (`inline-…`, `delegate-…`, or a
sub-agent: its id has a `.`), the tool returns S characters.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from bench.harness import Bench, history_bytes, median, new_id, new_queue, round_times, worker
from bench.report import Figure, pair_spread
from bench.stubs import LIST_DIR
from workflows import names
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
    WorkerSetup,
)
from workflows.run.agent import AgentWorkflow

CHILDREN = 10
SIZE = 500
"""Characters of a sub-agent's answer and of an inline tool's output."""


def activities(size: int) -> list[Callable[..., Any]]:
    filler = "x" * size

    @activity.defn(name=names.ACTIVITY_WORKER_SETUP)
    async def worker_setup() -> WorkerSetup:
        return WorkerSetup(tools=[LIST_DIR], context_tokens=128_000)

    @activity.defn(name=names.ACTIVITY_CALL_LLM)
    async def call_llm(request: LlmRequest) -> LlmResponse:
        if "." in request.workflow_id:  # a sub-agent: one round, its answer
            return LlmResponse(message=ChatMessage.assistant(filler))
        if request.round >= 1:
            return LlmResponse(message=ChatMessage.assistant("done"))
        count = int(request.workflow_id.split("-")[1])
        if request.workflow_id.startswith("delegate-"):
            made = [
                ToolCall(id=f"call_{i}", name="delegate", arguments=json.dumps({"task": f"t{i}"}))
                for i in range(count)
            ]
        else:
            made = [
                ToolCall(id=f"call_{i}", name="list_dir", arguments=json.dumps({"path": f"d{i}"}))
                for i in range(count)
            ]
        return LlmResponse(message=ChatMessage.assistant("", made))

    @activity.defn(name=names.ACTIVITY_SUMMARIZE)
    async def summarize_conversation(request: SummaryRequest) -> SummaryResponse:
        return SummaryResponse(text="s")

    @activity.defn(name=names.ACTIVITY_EXECUTE_TOOL)
    async def execute_tool(request: ToolRequest) -> str:
        return filler

    return [worker_setup, call_llm, summarize_conversation, execute_tool]


async def one_run(b: Bench, task_queue: str, kind: str, count: int) -> dict[str, Any]:
    """One parent run of `kind` (`inline` or `delegate`) asking `count` calls in its first reply:
    its round time (server clock), its history bytes and, for sub-agents, theirs."""
    handle = await b.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(
            messages=[ChatMessage.system("Be brief."), ChatMessage.user("look around")],
            options=AgentRunOptions(sub_agents=kind == "delegate"),
        ),
        id=new_id(f"{kind}-{count}"),
        task_queue=task_queue,
    )
    result = await handle.result()
    if result.finish_reason != "stop":
        raise RuntimeError(f"{handle.id} ended {result.finish_reason}: {result.error}")
    history = await handle.fetch_history()
    children = 0
    if kind == "delegate":
        for i in range(count):
            child = await b.client.get_workflow_handle(f"{handle.id}.call_{i}").fetch_history()
            children += history_bytes(child.events)
    [round_seconds] = round_times(history, names.ACTIVITY_CALL_LLM)[:1]
    return {
        "round_seconds": round_seconds,
        "bytes": history_bytes(history.events),
        "events": len(history.events),
        "children_bytes": children,
        "split": split(history) if kind == "delegate" and count == 1 else {},
    }


def split(history: WorkflowHistory) -> dict[str, float]:
    """Where a parent's delegate round went, in ms on the server's clock: `start` from its model
    call's scheduling to the child's start command (the model call and the parent's workflow
    task), `child` from there to the child's completion (its start, its first workflow task with
    the worker's setup, its model call, its end report and completion), `back` from there to the
    parent's next model call."""
    stamps: dict[str, float] = {}
    first_model = None
    for event in history.events:
        at = event.event_time.ToDatetime().timestamp()
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if first_model is None:
                first_model = at
            elif "completed" in stamps and "next" not in stamps:
                stamps["next"] = at
        elif kind == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            stamps.setdefault("initiated", at)
        elif kind == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
            stamps.setdefault("completed", at)
    if first_model is None or len(stamps) < 3:
        return {}
    return {
        "start": 1000 * (stamps["initiated"] - first_model),
        "child": 1000 * (stamps["completed"] - stamps["initiated"]),
        "back": 1000 * (stamps["next"] - stamps["completed"]),
    }


async def measure(b: Bench) -> list[Figure]:
    pairs = 3 if b.profile.name == "quick" else 9
    task_queue = new_queue("sub-agents")
    inline: list[dict[str, Any]] = []
    delegated: list[dict[str, Any]] = []
    async with worker(b.client, task_queue, activities(SIZE)):
        await one_run(b, task_queue, "inline", 1)  # warm-up
        await one_run(b, task_queue, "delegate", 1)
        for i in range(pairs):
            order = ("inline", "delegate") if i % 2 == 0 else ("delegate", "inline")
            for kind in order:
                run = await one_run(b, task_queue, kind, 1)
                (inline if kind == "inline" else delegated).append(run)
        wide_inline = await one_run(b, task_queue, "inline", CHILDREN)
        wide_delegated = await one_run(b, task_queue, "delegate", CHILDREN)
    b.details["sub_agents"] = {
        "inline_rounds": inline,
        "delegate_rounds": delegated,
        "wide_inline": wide_inline,
        "wide_delegated": wide_delegated,
    }
    inline_ms = [1000 * r["round_seconds"] for r in inline]
    delegate_ms = [1000 * r["round_seconds"] for r in delegated]
    per_child = (wide_delegated["bytes"] - wide_inline["bytes"]) / CHILDREN

    def parts(name: str) -> str:
        return f"{median([r['split'][name] for r in delegated if r['split']]):.0f}"

    return [
        Figure(
            key="sub_agents.history_bytes",
            label=f"18. parent history, {CHILDREN} sub-agents vs {CHILDREN} inline calls",
            value=wide_delegated["bytes"] / 1024,
            unit="KiB",
            floor=wide_inline["bytes"] / 1024,
            floor_label="inline",
            note=(
                f"{CHILDREN} sub-agents each answering {SIZE} characters in one round, against"
                f" {CHILDREN} inline tool calls each returning {SIZE}; {wide_delegated['events']}"
                f" against {wide_inline['events']} events; ~{per_child / 1024:.1f} KiB more per"
                f" sub-agent in the parent; the sub-agents' own histories"
                f" {wide_delegated['children_bytes'] / 1024:.0f} KiB in all; report only"
            ),
        ),
        Figure(
            key="sub_agents.delegate_round",
            label="18. a delegate round (child start, one round, result)",
            value=median(delegate_ms),
            unit="ms",
            floor=median(inline_ms),
            floor_label="inline call",
            target_kind="ratio_max",
            target=1.5,
            spread=pair_spread(delegate_ms, inline_ms),
            note=(
                f"{pairs} interleaved pairs; the parent's round from its model call to its next"
                " (server clock), of which (medians) to the child's start command"
                f" {parts('start')} ms, the child from its start to its completion"
                f" {parts('child')} ms, back to the parent's next model call {parts('back')} ms;"
                " fake model and tool in-process"
            ),
        ),
    ]
