"""A follower skips stream items it cannot decode and is not fooled by a forged `finished`.

Anyone who can signal a run can publish to its workflow stream. The workflow refuses outside
items on its `events` topic, and the follower does not rely on that: an item that does not decode
(or is not an event / a text delta) is skipped, and a `finished` event ends following only once
the run's own status confirms it. The host here is a small stream workflow that accepts any
publish (as a run of an older worker would), so the follower's own defence is what is tested.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid

import pytest
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamClient
from temporalio.worker import Worker

from starter import live
from tests.helpers import wait_until
from workflows.model import AgentEvent, AgentStatus, FinishedEvent, WarningEvent

CONVERTER = pydantic_data_converter.payload_converter


def wire(payload: Payload) -> str:
    return base64.b64encode(payload.SerializeToString()).decode()


def json_payload(value: object) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode())


FINISHED = {"type": "finished", "seq": 99, "round": 0, "finish_reason": "stop"}
JUNK = [
    Payload(metadata={"encoding": b"binary/unknown"}, data=b"\x00\x01"),
    Payload(metadata={"encoding": b"json/plain"}, data=b"{not json"),
    json_payload({"type": "no_such_event", "seq": 1, "round": 0}),
    json_payload("abc"),
    json_payload({"call": "x"}),  # a delta without its fields
]


def test_items_that_do_not_decode_are_skipped() -> None:
    for topic in ("events", "deltas"):
        assert live.decode_item(topic, "abc", CONVERTER) is None  # not base64
        assert live.decode_item(topic, base64.b64encode(b"\xff\xfe").decode(), CONVERTER) is None
        assert live.decode_item(topic, 12, CONVERTER) is None
        for payload in JUNK:
            assert live.decode_item(topic, wire(payload), CONVERTER) is None
    assert live.decode_item("other", wire(json_payload(FINISHED)), CONVERTER) is None
    event = live.decode_item("events", wire(json_payload(FINISHED)), CONVERTER)
    assert isinstance(event, FinishedEvent) and event.finish_reason == "stop"


@workflow.defn(sandboxed=False)
class LooseStreamWorkflow:
    """Hosts a stream that takes any publish, and a `status` query like the agent's."""

    def __init__(self) -> None:
        self._stream = WorkflowStream()
        self._events = self._stream.topic("events")
        self._finish = False
        self._phase = "running"

    @workflow.run
    async def run(self) -> None:
        self._events.publish(WarningEvent(seq=0, round=0, message="started"))
        await workflow.wait_condition(lambda: self._finish)
        self._events.publish(WarningEvent(seq=1, round=0, message="finishing"))
        self._events.publish(FinishedEvent(seq=2, round=0, finish_reason="stop"))
        self._phase = "finished"
        await asyncio.sleep(0.5)  # the stream's pollers read the tail before the run closes
        self._stream.detach_pollers()

    @workflow.signal
    def finish(self) -> None:
        self._finish = True

    @workflow.query
    def status(self) -> AgentStatus:
        return AgentStatus(phase=self._phase, round=0, pending_approvals=[])


async def test_a_forged_finished_does_not_end_the_follower(client: Client, task_queue: str) -> None:
    seen: list[AgentEvent] = []
    async with Worker(client, task_queue=task_queue, workflows=[LooseStreamWorkflow]):
        handle = await client.start_workflow(
            LooseStreamWorkflow.run, id=f"loose-{uuid.uuid4()}", task_queue=task_queue
        )
        follower = asyncio.create_task(
            live.follow(client, handle.id, on_delta=lambda _r, _t: None, on_event=seen.append)
        )
        publisher = WorkflowStreamClient.create(client, handle.id)
        events, deltas = publisher.topic("events"), publisher.topic("deltas")
        for payload in JUNK:
            events.publish(payload)
            deltas.publish(payload)
        events.publish(json_payload(FINISHED))
        await publisher.flush()

        await wait_until(lambda: any(isinstance(e, WarningEvent) for e in seen))
        await asyncio.sleep(1.5)  # time for the follower to read (and reject) the forged items
        assert not follower.done(), follower
        await handle.signal(LooseStreamWorkflow.finish)
        reason = await asyncio.wait_for(follower, 20)
    assert reason == "stop"
    assert [(e.type, e.seq) for e in seen] == [("warning", 0), ("warning", 1), ("finished", 2)]


async def test_a_forged_finished_does_not_pass_for_a_terminated_run(
    client: Client, task_queue: str
) -> None:
    seen: list[AgentEvent] = []
    async with Worker(client, task_queue=task_queue, workflows=[LooseStreamWorkflow]):
        handle = await client.start_workflow(
            LooseStreamWorkflow.run, id=f"loose-{uuid.uuid4()}", task_queue=task_queue
        )
        follower = asyncio.create_task(
            live.follow(client, handle.id, on_delta=lambda _r, _t: None, on_event=seen.append)
        )
        publisher = WorkflowStreamClient.create(client, handle.id)
        publisher.topic("events").publish(json_payload(FINISHED))
        await publisher.flush()
        await asyncio.sleep(1.5)
        assert not follower.done(), follower
        await handle.terminate("test")
        with pytest.raises(live.StreamEndedError):
            await asyncio.wait_for(follower, 20)
    assert [e.type for e in seen] == ["warning"]
