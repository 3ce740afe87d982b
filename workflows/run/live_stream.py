"""The run's live stream (`temporalio.contrib.workflow_streams`), guarded.

The workflow publishes every event it emits on the `events` topic; `call_llm` publishes the
model's text on `deltas`. Anyone who can signal the run can publish too, and every live
follower holds one of the run's in-flight updates, so the stream is wrapped:

- a publish from outside keeps only well-formed `deltas` items: the `events` topic is the
  workflow's alone, and an item that does not decode would otherwise fail every workflow task
  (a `warning` says what was dropped);
- at most MAX_STREAM_POLLERS long-poll updates wait at once (Temporal admits 10 in-flight updates
  per run; the rest stay free for answers); a follower refused with `StreamPollersBusy` reads
  the stream through its poll query instead;
- a new generation keeps a bounded tail, cut with the library's own `truncate`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import (
    PollInput,
    PollResult,
    PublishEntry,
    PublishInput,
    WorkflowStream,
    WorkflowStreamState,
)
from temporalio.exceptions import ApplicationError

from workflows import bounds, names
from workflows.intake import UNSEALED, first_line, is_plaintext
from workflows.model import AgentEvent, StreamDelta
from workflows.shown import shorten

STREAM_PUBLISH_SIGNAL = "__temporal_workflow_stream_publish"
STREAM_POLL_UPDATE = "__temporal_workflow_stream_poll"
MAX_STREAM_POLLERS = 5
STREAM_POLLERS_BUSY = "StreamPollersBusy"
MAX_STREAM_ITEM_BYTES = 64_000
"""A stream item published from outside (the model's live text) larger than this is dropped."""
STREAM_CARRIED_ITEMS = 2_000
STREAM_CARRIED_BYTES = 128_000
"""A new generation keeps at most this tail of the live stream (items, encoded bytes)."""


def _pollers_busy() -> ApplicationError:
    return ApplicationError(
        f"{MAX_STREAM_POLLERS} live followers already wait on this run's stream;"
        " read it with the stream's poll query",
        type=STREAM_POLLERS_BUSY,
        non_retryable=True,
    )


class LiveStream:
    def __init__(
        self,
        prior: WorkflowStreamState | None,
        warn: Callable[[str], None],
        *,
        sealed_only: bool = False,
    ) -> None:
        """Construct from the workflow's `__init__` (the stream registers its handlers there).

        The workflow class declares the publish signal too (a publish in a run's first
        activation is decoded before `__init__` runs, and must be decoded for that handler, not
        the dynamic one); the stream insists on registering it itself, so the name is handed to
        it, and then taken back for `on_publish`."""
        self._warn = warn
        self._sealed_only = sealed_only
        self._polls_in_flight = 0
        workflow.set_signal_handler(STREAM_PUBLISH_SIGNAL, None)
        self._stream = WorkflowStream(prior_state=prior)
        self._events = self._stream.topic(names.STREAM_EVENTS)
        workflow.set_update_handler(STREAM_POLL_UPDATE, self._poll, validator=self._validate_poll)
        workflow.set_signal_handler(STREAM_PUBLISH_SIGNAL, self.on_publish)

    def publish(self, event: AgentEvent) -> None:
        self._events.publish(event)

    def on_publish(self, payload: RawValue) -> None:
        """A publish from outside: keep the well-formed `deltas` items, warn about the rest."""
        if self._sealed_only and is_plaintext(payload):
            self._warn(f"stream publish: {UNSEALED}; ignored")
            return
        try:
            batch = workflow.payload_converter().from_payload(payload.payload, PublishInput)
        except Exception as err:  # an undecodable publish is bad input, not a bug
            self._warn(f"stream publish: payload could not be decoded ({first_line(err)}); ignored")
            return
        kept: list[PublishEntry] = []
        for entry in batch.items:
            problem = _problem(entry)
            if problem is None:
                kept.append(entry)
            else:
                self._warn(f"stream publish: {problem}; item dropped")
        self._stream._on_publish(
            PublishInput(items=kept, publisher_id=batch.publisher_id, sequence=batch.sequence)
        )

    async def _poll(self, payload: PollInput) -> PollResult:
        if self._polls_in_flight >= MAX_STREAM_POLLERS:
            raise _pollers_busy()  # several were validated together in one activation
        self._polls_in_flight += 1
        try:
            return await self._stream._on_poll(payload)
        finally:
            self._polls_in_flight -= 1

    def _validate_poll(self, payload: PollInput) -> None:
        self._stream._validate_poll(payload)
        if self._polls_in_flight >= MAX_STREAM_POLLERS:
            raise _pollers_busy()

    async def close(self) -> None:
        """Release the waiting followers (they go on with the next generation, or read the rest
        from the closed run) and wait until no handler is left unfinished."""
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)

    def carried(self) -> WorkflowStreamState:
        """The state for the next generation: a bounded tail, offsets unchanged."""
        state = self._stream.get_state()
        kept, size = 0, 0
        for item in reversed(state.log):
            size += len(item.data) + len(item.topic)
            if kept >= STREAM_CARRIED_ITEMS or size > STREAM_CARRIED_BYTES:
                break
            kept += 1
        dropped = len(state.log) - kept
        if not dropped:
            return state
        self._stream.truncate(state.base_offset + dropped)
        return self._stream.get_state()


def _problem(entry: PublishEntry) -> str | None:
    topic = entry.topic if isinstance(entry.topic, str) else repr(entry.topic)
    if topic == names.STREAM_EVENTS:
        return f"items on '{names.STREAM_EVENTS}' come from the workflow only"
    if topic != names.STREAM_DELTAS:
        return f"unknown topic '{shorten(topic, bounds.ECHO_CHARS)}'"
    if not isinstance(entry.data, str) or len(entry.data) > MAX_STREAM_ITEM_BYTES:
        return f"an item must be an encoded payload of at most {MAX_STREAM_ITEM_BYTES} bytes"
    try:
        item = Payload()
        item.ParseFromString(base64.b64decode(entry.data, validate=True))
        workflow.payload_converter().from_payload(item, StreamDelta)
    except Exception as err:  # malformed: base64, protobuf or the delta's shape
        return f"malformed '{topic}' item ({first_line(err)})"
    return None
