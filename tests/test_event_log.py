"""Unit tests of the bounded event log: gap-free sequence numbers, `after`, the carried tail."""

from __future__ import annotations

from workflows.event_log import (
    CARRIED_BYTES_BUDGET,
    CARRIED_EVENTS,
    CARRIED_TEXT_LIMIT,
    EVENT_TEXT_LIMIT,
    EventLog,
    preview,
)
from workflows.model import (
    FinishedEvent,
    TextDeltaEvent,
    ToolResultEvent,
    WarningEvent,
)


def test_seq_without_gaps_and_rounds():
    log = EventLog()
    for i in range(5):
        log.emit(WarningEvent, round=i // 2, message=f"m{i}")
    log.emit(FinishedEvent, round=2, finish_reason="stop")
    events = log.all()
    assert [e.seq for e in events] == list(range(6))
    assert [e.round for e in events] == [0, 0, 1, 1, 2, 2]
    assert log.next_seq == 6
    assert events[-1].type == "finished"


def test_after():
    log = EventLog()
    for i in range(4):
        log.emit(WarningEvent, round=0, message=str(i))
    assert [e.seq for e in log.after(-1)] == [0, 1, 2, 3]
    assert [e.seq for e in log.after(1)] == [2, 3]
    assert log.after(3) == []
    assert log.after(100) == []
    assert [e.seq for e in log.after(-50)] == [0, 1, 2, 3]
    assert EventLog().after(-1) == []


def test_after_continues_from_carried_tail():
    """A new generation starts with a carried tail whose first seq is not 0."""
    old = EventLog()
    for i in range(1500):
        old.emit(WarningEvent, round=0, message=str(i))
    tail = old.carry()
    assert len(tail) == CARRIED_EVENTS
    assert [e.seq for e in tail] == list(range(500, 1500))
    new = EventLog(tail, old.next_seq)
    event = new.emit(WarningEvent, round=1, message="next")
    assert event.seq == 1500
    assert [e.seq for e in new.after(1497)] == [1498, 1499, 1500]
    # asking for events that were dropped gives the retained ones, in order, without gaps
    retained = new.after(10)
    assert retained[0].seq == 500 and retained[-1].seq == 1500
    assert [e.seq for e in retained] == list(range(500, 1501))


def test_carry_keeps_small_texts_untouched():
    log = EventLog()
    log.emit(TextDeltaEvent, round=0, delta="short")
    log.emit(ToolResultEvent, round=0, call_id="c", name="n", content="y" * 500)
    assert log.carry() == log.all()


def test_carry_shortens_texts_when_over_budget():
    log = EventLog()
    big = "z" * EVENT_TEXT_LIMIT
    count = CARRIED_BYTES_BUDGET // EVENT_TEXT_LIMIT + 50
    for i in range(count):
        if i % 2:
            log.emit(TextDeltaEvent, round=0, delta=big)
        else:
            log.emit(ToolResultEvent, round=0, call_id=f"c{i}", name="n", content=big)
    log.emit(WarningEvent, round=0, message="w" * 300)
    tail = log.carry()
    assert len(tail) == min(CARRIED_EVENTS, count + 1)
    assert [e.seq for e in tail] == [e.seq for e in log.all()[-len(tail) :]]
    size = sum(len(e.model_dump_json().encode()) for e in tail)
    assert size <= CARRIED_BYTES_BUDGET
    for event in tail:
        if isinstance(event, TextDeltaEvent):
            assert event.delta == preview(big, CARRIED_TEXT_LIMIT)
            assert event.delta.startswith("z" * CARRIED_TEXT_LIMIT)
            assert "more characters" in event.delta
        elif isinstance(event, ToolResultEvent):
            assert event.content == preview(big, CARRIED_TEXT_LIMIT)
    # the original log is not changed by carry()
    assert all(len(e.delta) == EVENT_TEXT_LIMIT for e in log.all() if isinstance(e, TextDeltaEvent))


def test_preview():
    assert preview("abc", 5) == "abc"
    assert preview("abcdefgh", 3) == "abc…[5 more characters]"
