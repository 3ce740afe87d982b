"""Follow a run live through its workflow stream (`temporalio.contrib.workflow_streams`).

The workflow publishes every event it emits on the stream's `events` topic (the same models as
the `events` query), and `call_llm` publishes the model's text as it arrives on `deltas`
(`StreamDelta` batches). `follow` subscribes to both topics in one ordered subscription, by
workflow id, so it follows continue-as-new, and returns the run's finish reason when the
`finished` event arrives:

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

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pydantic import TypeAdapter
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from workflows import names
from workflows.event_log import EVENT_TEXT_LIMIT, preview
from workflows.model import AgentEvent, FinishedEvent, FinishReason, StreamDelta, TextDeltaEvent

TOPICS = [names.STREAM_EVENTS, names.STREAM_DELTAS]
POLL_COOLDOWN = timedelta(milliseconds=50)

_EVENT: TypeAdapter[AgentEvent] = TypeAdapter(AgentEvent)


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


def _decode_event(data: Any) -> AgentEvent:
    return _EVENT.validate_python(data)


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
    poll_cooldown: timedelta = POLL_COOLDOWN,
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
      already delivered (missing tail text is delivered through `on_delta` instead).

    Raises StreamEndedError when the run closed without a `finished` event (terminated, or
    failed). Cancel the awaiting task to stop following early (e.g. a session waiting for
    its next message never sends `finished` until it ends).
    """
    stream = WorkflowStreamClient.create(client, workflow_id)
    text = _Text()
    async for item in stream.subscribe(TOPICS, from_offset, poll_cooldown=poll_cooldown):
        if item.topic == names.STREAM_DELTAS:
            delta = StreamDelta.model_validate(item.data)
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
        elif item.topic == names.STREAM_EVENTS:
            event = _decode_event(item.data)
            if isinstance(event, TextDeltaEvent):
                handled = skip_streamed_text and _complete_streamed_text(event, text, on_delta)
                if not handled and text.parts and text.next_index >= 0 and on_restart:
                    # What was streamed is not this round's text (a failed attempt whose retry
                    # answered too fast to stream): void it before the real text.
                    on_restart(event.round)
                text.clear()
                if not handled:
                    on_event(event)
            else:
                on_event(event)
            if isinstance(event, FinishedEvent):
                if on_offset is not None:
                    on_offset(item.offset + 1)
                return event.finish_reason
        if on_offset is not None:
            on_offset(item.offset + 1)
    raise StreamEndedError(f"the stream of {workflow_id} ended without a 'finished' event")


def _complete_streamed_text(
    event: TextDeltaEvent, text: _Text, on_delta: Callable[[int, str], None]
) -> bool:
    """True when the deltas delivered this event's text (the missing tail is sent now)."""
    streamed = "".join(text.parts)
    if not streamed or text.next_index < 0:
        return False  # nothing streamed, or joined mid-text (resumed, or a batch was lost)
    if preview(streamed) == event.delta:
        return True
    if len(event.delta) <= EVENT_TEXT_LIMIT and event.delta.startswith(streamed):
        # The last batches were lost (a failed publish): deliver the rest of the text.
        on_delta(event.round, event.delta[len(streamed) :])
        return True
    return False
