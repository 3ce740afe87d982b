"""Figure 12, what a compaction costs: AgentWorkflow with the real activities (`call_llm` reading
the model's view, `summarize_conversation` asking the model for the summary) against an instant
fake model server, the model's window made small (`options.context_tokens`) so that the view is
compacted after about a dozen rounds. From each run's history (server clock): the median round
time of the 5 rounds before the first compaction and of the 5 after it, the compaction's own
round, and the activities the compaction added (one `summarize_conversation` expected; a
compaction that only drops old tool results adds none)."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from bench.agent_activities import agent_activities
from bench.fake_llm import FakeLlmProcess
from bench.figures.scale import REPEATS
from bench.harness import Bench, median, new_id, new_queue, worker
from bench.report import Figure
from workflows import names
from workflows.model import AgentEvent, AgentRunInput, AgentRunOptions, ChatMessage
from workflows.run.agent import AgentWorkflow

RUNS = {"quick": 1, "full": 3}
ROUNDS = 24
WINDOW = 8_000
"""Tokens: with ~1.3 KB of new content a round (a 1,000-character reply and `list_dir`'s
output), the request passes 80% of this near round 12, and the compacted view (a summary and the
last 3 rounds) has room for more than 5 rounds before the next compaction."""
REPLY_CHARS = 1_000
AROUND = 5


def scheduled(history: WorkflowHistory) -> list[tuple[float, str]]:
    """(server time, activity type) of every activity scheduled, in order."""
    return [
        (
            e.event_time.ToDatetime().timestamp(),
            e.activity_task_scheduled_event_attributes.activity_type.name,
        )
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


def around_first_compaction(history: WorkflowHistory) -> dict[str, Any] | None:
    """Round times before and after the first compaction with AROUND clean rounds on each side,
    and what each round scheduled. None when the run has no such compaction."""
    acts = scheduled(history)
    calls = [t for t, kind in acts if kind == names.ACTIVITY_CALL_LLM]
    rounds = [b - a for a, b in itertools.pairwise(calls)]
    # What each round (call_llm k .. call_llm k+1) scheduled besides its model call.
    extra: list[Counter[str]] = [Counter() for _ in rounds]
    for t, kind in acts:
        if kind == names.ACTIVITY_CALL_LLM:
            continue
        index = sum(1 for c in calls if c <= t) - 1
        if 0 <= index < len(extra):
            extra[index][kind] += 1
    summarised = [i for i, c in enumerate(extra) if c[names.ACTIVITY_SUMMARIZE]]
    for i in summarised:
        clean = all(
            not extra[j][names.ACTIVITY_SUMMARIZE]
            for j in range(i - AROUND, i + AROUND + 1)
            if j != i and 0 <= j < len(extra)
        )
        if clean and i - AROUND >= 0 and i + AROUND < len(rounds):
            return {
                "before": rounds[i - AROUND : i],
                "after": rounds[i + 1 : i + 1 + AROUND],
                "compaction_round": rounds[i],
                "round": i,
                "compaction_round_activities": dict(extra[i]),
                "plain_round_activities": dict(extra[i - 1]),
            }
    return None


async def one_run(b: Bench, task_queue: str) -> dict[str, Any]:
    options = AgentRunOptions(
        max_rounds=ROUNDS, tools=["list_dir"], context_tokens=WINDOW, max_repeats=REPEATS
    )
    handle = await b.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(messages=[ChatMessage.user("list the workspace")], options=options),
        id=new_id("bench-compaction"),
        task_queue=task_queue,
    )
    result = await handle.result()
    if result.finish_reason != "max_rounds":
        raise RuntimeError(f"compaction run ended {result.finish_reason}: {result.error}")
    events: list[AgentEvent] = await handle.query(
        names.QUERY_EVENTS, -1, result_type=list[AgentEvent]
    )
    history = await handle.fetch_history()
    compactions = [e for e in events if e.type == "compaction"]
    summaries = sum(1 for _, kind in scheduled(history) if kind == names.ACTIVITY_SUMMARIZE)
    return {
        "compaction_rounds": [e.round for e in compactions],
        "compactions": len(compactions),
        "with_summary": sum(1 for e in compactions if getattr(e, "summarised_messages", 0)),
        "summarize_activities": summaries,
        "around": around_first_compaction(history),
        "markers": sum(1 for m in result.messages if m.name == "compaction"),
        "messages": len(result.messages),
    }


async def measure(b: Bench) -> list[Figure]:
    count = RUNS.get(b.profile.name, RUNS["full"])
    task_queue = new_queue("compaction")
    runs: list[dict[str, Any]] = []
    with FakeLlmProcess(mode="instant", content_size=REPLY_CHARS) as server:
        async with agent_activities(b.client, server.base_url, b.workdir / "compaction") as (
            acts,
            _,
            __,
        ):
            async with worker(b.client, task_queue, acts):
                for _ in range(count):
                    runs.append(await one_run(b, task_queue))
            stats = server.stats()
    b.details["compaction"] = {"runs": runs, "model_server": stats}
    found = [r["around"] for r in runs if r["around"] is not None]
    if not found:
        raise RuntimeError(f"no run compacted with {AROUND} clean rounds around it: {runs}")
    before = [t for f in found for t in f["before"]]
    after = [t for f in found for t in f["after"]]
    own = [f["compaction_round"] for f in found]
    extra = [
        sum(f["compaction_round_activities"].values()) - sum(f["plain_round_activities"].values())
        for f in found
    ]
    compactions = sum(r["compactions"] for r in runs)
    summaries = sum(r["summarize_activities"] for r in runs)
    with_summary = sum(r["with_summary"] for r in runs)
    note = (
        f"{count} run(s) of {ROUNDS} rounds, context_tokens {WINDOW}, {REPLY_CHARS}-character"
        f" replies, real activities; first compaction at round {found[0]['round'] + 1}; the"
        f" compaction's own round {1000 * median(own):.0f} ms (median); {compactions}"
        f" compaction events ({with_summary} with a summary), {summaries} summarize_conversation"
        f" activities, {stats['summaries']} summary requests at the model server"
    )
    return [
        Figure(
            key="compaction.round_time",
            label="12. round time after vs before a compaction",
            value=1000 * median(after),
            unit="ms",
            floor=1000 * median(before),
            floor_label="5 rounds before",
            target_kind="ratio_max",
            target=1.1,
            note=note,
        ),
        Figure(
            key="compaction.activities",
            label="12. activities a compaction adds",
            value=max(extra),
            unit="activities",
            floor=1.0,
            floor_label="one summary",
            target_kind="value_max",
            target=1.0,
            note=(
                "activities scheduled in the compaction's round beyond a plain round's (its"
                f" model call and tool); per run: {extra}; summarize_conversation activities per"
                f" compaction with a summary: {summaries}/{with_summary}"
            ),
        ),
    ]
