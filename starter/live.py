"""Follow a run live through its workflow stream (`temporalio.contrib.workflow_streams`).

The workflow publishes every event it emits on the stream's `events` topic (the same models as
the `events` query), and `call_llm` publishes the model's text as it arrives on `deltas`
(`StreamDelta` batches). `follow` reads both topics in one ordered sequence, by workflow id, so
it follows continue-as-new, and returns the run's finish reason when the `finished` event
arrives. The items come over the stream's long-poll update, or its poll query when the run
already serves enough long polls (`starter.stream_transport`); they are handled the same way
whichever carried them. An item that does not decode is skipped, and a `finished` event counts
only when the run's status confirms it (anyone who can signal a run can publish to its stream):

    reason = await follow(
        client, workflow_id,
        on_delta=lambda round, text: print(text, end="", flush=True),
        on_event=render_event,
    )

A client that attaches late (from_offset=0) gets everything the stream still retains (a new
generation keeps a bounded tail); one that reconnects passes the offset it saved through
`on_offset` and continues exactly where it stopped. The `events` query stays the durable record;
this is the live view.

Text arrives twice by design: live as deltas, and once the model call succeeded as the round's
`text_delta` event (the durable record, a preview of at most 2,000 characters). By default
`follow` does not pass on a `text_delta` event whose text the deltas already delivered, so a
caller can print deltas and events without printing the text twice. When a model call is retried
after its stream was cut off, the partial text of the failed attempt is void: `on_restart(round)`
is called before the new attempt's text (a terminal prints a marker, a UI clears the text).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.converter import PayloadConverter
from temporalio.service import RPCError

from starter.handle import AgentHandle
from starter.stream_transport import StreamReader
from workflows import names
from workflows.model import (
    AgentEvent,
    FinishedEvent,
    FinishReason,
    StreamDelta,
    TextDeltaEvent,
)
from workflows.run.event_log import EVENT_TEXT_LIMIT
from workflows.shown import shorten

if TYPE_CHECKING:
    from starter.patience import Patience

log = logging.getLogger(__name__)

TOPICS = [names.STREAM_EVENTS, names.STREAM_DELTAS]
POLL_COOLDOWN = timedelta(milliseconds=50)
STATUS_CHECK_SECONDS = 10.0

_EVENT: TypeAdapter[AgentEvent] = TypeAdapter(AgentEvent)
_FINISHED_CLOSE = {WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.CANCELED}


class StreamEndedError(Exception):
    """The stream ended (the run closed) without a `finished` event, e.g. it was terminated."""


class _Text:
    """The text streamed so far for the latest model call, to match it with its event."""

    def __init__(self) -> None:
        self.call: str | None = None
        self.attempt = 0
        self.parts: list[str] = []
        self.next_index = 0
        """The batch index expected next: text is complete only if no batch was missed."""

    def clear(self) -> None:
        self.parts = []
        self.next_index = 0

    def add(self, index: int, piece: str) -> None:
        self.parts.append(piece)
        self.next_index = index + 1 if index == self.next_index else -1


def decode_item(
    topic: str, wire: Any, converter: PayloadConverter
) -> AgentEvent | StreamDelta | None:
    """One stream item as the model its topic carries, or None (logged) when it is not one:
    anyone who can signal the run can publish to its stream, so a follower never trusts an item
    to be well formed."""
    try:
        payload = Payload()
        payload.ParseFromString(base64.b64decode(wire, validate=True))
        value = converter.from_payload(payload)
        if topic == names.STREAM_DELTAS:
            return StreamDelta.model_validate(value)
        if topic == names.STREAM_EVENTS:
            return _EVENT.validate_python(value)
    except Exception as err:  # bad base64, protobuf's DecodeError, a converter's, pydantic's
        log.debug("skipped a %s item that does not decode: %s", topic, err)
        return None
    log.debug("skipped an item on topic %s", topic)
    return None


async def run_has_finished(client: Client, workflow_id: str) -> bool:
    """Whether the run really finished: a `finished` event on the stream is believed only when
    the run's status (or, with no worker to answer, its execution) says so."""
    handle = AgentHandle(client, workflow_id)
    try:
        status = await handle.status(seconds=STATUS_CHECK_SECONDS)
        if status.phase == "finished":
            return True
    except Exception as err:  # no worker, or a failed query: ask the server instead
        log.debug("status query of %s failed: %s", workflow_id, err)
    try:
        description = await handle.describe()
    except RPCError as err:  # not confirmed now: the stream's end (or its next item) asks again
        log.debug("describing %s failed: %s", workflow_id, err)
        return False
    # A run that finished closes as completed (or cancelled, when Temporal cancelled it); one
    # that was terminated, failed or timed out never sent a `finished` event of its own.
    return description.status in _FINISHED_CLOSE


