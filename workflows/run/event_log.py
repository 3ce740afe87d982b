"""The run's ordered event log (what clients follow as progress), kept bounded.

Pure: the workflow owns one, queries read it, continue-as-new carries its tail. Sequence numbers
start at 0, have no gaps, and continue across generations.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from workflows.model import (
    AgentEvent,
    AgentState,
    ApprovalEvent,
    AwaitingApprovalEvent,
    BaseEvent,
    ErrorEvent,
    TextDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
    WarningEvent,
)
from workflows.shown import shorten

EVENT_TEXT_LIMIT = 2_000
"""Text in an event is a preview of at most this many characters; `messages` has the full text."""

CARRIED_EVENTS = 1_000
"""A new generation keeps at least this many of the latest events."""

CARRIED_TEXT_LIMIT = 200
"""When the carried tail is too big, its texts are cut to this, so the hand-over stays small."""

CARRIED_BYTES_BUDGET = 200_000


def _shortened(event: AgentEvent, limit: int) -> AgentEvent:
    """The event with every text it carries cut to `limit` characters (a carried copy)."""
    if isinstance(event, TextDeltaEvent):
        return event.model_copy(update={"delta": shorten(event.delta, limit)})
    if isinstance(event, ToolResultEvent):
        return event.model_copy(update={"content": shorten(event.content, limit)})
    if isinstance(event, WarningEvent | ErrorEvent):
        return event.model_copy(update={"message": shorten(event.message, limit)})
    if isinstance(event, ToolCallEvent):
        return event.model_copy(update={"arguments": _short_arguments(event.arguments, limit)})
    if isinstance(event, AwaitingApprovalEvent):
        pending = [
            c.model_copy(update={"arguments": _short_arguments(c.arguments, limit)})
            for c in event.pending
        ]
        return event.model_copy(update={"pending": pending})
    if isinstance(event, ApprovalEvent):
        return event.model_copy(
            update={
                "reason": None if event.reason is None else shorten(event.reason, limit),
                "approver": None if event.approver is None else shorten(event.approver, limit),
            }
        )
    return event


def _short_arguments(arguments: Any, limit: int) -> Any:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return arguments if len(text) <= limit else shorten(text, limit)


E = TypeVar("E", bound=BaseEvent)


class EventLog:
    """The log over a run's state: events go into `state.events`, numbered from `state.next_seq`
    (so continue-as-new hands both over as part of the one state object)."""

    def __init__(self, state: AgentState) -> None:
        self._state = state

    @property
    def next_seq(self) -> int:
        return self._state.next_seq

    def emit(self, event: E) -> E:
        """Number `event` (built without `seq`/`round`), stamp it with the run's round, keep it."""
        numbered = event.model_copy(
            update={"seq": self._state.next_seq, "round": self._state.round}
        )
        self._state.next_seq += 1
        self._state.events.append(numbered)  # type: ignore[arg-type]
        return numbered

    def after(self, seq: int) -> list[AgentEvent]:
        """The retained events with `seq > after`, in order."""
        events = self._state.events
        if not events:
            return []
        first = events[0].seq
        return events[max(0, seq + 1 - first) :]

    def all(self) -> list[AgentEvent]:
        return list(self._state.events)

    def carry(self) -> list[AgentEvent]:
        """The tail a new generation keeps: the last CARRIED_EVENTS events, texts cut if needed."""
        tail = self._state.events[-CARRIED_EVENTS:]
        size = sum(len(event.model_dump_json().encode()) for event in tail)
        if size <= CARRIED_BYTES_BUDGET:
            return tail
        short = [_shortened(event, CARRIED_TEXT_LIMIT) for event in tail]
        # Events that are big even when shortened (e.g. many pending calls each): keep the
        # newest that fit twice the budget, so the hand-over always fits its payload.
        kept: list[AgentEvent] = []
        size = 0
        for event in reversed(short):
            size += len(event.model_dump_json().encode())
            if size > 2 * CARRIED_BYTES_BUDGET:
                break
            kept.append(event)
        return kept[::-1]
