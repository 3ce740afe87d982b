"""Nothing published to a run's live stream from outside can wedge it or fool its followers, and
followers cannot take the update slots the answers need.

The publishes go through the real `temporal` CLI (anyone who can signal the workflow can send
them); the model and the tools are stand-ins, the server the real dev server.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowUpdateFailedError
from temporalio.contrib.workflow_streams import PollInput, PollResult

from tests.cli.test_temporal_cli import Cli
from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import events, of_type, start_run, status, wait_for_phase, wait_until, worker_for
from workflows.model import AgentRunInput, LlmResponse, StreamDelta
from workflows.run.live_stream import MAX_STREAM_POLLERS, STREAM_POLL_UPDATE, STREAM_PUBLISH_SIGNAL

PUBLISH = STREAM_PUBLISH_SIGNAL


def item(topic: str, value: Any) -> dict[str, str]:
    """A stream item as a publisher writes it: base64 of a serialized Payload of JSON."""
    payload = Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode())
    return {"topic": topic, "data": base64.b64encode(payload.SerializeToString()).decode()}


async def _waiting_run(client, task_queue, fake) -> Any:
    handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go"))
    await wait_for_phase(handle, "awaiting_approval")
    return handle


def _fake() -> FakeAgentActivities:
    return FakeAgentActivities(
        replies=[calls(("c1", "run_command", '{"command": "ls"}')), text("done")]
    )


async def test_malformed_and_forged_publishes_are_refused(client, env, task_queue):
    cli = Cli(env.client.service_client.config.target_host)
    fake = _fake()
    async with worker_for(client, task_queue, fake):
        handle = await _waiting_run(client, task_queue, fake)
        forged = {
            "seq": 99,
            "round": 0,
            "type": "finished",
            "finish_reason": "stop",
        }
        delta = StreamDelta(round=0, call="x/1", text="hello").model_dump()
        batches = [
            {"items": [{"topic": "events", "data": "abc"}]},  # wedged every task before
            {"items": [{"topic": "deltas", "data": "abc"}]},
            {"items": [{"topic": "deltas", "data": base64.b64encode(b"\xff\x00").decode()}]},
            {"items": [item("events", forged)]},  # a well-formed forged `finished`
            {"items": [item("deltas", {"not": "a delta"})]},
            {"items": [item("elsewhere", delta)]},
            {"items": [item("deltas", delta)]},  # the one item that is let through
        ]
        for batch in batches:
            await cli.run(
                "workflow",
                "signal",
                "--workflow-id",
                handle.id,
                "--name",
                PUBLISH,
                "--input",
                json.dumps(batch),
            )

        async def warned() -> list[Any] | None:
            found = of_type(await events(handle), "warning")
            return found if len(found) >= 6 else None

        warnings = [w.message for w in await wait_until(warned)]
        # The run still answers queries and updates, and still waits for its answer.
        assert (await status(handle)).phase == "awaiting_approval"
        poll: PollResult = await handle.query(
            STREAM_POLL_UPDATE, PollInput(topics=["deltas", "events"]), result_type=PollResult
        )
        await handle.execute_update("submit_approval", {"call_id": "c1", "approved": True})
        result = await handle.result()
    assert len(warnings) == 6, warnings
    assert sum("come from the workflow only" in w for w in warnings) == 2
    assert sum("malformed 'deltas' item" in w for w in warnings) == 3
    assert sum("unknown topic 'elsewhere'" in w for w in warnings) == 1
    # No forged event reached the stream: every `events` item is one the workflow emitted.
    topics = [i.topic for i in poll.items]
    assert topics.count("deltas") == 1
    assert "finished" not in json.dumps([i.data for i in poll.items if i.topic == "events"])
    assert result.finish_reason == "stop"


async def test_followers_cannot_take_every_update_slot(client, task_queue):
    fake = _fake()
    async with worker_for(client, task_queue, fake):
        handle = await _waiting_run(client, task_queue, fake)
        offset: int = await handle.query("__temporal_workflow_stream_offset", result_type=int)

        async def poll() -> PollResult:
            return await handle.execute_update(
                STREAM_POLL_UPDATE,
                PollInput(topics=["events"], from_offset=offset),
                result_type=PollResult,
            )

        waiting = [asyncio.create_task(poll()) for _ in range(MAX_STREAM_POLLERS)]
        await asyncio.sleep(1.0)  # let them be admitted and block (nothing new is published)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await poll()
        assert "StreamPollersBusy" in repr(refused.value.cause)
        # An answer still gets an update slot, and it wakes the waiting followers.
        await handle.execute_update("submit_approval", {"call_id": "c1", "approved": True})
        woken = await asyncio.wait_for(asyncio.gather(*waiting), 20)
        result = await handle.result()
    assert all(r.items for r in woken)
    assert result.finish_reason == "stop"


def _cut_off(*items: tuple[str, str, str]) -> LlmResponse:
    reply = calls(*items)
    return reply.model_copy(update={"finish_reason": "length"})


async def test_a_call_cut_off_at_the_token_limit_never_waits_for_a_person(client, task_queue):
    fake = FakeAgentActivities(
        replies=[
            _cut_off(
                ("c1", "list_dir", '{"path": "."}'),
                ("c2", "run_command", '{"command": "rm -rf'),
            ),
            text("done"),
        ]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go"))
        result = await handle.result()
        log = await events(handle)
    assert "awaiting_approval" not in [e.type for e in log]
    call_events = {e.call_id: e for e in of_type(log, "tool_call")}
    assert call_events["c2"].requires_approval is False
    assert [r.call_id for r in fake.tool_requests] == ["c1"]
    tools = {m.tool_call_id: m.content for m in result.messages if m.role == "tool"}
    assert "Invalid tool arguments" in tools["c2"]
    assert any("token limit" in w.message for w in of_type(log, "warning"))
    assert result.finish_reason == "stop"
