"""Figure 11, long sessions with a payload store (`AGENT_PAYLOAD_STORE=file://…`, a folder of the
bench's work directory): the runs of figure 2 that stop or overrun without a store, again with
one, and a session whose conversation grows to the store's budget (64 MB by default).

Every program of such a deployment has the store in its data converter: here the client that
starts the runs and reads their results, and the worker (in-process, the bench's fakes under the
real activity names; their `worker_setup` says what a worker with a store says: the larger
conversation budget). History bytes are what Temporal keeps (a stored payload is a reference of
a few hundred bytes there); the store's bytes are reported beside them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from bench.figures.history import budget_per_round
from bench.harness import Bench, generations, history_bytes, new_id, new_queue, worker
from bench.report import Figure
from bench.stubs import LIST_DIR, FakeAgent
from runtime.connect import data_converter
from runtime.payload_store import DEFAULT_MAX_CONVERSATION_MB, ENV_STORE, is_reference
from workflows.bounds import json_bytes
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage
from workflows.run.agent import AgentWorkflow

ROUNDS = {"quick": 50, "full": 1000}
"""Rounds of the 500 B and 5 KB runs."""
BIG = {"quick": (10, 8), "full": (120, DEFAULT_MAX_CONVERSATION_MB)}
"""The big session: rounds, and the conversation budget in MB (AGENT_MAX_CONVERSATION_MB); at
~516 KB a round, 120 rounds bring the conversation to ~62 MB of the 64."""
BIG_REPLY = 500_000
"""Characters of each model reply in the big session (stored: over the 256 KiB threshold)."""
BIG_TOOL = 16_000
"""Characters of each tool result (the most a tool message carries)."""
BIG_WINDOW = 100_000_000
"""The big session's model window in tokens: large enough that the subject is the store, not
compaction (figure 12 measures that)."""
BIG_EVENTS = 300
"""`max_history_events` of the big session: it continues as new every ~40 rounds, so the
hand-over of a conversation of tens of MB is measured too."""


def stored_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def handover_bytes(events: list[HistoryEvent]) -> int:
    """Bytes of the continue-as-new command's input in a generation (0 when it has none)."""
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            attrs = event.workflow_execution_continued_as_new_event_attributes
            return sum(len(p.SerializeToString()) for p in attrs.input.payloads)
    return 0


def stored_payloads(events: list[HistoryEvent]) -> int:
    """Payloads of the history's events that are references to the store."""
    count = 0
    for event in events:
        for attrs in (
            event.workflow_execution_started_event_attributes.input,
            event.activity_task_completed_event_attributes.result,
            event.workflow_execution_completed_event_attributes.result,
            event.workflow_execution_continued_as_new_event_attributes.input,
        ):
            count += sum(1 for p in attrs.payloads if is_reference(p))
    return count


async def store_client(b: Bench, folder: Path) -> Client:
    """A client of the bench's server whose data converter has a file store at `folder`."""
    return await Client.connect(
        b.target_host, data_converter=data_converter({ENV_STORE: folder.as_uri()})
    )


async def session(
    b: Bench, name: str, fake: FakeAgent, rounds: int, options: AgentRunOptions
) -> dict[str, Any]:
    """One run with a file store of its own: what it did, in history and in the store."""
    folder = b.workdir / f"store-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    client = await store_client(b, folder)
    task_queue = new_queue(f"sessions-{name}")
    started = time.monotonic()
    async with worker(client, task_queue, fake.activities()):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(messages=[ChatMessage.user("list the workspace")], options=options),
            id=new_id(f"bench-sessions-{name}"),
            task_queue=task_queue,
        )
        result = await handle.result()
    seconds = time.monotonic() - started
    assert handle.first_execution_run_id is not None
    gens = await generations(b.client, handle.id, handle.first_execution_run_id)
    sizes = [history_bytes(g.events) for g in gens]
    return {
        "rounds_asked": rounds,
        "rounds_done": result.rounds,
        "finish_reason": result.finish_reason,
        "error": result.error,
        "seconds": round(seconds, 1),
        "generations": len(gens),
        "events": sum(len(g.events) for g in gens),
        "bytes": sum(sizes),
        "generation_bytes": sizes,
        "handover_bytes": [handover_bytes(list(g.events)) for g in gens[:-1]],
        "stored_references": sum(stored_payloads(list(g.events)) for g in gens),
        "store_bytes": sum(p.stat().st_size for p in stored_files(folder)),
        "store_files": len(stored_files(folder)),
        "conversation_bytes": sum(json_bytes(m) for m in result.messages),
        "messages": len(result.messages),
    }


