"""The run's ordered event log (the seed's AgentResponseUpdate stream), kept bounded.

Pure: the workflow owns one, queries read it, continue-as-new carries its tail. Sequence numbers
start at 0, have no gaps, and continue across generations.
"""

from __future__ import annotations

import json
from typing import Any

from workflows.model import (
    AgentEvent,
    ApprovalEvent,
    AwaitingApprovalEvent,
    ErrorEvent,
    TextDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
    WarningEvent,
)

EVENT_TEXT_LIMIT = 2_000
"""Text in an event is a preview of at most this many characters; `messages` has the full text."""

CARRIED_EVENTS = 1_000
"""A new generation keeps at least this many of the latest events."""

CARRIED_TEXT_LIMIT = 200
"""When the carried tail is too big, its texts are cut to this, so the hand-over stays small."""

CARRIED_BYTES_BUDGET = 200_000


def preview(text: str, limit: int = EVENT_TEXT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"…[{len(text) - limit} more characters]"


def _shortened(event: AgentEvent, limit: int) -> AgentEvent:
    """The event with every text it carries cut to `limit` characters (a carried copy)."""
    if isinstance(event, TextDeltaEvent):
        return event.model_copy(update={"delta": preview(event.delta, limit)})
    if isinstance(event, ToolResultEvent):
        return event.model_copy(update={"content": preview(event.content, limit)})
    if isinstance(event, WarningEvent | ErrorEvent):
        return event.model_copy(update={"message": preview(event.message, limit)})
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
                "reason": None if event.reason is None else preview(event.reason, limit),
                "approver": None if event.approver is None else preview(event.approver, limit),
            }
        )
    return event


def _short_arguments(arguments: Any, limit: int) -> Any:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return arguments if len(text) <= limit else preview(text, limit)


class EventLog:
    def __init__(self, events: list[AgentEvent] | None = None, next_seq: int = 0) -> None:
        self._events: list[AgentEvent] = list(events or [])
        self._next_seq = next_seq

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def emit(self, event_type: type[Any], round: int, **fields: Any) -> AgentEvent:
        event: AgentEvent = event_type(seq=self._next_seq, round=round, **fields)
        self._next_seq += 1
        self._events.append(event)
        return event

    def after(self, seq: int) -> list[AgentEvent]:
        """The retained events with `seq > after`, in order."""
        if not self._events:
            return []
        first = self._events[0].seq
        return self._events[max(0, seq + 1 - first) :]

    def all(self) -> list[AgentEvent]:
        return list(self._events)

    def carry(self) -> list[AgentEvent]:
        """The tail a new generation keeps: the last CARRIED_EVENTS events, texts cut if needed."""
        tail = self._events[-CARRIED_EVENTS:]
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
