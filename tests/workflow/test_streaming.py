"""Live streaming: the workflow's events and the model's text on the run's workflow
stream, followed with `starter.live.follow`, on the real dev server with the real AgentActivities
against the local OpenAI-compatible server (tests/fake_openai.py) streaming slowly."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.streaming import DeltaPublisher
from activities.tools import build_default_registry
from runtime.settings import Settings
from starter.live import follow
from tests.fake_openai import CutOff, FakeOpenAI, FakeOpenAIServer, Slow, text, tool_calls
from tests.helpers import events, messages, start_run, wait_until
from workflows.model import AgentEvent, AgentRunInput, AgentRunOptions, FinishReason
from workflows.run.agent import AgentWorkflow


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def http():
    async with httpx.AsyncClient() as client:
        yield client


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "logs").mkdir(parents=True)
    (ws / "notes.txt").write_text("remember the milk\n")
    return ws


def worker(client, task_queue, fake, workspace, http, **settings: Any) -> Worker:
    values: dict[str, Any] = {
        "llm_base_url": fake.base_url,
        "llm_api_key": "sk-test",
        "llm_model": "fake-model",
        "workspace": workspace,
        "state_dir": workspace.parent / "state",
        "stream_flush_seconds": 0.1,
        **settings,
    }
    config = Settings(**values)
    acts = AgentActivities(client, config, build_default_registry(workspace), http)
    return Worker(client, task_queue=task_queue, workflows=[AgentWorkflow], activities=acts.all())


@dataclass
class Timeline:
    """What a follower saw, in order: ("delta", round, text) and ("event", event)."""

    items: list[tuple[Any, ...]] = field(default_factory=list)
    restarts: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    first_delta_at: dict[int, float] = field(default_factory=dict)
    finish: FinishReason | None = None

    def text(self, round: int) -> str:
        return "".join(i[2] for i in self.items if i[0] == "delta" and i[1] == round)

    def text_after_restart(self, round: int) -> str:
        last = max(
            (n for n, i in enumerate(self.items) if i[0] == "restart" and i[1] == round),
            default=-1,
        )
        return "".join(i[2] for i in self.items[last + 1 :] if i[0] == "delta" and i[1] == round)

    def events(self) -> list[AgentEvent]:
        return [i[1] for i in self.items if i[0] == "event"]

    def position(self, kind: str, round: int) -> int:
        return next(
            n
            for n, i in enumerate(self.items)
            if i[0] == "event" and i[1].type == kind and i[1].round == round
        )

    def last_delta(self, round: int) -> int:
        return max(n for n, i in enumerate(self.items) if i[0] == "delta" and i[1] == round)


async def follower(
    client: Client, workflow_id: str, from_offset: int = 0, record_offsets: bool = False
) -> Timeline:
    seen = Timeline()

    def on_offset(offset: int) -> None:
        seen.offsets.append(offset)
        if record_offsets:
            seen.items.append(("offset", offset))

    def on_delta(round: int, piece: str) -> None:
        seen.first_delta_at.setdefault(round, time.monotonic())
        seen.items.append(("delta", round, piece))

    def on_restart(round: int) -> None:
        seen.restarts.append(round)
        seen.items.append(("restart", round))

    seen.finish = await asyncio.wait_for(
        follow(
            client,
            workflow_id,
            on_delta=on_delta,
            on_event=lambda e: seen.items.append(("event", e)),
            on_restart=on_restart,
            on_offset=on_offset,
            from_offset=from_offset,
        ),
        60,
    )
    return seen


def assert_same_events(seen: list[AgentEvent], durable: list[AgentEvent]) -> None:
    """The live events are the durable ones, except `text_delta` events already streamed."""
    assert seen == [e for e in durable if e.seq in {s.seq for s in seen}]
    missing = [e for e in durable if e.seq not in {s.seq for s in seen}]
    assert all(e.type == "text_delta" for e in missing)


LOOKING = "Let me look at the workspace first. " * 10
TICK = "tick "


async def test_deltas_arrive_live_in_order_before_the_rounds_events(
    client, task_queue, fake: FakeOpenAIServer, workspace, http
):
    fake.enqueue(
        tool_calls(("call_1", "list_dir", '{"path": "."}'), content=LOOKING),
        Slow(chunks=30, delay=0.05, piece=TICK),
    )
    async with worker(client, task_queue, fake, workspace, http):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("look"))
        live = asyncio.create_task(follower(client, handle.id))
        # Attach mid-run: once round 1's slow stream is under way.
        await wait_until(lambda: fake.count("slow_chunks_sent") >= 10)
        chunks_at_mid_attach = fake.count("slow_chunks_sent")
        mid = asyncio.create_task(follower(client, handle.id))
        seen = await live
        seen_mid = await mid
        result = await handle.result()
        durable = await events(handle)
        # A late subscriber, after the run finished, gets everything retained.
        late = await follower(client, handle.id)
    assert result.finish_reason == "stop" == seen.finish == seen_mid.finish == late.finish
    # Round 0's reply came at once (within one flush interval): no live deltas, its text comes
    # with the round's text_delta event, before the tool call.
    assert seen.text(0) == ""
    assert seen.items[seen.position("text_delta", 0)][1].delta.startswith(LOOKING[:100])
    assert seen.position("text_delta", 0) < seen.position("tool_call", 0)
    assert seen.text(1) == TICK * 30
    assert result.messages[-1].content == TICK * 30
    # In order: the streamed text of round 1 before that round's finished event.
    assert seen.last_delta(1) < seen.position("finished", 1)
    # Live: round 1's first text arrived while the model was still generating it, in batches.
    assert len([i for i in seen.items if i[0] == "delta" and i[1] == 1]) > 2
    assert seen.restarts == []
    assert_same_events(seen.events(), durable)
    # The mid-run and late subscribers saw exactly the same.
    for other in (seen_mid, late):
        assert other.items == seen.items
    assert chunks_at_mid_attach < 30
    # Offsets: strictly increasing, a resume point after every item.
    assert seen.offsets == sorted(set(seen.offsets))


async def test_first_text_arrives_before_the_model_finishes(
    client, task_queue, fake: FakeOpenAIServer, workspace, http
):
    fake.enqueue(Slow(chunks=40, delay=0.05, piece=TICK))
    chunks_at_first: list[int] = []
    async with worker(client, task_queue, fake, workspace, http):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("hi"))

        def on_delta(round: int, piece: str) -> None:
            if not chunks_at_first:
                chunks_at_first.append(fake.count("slow_chunks_sent"))

        reason = await asyncio.wait_for(
            follow(client, handle.id, on_delta=on_delta, on_event=lambda e: None), 60
        )
    assert reason == "stop"
    assert chunks_at_first and chunks_at_first[0] < 20, chunks_at_first


async def test_resume_from_a_saved_offset_has_no_repeats_and_no_gaps(
    client, task_queue, fake: FakeOpenAIServer, workspace, http
):
    fake.enqueue(Slow(chunks=20, delay=0.03, piece=TICK))
    async with worker(client, task_queue, fake, workspace, http):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("hi"))
        await handle.result()
        whole = await follower(client, handle.id, record_offsets=True)
        marks = [n for n, i in enumerate(whole.items) if i[0] == "offset"]
        cut = marks[len(marks) // 2]
        resumed = await follower(client, handle.id, from_offset=whole.items[cut][1])

    def without_text_events(items: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        # A client resuming mid-text cannot match the round's text_delta event with the text
        # it streamed, so it receives that event too; everything else is identical.
        return [
            i
            for i in items
            if i[0] != "offset" and not (i[0] == "event" and i[1].type == "text_delta")
        ]

    assert without_text_events(resumed.items) == without_text_events(whole.items[cut + 1 :])
    assert [i for i in resumed.items if i[0] == "delta"]


async def test_streaming_keeps_working_across_continue_as_new(
    client, task_queue, fake: FakeOpenAIServer, workspace, http
):
    rounds = 14
    fake.enqueue(
        *[
            tool_calls((f"c{r}", "list_dir", '{"path": "."}'), content=f"Round {r} looks. " * 5)
            for r in range(rounds)
        ],
        Slow(chunks=20, delay=0.05, piece=TICK),
    )
    options = AgentRunOptions(max_rounds=rounds + 5, max_history_events=100)
    async with worker(client, task_queue, fake, workspace, http):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("look", options))
        seen = await follower(client, handle.id)
        result = await handle.result()
        durable = await events(handle)
        late = await follower(client, handle.id)
        generations = len([w async for w in client.list_workflows(f'WorkflowId="{handle.id}"')])
    assert generations > 1
    assert result.finish_reason == "stop" == seen.finish == late.finish
    for r in range(rounds):
        # Instant replies: the text comes with the round's event, before its tool call.
        assert seen.items[seen.position("text_delta", r)][1].delta == f"Round {r} looks. " * 5
        assert seen.position("text_delta", r) < seen.position("tool_call", r)
    # The slow last reply streamed live in the last generation.
    assert seen.text(rounds) == TICK * 20
    assert seen.last_delta(rounds) < seen.position("finished", rounds)
    # Every event, gap-free, although the run continued as new several times.
    all_events = seen.events()
    assert [e.seq for e in durable] == list(range(len(durable)))
    assert_same_events(all_events, durable)
    # A late subscriber gets the retained tail (here all of it: it is small).
    assert late.items == seen.items


async def test_an_aborted_stream_leaves_no_partial_text_in_the_messages(
    client, task_queue, fake: FakeOpenAIServer, workspace, http
):
    partial = "This partial reply must vanish from the messages"
    fake.enqueue(CutOff(text=partial, after_chunks=6), text("The real answer."))
    async with worker(client, task_queue, fake, workspace, http):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("hello"))
        seen = await follower(client, handle.id)
        result = await handle.result()
        history = await messages(handle)
    assert len(fake.requests) == 2
    assert result.finish_reason == "stop"
    assert [m.content for m in history if m.role == "assistant"] == ["The real answer."]
    assert all("partial" not in m.content and "This" not in m.content for m in history)
    # The cut-off attempt failed within one flush interval: nothing of it was published live
    # either; the live view has the real answer only.
    assert seen.restarts == []
    assert seen.text(0) == ""
    assert [e.delta for e in seen.events() if e.type == "text_delta"] == ["The real answer."]


async def test_a_stream_cut_off_after_going_live_is_voided_for_live_followers(
    client, task_queue, fake: FakeOpenAIServer, workspace, http
):
    partial = "This partial reply must vanish from the messages"
    fake.enqueue(CutOff(text=partial, after_chunks=8, delay=0.1), text("The real answer."))
    async with worker(client, task_queue, fake, workspace, http):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("hello"))
        seen = await follower(client, handle.id)
        result = await handle.result()
    assert [m.content for m in result.messages if m.role == "assistant"] == ["The real answer."]
    # The live view saw part of the failed attempt, then a restart marker: a client voids it.
    assert seen.restarts == [0]
    assert seen.text(0).startswith("This")
    assert partial.startswith(seen.text(0))
    restart_at = seen.items.index(("restart", 0))
    after = [i for i in seen.items[restart_at:] if i[0] == "event" and i[1].type == "text_delta"]
    assert [i[1].delta for i in after] == ["The real answer."]


async def test_streaming_disabled_on_the_worker_still_streams_events(
    client, task_queue, fake: FakeOpenAIServer, workspace, http
):
    fake.enqueue(text("Hello there."))
    async with worker(client, task_queue, fake, workspace, http, stream_deltas=False):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("hello"))
        seen = await follower(client, handle.id)
        durable = await events(handle)
    assert [i for i in seen.items if i[0] == "delta"] == []
    assert seen.events() == durable  # the text arrives as the text_delta event
    assert seen.finish == "stop"


async def test_a_failed_publish_does_not_fail_the_caller(client):
    started = time.monotonic()
    async with DeltaPublisher(
        client, f"no-such-run-{uuid.uuid4()}", round=0, call="x", interval=0.05
    ) as live:
        for _ in range(20):
            live.add("some text ")
            await asyncio.sleep(0.01)
    assert time.monotonic() - started < 10
    assert not live.active  # gave up after repeated failures


async def test_a_reply_faster_than_one_flush_comes_with_its_event_only(
    client, task_queue, fake: FakeOpenAIServer, workspace, http
):
    # The scripted model answers at once: publishing its text live would cost a signal and a
    # workflow task per round for nothing, since the round's text_delta event follows at once.
    async with worker(client, task_queue, fake, workspace, http, llm_base_url=None):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("list"))
        seen = await follower(client, handle.id)
        result = await handle.result()
        log = await events(handle)
    final = result.messages[-1].content
    assert final.startswith("The workspace contains:")
    assert [i for i in seen.items if i[0] == "delta"] == []
    text_events = [e for e in seen.events() if e.type == "text_delta"]
    assert [e.delta for e in text_events] == [final]
    assert not any(e.type == "warning" for e in log)


async def test_a_publish_in_the_first_activation_does_not_wedge_the_run(client, task_queue):
    """A publisher's flush can reach a run before its first workflow task (e.g. a retried flush
    landing on a new generation). With no worker running yet, start + publish arrive in the same
    activation; the run must take the item and finish normally."""
    from temporalio.contrib.workflow_streams import WorkflowStreamClient

    from tests.fakes import FakeAgentActivities
    from tests.fakes import text as fake_text
    from tests.helpers import worker_for
    from workflows import names
    from workflows.model import StreamDelta

    handle = await start_run(client, task_queue, AgentRunInput.from_prompt("hi"))
    stream = WorkflowStreamClient.create(client, handle.id)
    stream.topic(names.STREAM_DELTAS, type=StreamDelta).publish(
        StreamDelta(round=0, call="early/1", attempt=1, index=0, text="early text")
    )
    await stream.flush()
    fake = FakeAgentActivities(replies=[fake_text("hello")])
    async with worker_for(client, task_queue, fake):
        result = await asyncio.wait_for(handle.result(), 30)
        seen = await follower(client, handle.id)
    assert result.finish_reason == "stop"
    assert seen.text(0) == "early text"