async def follow(
    client: Client,
    workflow_id: str,
    *,
    on_delta: Callable[[int, str], None],
    on_event: Callable[[AgentEvent], None],
    from_offset: int = 0,
    on_restart: Callable[[int], None] | None = None,
    on_offset: Callable[[int], None] | None = None,
    skip_streamed_text: bool = True,
    on_skip: Callable[[AgentEvent], None] | None = None,
    poll_cooldown: timedelta = POLL_COOLDOWN,
    long_poll: bool = True,
    patience: Patience | None = None,
) -> FinishReason:
    """Follow run `workflow_id` live until its `finished` event; return its finish reason.

    - `on_delta(round, text)`: a piece of the model's text, as it is generated, in order.
    - `on_event(event)`: every event of the run (the `events` query's models), in order.
    - `from_offset`: the stream offset to start at: 0 = everything retained (late attach);
      a value saved from `on_offset` = resume after a disconnect without repeats.
    - `on_restart(round)`: the model call of `round` restarted (a retry after a cut-off
      stream); the text shown for it since its last `text_delta` event is void.
    - `on_offset(next_offset)`: after each item, the offset to resume from.
    - `skip_streamed_text`: do not pass on a `text_delta` event whose text the deltas
      already delivered (missing tail text is delivered through `on_delta` instead);
      `on_skip(event)` is told of each one left out, so a follower counting sequence numbers
      knows it is not missing.
    - `long_poll=False`: read through the stream's poll query only, holding none of the run's
      update slots (the same items, a little later).
    - `patience` (`starter.patience`): a failure that passes is tried again from the same
      offset while the run is open (without it, such a failure is raised).

    Items that do not decode are skipped; a `finished` event is believed only once the run's
    status confirms it. Raises StreamEndedError when the run closed without a `finished` event
    (terminated, or failed). Cancel the awaiting task to stop following early (e.g. a session
    waiting for its next message never sends `finished` until it ends).
    """
    reader = StreamReader(
        client,
        workflow_id,
        TOPICS,
        from_offset,
        cooldown=poll_cooldown,
        long_poll=long_poll,
        patience=patience,
    )
    converter = client.data_converter.payload_converter
    text = _Text()
    unconfirmed: FinishedEvent | None = None
    async for item in reader.items():
        decoded = decode_item(item.topic, item.data, converter)
        if isinstance(decoded, StreamDelta):
            delta = decoded
            if delta.call != text.call:
                text.call, text.attempt = delta.call, delta.attempt
                text.clear()
            elif delta.attempt > text.attempt:
                text.attempt = delta.attempt
                text.clear()
                if on_restart is not None:
                    on_restart(delta.round)
            if delta.attempt == text.attempt:
                text.add(delta.index, delta.text)
                on_delta(delta.round, delta.text)
        elif isinstance(decoded, FinishedEvent):
            if not await run_has_finished(client, workflow_id):
                log.debug("ignored a 'finished' item: run %s still runs", workflow_id)
                unconfirmed = decoded
            else:
                on_event(decoded)
                if on_offset is not None:
                    on_offset(item.offset + 1)
                return decoded.finish_reason
        elif decoded is not None:
            event = decoded
            if isinstance(event, TextDeltaEvent):
                streamed = _is_streamed_text(event, text)
                handled = skip_streamed_text and _complete_streamed_text(event, text, on_delta)
                if not streamed and text.parts and text.next_index >= 0 and on_restart:
                    # What was streamed is not this round's text (a failed attempt whose retry
                    # answered too fast to stream): void it before the real text.
                    on_restart(event.round)
                text.clear()
                if not handled:
                    on_event(event)
                elif on_skip is not None:
                    on_skip(event)
            else:
                on_event(event)
        if on_offset is not None:
            on_offset(item.offset + 1)
    if unconfirmed is not None and await run_has_finished(client, workflow_id):
        # It came before the run had closed, and the status could not confirm it then.
        on_event(unconfirmed)
        return unconfirmed.finish_reason
    raise StreamEndedError(f"the stream of {workflow_id} ended without a 'finished' event")


def _is_streamed_text(event: TextDeltaEvent, text: _Text) -> bool:
    """Whether the deltas streamed so far are this event's text (or its start, when the last
    batches were lost): then nothing was retried, whether or not the event is passed on."""
    streamed = "".join(text.parts)
    if not streamed or text.next_index < 0:
        return False  # nothing streamed, or joined mid-text (resumed, or a batch was lost)
    if shorten(streamed, EVENT_TEXT_LIMIT) == event.delta:
        return True
    return len(event.delta) <= EVENT_TEXT_LIMIT and event.delta.startswith(streamed)


def _complete_streamed_text(
    event: TextDeltaEvent, text: _Text, on_delta: Callable[[int, str], None]
) -> bool:
    """True when the deltas delivered this event's text (the missing tail is sent now)."""
    if not _is_streamed_text(event, text):
        return False
    streamed = "".join(text.parts)
    if shorten(streamed, EVENT_TEXT_LIMIT) != event.delta:
        # The last batches were lost (a failed publish): deliver the rest of the text.
        on_delta(event.round, event.delta[len(streamed) :])
    return True
