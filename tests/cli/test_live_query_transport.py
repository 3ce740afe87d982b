"""The stream's poll query carries the same run as its long-poll update: a follower on the query
(as one refused a long poll is) sees the same text pieces, events, order and resume offsets as a
live follower of the same streaming run, attached while it runs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio.client import Client

from starter.live import follow
from tests.fake_openai import FakeOpenAIServer, Slow, tool_calls
from tests.helpers import start_run, wait_until
from tests.workflow import test_streaming
from tests.workflow.test_streaming import LOOKING, TICK, Timeline, worker
from workflows.model import AgentRunInput

# The fixtures of the streaming tests: the fake OpenAI server, an HTTP client, a workspace.
fake, http, workspace = test_streaming.fake, test_streaming.http, test_streaming.workspace


async def follower(client: Client, workflow_id: str, *, long_poll: bool) -> Timeline:
    seen = Timeline()

    def on_delta(round: int, piece: str) -> None:
        seen.first_delta_at.setdefault(round, time.monotonic())
        seen.items.append(("delta", round, piece))

    seen.finish = await asyncio.wait_for(
        follow(
            client,
            workflow_id,
            on_delta=on_delta,
            on_event=lambda e: seen.items.append(("event", e)),
            on_restart=lambda r: seen.items.append(("restart", r)),
            on_offset=seen.offsets.append,
            long_poll=long_poll,
        ),
        60,
    )
    return seen


async def test_the_query_transport_delivers_what_the_live_one_does(
    client: Client, task_queue: str, fake: FakeOpenAIServer, workspace: Any, http: Any
) -> None:
    fake.enqueue(
        tool_calls(("call_1", "list_dir", '{"path": "."}'), content=LOOKING),
        Slow(chunks=30, delay=0.05, piece=TICK),
    )
    async with worker(client, task_queue, fake, workspace, http):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("look"))
        live = asyncio.create_task(follower(client, handle.id, long_poll=True))
        await wait_until(lambda: fake.count("slow_chunks_sent") >= 5)
        polled = asyncio.create_task(follower(client, handle.id, long_poll=False))
        seen, seen_polled = await live, await polled
        chunks_at_end = fake.count("slow_chunks_sent")
    assert seen.finish == seen_polled.finish == "stop"
    assert seen_polled.items == seen.items
    assert seen_polled.offsets == seen.offsets == sorted(set(seen.offsets))
    assert seen_polled.text(1) == TICK * 30
    # It followed the run while it streamed (not only its retained log at the end).
    assert 1 in seen_polled.first_delta_at and chunks_at_end == 30
