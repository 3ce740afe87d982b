"""Unit tests of the bounded event log: gap-free sequence numbers, `after`, the carried tail."""

from __future__ import annotations

from workflows.model import (
    AgentRunOptions,
    AgentState,
    ApprovalEvent,
    AwaitingApprovalEvent,
    FinishedEvent,
    TextDeltaEvent,
    ToolCall,
    ToolCallEvent,
    ToolResultEvent,
    WarningEvent,
)
from workflows.run.event_log import (
    CARRIED_BYTES_BUDGET,
    CARRIED_EVENTS,
    CARRIED_TEXT_LIMIT,
    EVENT_TEXT_LIMIT,
    EventLog,
)
from workflows.shown import shorten


def new_log() -> tuple[EventLog, AgentState]:
    state = AgentState(messages=[], options=AgentRunOptions())
    return EventLog(state), state


def test_seq_without_gaps_and_rounds():
    log, state = new_log()
    for i in range(5):
        state.round = i // 2
        log.emit(WarningEvent(message=f"m{i}"))
    log.emit(FinishedEvent(finish_reason="stop"))
    events = log.all()
    assert [e.seq for e in events] == list(range(6))
    assert [e.round for e in events] == [0, 0, 1, 1, 2, 2]
    assert log.next_seq == 6 == state.next_seq
    assert events[-1].type == "finished"
    assert state.events == events  # the log is a view over the state


def test_after():
    log, _ = new_log()
    for i in range(4):
        log.emit(WarningEvent(message=str(i)))
    assert [e.seq for e in log.after(-1)] == [0, 1, 2, 3]
    assert [e.seq for e in log.after(1)] == [2, 3]
    assert log.after(3) == []
    assert log.after(100) == []
    assert [e.seq for e in log.after(-50)] == [0, 1, 2, 3]
    assert new_log()[0].after(-1) == []


def test_after_continues_from_carried_tail():
    """A new generation starts with a carried tail whose first seq is not 0."""
    old, old_state = new_log()
    for i in range(1500):
        old.emit(WarningEvent(message=str(i)))
    tail = old.carry()
    assert len(tail) == CARRIED_EVENTS
    assert [e.seq for e in tail] == list(range(500, 1500))
    handed = old_state.model_copy(update={"events": tail, "round": 1})
    new = EventLog(handed)
    event = new.emit(WarningEvent(message="next"))
    assert event.seq == 1500 and event.round == 1
    assert [e.seq for e in new.after(1497)] == [1498, 1499, 1500]
    # asking for events that were dropped gives the retained ones, in order, without gaps
    retained = new.after(10)
    assert retained[0].seq == 500 and retained[-1].seq == 1500
    assert [e.seq for e in retained] == list(range(500, 1501))


def test_carry_keeps_small_texts_untouched():
    log, _ = new_log()
    log.emit(TextDeltaEvent(delta="short"))
    log.emit(ToolResultEvent(call_id="c", name="n", content="y" * 500))
    assert log.carry() == log.all()


def test_carry_shortens_texts_when_over_budget():
    log, _ = new_log()
    big = "z" * EVENT_TEXT_LIMIT
    count = CARRIED_BYTES_BUDGET // EVENT_TEXT_LIMIT + 50
    for i in range(count):
        if i % 2:
            log.emit(TextDeltaEvent(delta=big))
        else:
            log.emit(ToolResultEvent(call_id=f"c{i}", name="n", content=big))
    log.emit(WarningEvent(message="w" * 300))
    tail = log.carry()
    assert len(tail) == min(CARRIED_EVENTS, count + 1)
    assert [e.seq for e in tail] == [e.seq for e in log.all()[-len(tail) :]]
    size = sum(len(e.model_dump_json().encode()) for e in tail)
    assert size <= CARRIED_BYTES_BUDGET
    for event in tail:
        if isinstance(event, TextDeltaEvent):
            assert event.delta == shorten(big, CARRIED_TEXT_LIMIT)
            assert event.delta.startswith("z" * CARRIED_TEXT_LIMIT)
            assert "more characters" in event.delta
        elif isinstance(event, ToolResultEvent):
            assert event.content == shorten(big, CARRIED_TEXT_LIMIT)
    # the original log is not changed by carry()
    assert all(len(e.delta) == EVENT_TEXT_LIMIT for e in log.all() if isinstance(e, TextDeltaEvent))


def test_carry_shortens_every_event_type_and_fits_its_budget():
    """Every carried event type is shortened, and events too big even then are dropped oldest
    first, so the hand-over always fits its payload."""
    log, _ = new_log()
    big = "q" * 5_000
    many = [ToolCall(id=f"c{i}", name="run_command", arguments=big) for i in range(64)]
    for i in range(40):
        log.emit(ToolCallEvent(call_id=f"c{i}", name="n", arguments=big, requires_approval=True))
        log.emit(AwaitingApprovalEvent(pending=many))
        log.emit(
            ApprovalEvent(
                call_id=f"c{i}", approved=False, reason=big, approver=big, at="2026-01-01T00:00:00Z"
            )
        )
    tail = log.carry()
    size = sum(len(e.model_dump_json().encode()) for e in tail)
    assert size <= 2 * CARRIED_BYTES_BUDGET
    assert tail and tail[-1].seq == log.next_seq - 1
    for event in tail:
        text = event.model_dump_json()
        assert big not in text


def test_preview():
    assert shorten("abc", 5) == "abc"
    assert shorten("abcdefgh", 3) == "abc…[5 more characters]"