def ended(run: dict[str, Any]) -> str:
    text = f"ended {run['finish_reason']} after {run['rounds_done']} rounds"
    if run["error"]:
        text += f" ({run['error'][:90]}…)"
    return text


def store_note(run: dict[str, Any]) -> str:
    handovers = ", ".join(f"{b:,}" for b in run["handover_bytes"]) or "none"
    return (
        f"{run['events']} events, {run['bytes']:,} B of history in {run['generations']}"
        f" generation(s) (continue-as-new inputs: {handovers} B); the store holds"
        f" {run['store_bytes']:,} B in {run['store_files']} payloads; conversation"
        f" {run['conversation_bytes']:,} B; {run['seconds']} s"
        f" ({1000 * run['seconds'] / max(run['rounds_done'], 1):.0f} ms/round); {ended(run)}"
    )


async def measure(b: Bench) -> list[Figure]:
    rounds = ROUNDS.get(b.profile.name, ROUNDS["full"])
    big_rounds, big_mb = BIG.get(b.profile.name, BIG["full"])
    budget = DEFAULT_MAX_CONVERSATION_MB * 1_000_000
    runs: dict[str, dict[str, Any]] = {}
    for size in (500, 5000):
        fake = FakeAgent(
            content_size=size, tool=LIST_DIR, payload_store=True, conversation_bytes=budget
        )
        options = AgentRunOptions(max_rounds=rounds, tools=["list_dir"])
        runs[str(size)] = await session(b, f"{rounds}x{size}", fake, rounds, options)
    big = FakeAgent(
        content_size=BIG_REPLY,
        tool_size=BIG_TOOL,
        tool=LIST_DIR,
        payload_store=True,
        conversation_bytes=big_mb * 1_000_000,
        context_tokens=BIG_WINDOW,
    )
    big_options = AgentRunOptions(
        max_rounds=big_rounds, tools=["list_dir"], max_history_events=BIG_EVENTS
    )
    runs["big"] = await session(b, "big", big, big_rounds, big_options)
    b.details["sessions"] = {"store": "file:// (bench work directory)", "runs": runs}
    small, large, huge = runs["500"], runs["5000"], runs["big"]
    return [
        Figure(
            key="sessions.bytes_per_round.500",
            label=f"11. store: history bytes/round, {rounds} rounds × 500 B",
            value=small["bytes"] / max(small["rounds_done"], 1),
            unit="B",
            floor=budget_per_round(500),
            floor_label="budget",
            target_kind="ratio_max",
            target=1.0,
            note=store_note(small),
        ),
        Figure(
            key="sessions.rounds_completed.5000",
            label=f"11. store: rounds completed of {rounds}, 5000 B",
            value=float(large["rounds_done"]),
            unit="rounds",
            floor=float(rounds),
            floor_label="asked",
            target_kind="ratio_min",
            target=1.0,
            note=store_note(large),
        ),
        Figure(
            key="sessions.bytes_per_round.5000",
            label=f"11. store: history bytes/round, {rounds} rounds × 5000 B",
            value=large["bytes"] / max(large["rounds_done"], 1),
            unit="B",
            floor=budget_per_round(5000),
            floor_label="budget",
            target_kind="ratio_max",
            target=1.0,
        ),
        Figure(
            key="sessions.big_conversation",
            label=f"11. store: a {big_mb} MB session, rounds completed of {big_rounds}",
            value=float(huge["rounds_done"]),
            unit="rounds",
            floor=float(big_rounds),
            floor_label="asked",
            target_kind="ratio_min",
            target=1.0,
            note=(
                f"{BIG_REPLY:,}-character replies and {BIG_TOOL:,}-character tool results,"
                f" AGENT_MAX_CONVERSATION_MB={big_mb}, max_history_events {BIG_EVENTS}; "
                + store_note(huge)
            ),
        ),
    ]
