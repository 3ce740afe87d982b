"""Unit tests of the hand-over of continue-as-new (no server): who may hand over, and how the
whole hand-over is kept within its budget."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.contrib.workflow_streams import WorkflowStreamState
from temporalio.contrib.workflow_streams._types import PublisherState, _WorkflowStreamWireItem

from runtime.connect import data_converter
from workflows.contract.rules import ApprovalPolicy, PolicyRule
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    AgentState,
    AuditEntry,
    ChatMessage,
    WarningEvent,
)
from workflows.run.handover import (
    carried_once,
    fit_handover,
    handed_over,
    handover,
    handover_bytes,
)

AT = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("continued_run_id", "attempt", "cron", "expected"),
    [
        (None, 1, None, False),  # a plain start
        ("previous", 1, None, True),  # the workflow continued as new
        ("previous", 2, None, False),  # a retried run: the client's input again
        ("previous", 1, "@every 1m", False),  # a cron run: the client's input again
        ("previous", 3, "@every 1m", False),
    ],
)
def test_only_a_continue_as_new_hands_over(continued_run_id, attempt, cron, expected):
    assert handed_over(continued_run_id, attempt, cron) is expected


def rule(i: int) -> PolicyRule:
    return PolicyRule(tool="read_file", when={"path": f"{i}" + "z" * 900}, decision="ask")


def session(
    *, message_chars: int, events: int, audit: int, stream: int, publishers: int = 0
) -> AgentRunInput:
    """A hand-over with `message_chars` of conversation and the given numbers of ~1 KB carried
    events, audit entries and stream items."""
    rules = [rule(i) for i in range(100)]
    state = AgentState(
        messages=[ChatMessage.user("m" * message_chars)],
        options=AgentRunOptions(approval_policy=ApprovalPolicy(rules=rules)),
        run_rules=rules,
        audit=[
            AuditEntry(
                call_id=f"c{i}",
                tool="read_file",
                arguments={"path": "a" * 900},
                approved=False,
                source="policy",
                at=AT,
            )
            for i in range(audit)
        ],
    )
    carried = [WarningEvent(seq=i, message="w" * 900) for i in range(events)]
    log = [_WorkflowStreamWireItem(topic="deltas", data="d" * 900, offset=i) for i in range(stream)]
    owners = {f"p{i}": PublisherState(sequence=i, last_seen=AT) for i in range(publishers)}
    streamed = WorkflowStreamState(log=log, base_offset=10, publishers=owners)
    return handover(state.model_copy(update={"next_seq": events}), carried, streamed)  # type: ignore[arg-type]


def test_the_size_is_what_the_payload_converter_writes():
    handed = session(message_chars=10_000, events=5, audit=5, stream=5, publishers=2)
    [payload] = data_converter().payload_converter.to_payloads([handed])
    assert handover_bytes(handed) == len(payload.data)


def test_the_rules_travel_once_and_unknown_options_stay_behind():
    handed = session(message_chars=10, events=0, audit=0, stream=0)
    assert handed.state is not None
    options = handed.state.options.model_copy(update={"junk": "x" * 100_000})
    handed.state.options = options
    once = carried_once(handed)
    assert once.state is not None
    assert once.state.options.approval_policy is None
    assert once.state.options.model_extra in (None, {})
    assert once.state.run_rules == handed.state.run_rules
    assert handover_bytes(handed) - handover_bytes(once) > 190_000


def test_a_hand_over_within_its_budget_is_left_as_it_is():
    handed = session(message_chars=10_000, events=10, audit=10, stream=10)
    fitted, problem = fit_handover(handed, 1_500_000)
    assert problem is None and fitted == handed


def test_the_stream_goes_first_then_the_events_then_the_audit():
    handed = session(message_chars=1_000_000, events=200, audit=200, stream=100)
    before = handover_bytes(handed)
    budget = before - 150_000  # more than the stream (~100 KB), less than stream and events
    events_before = list(handed.state.events) if handed.state else []
    fitted, problem = fit_handover(handed, budget)
    assert problem is None
    assert handover_bytes(fitted) <= budget
    # The run's own state is not touched (the run goes on with it when it cannot continue).
    assert handed.state is not None and handed.state.events == events_before
    state = fitted.state
    assert state is not None and state.stream is not None
    assert state.stream.log == [] and state.stream.base_offset == 110  # offsets unchanged
    assert 0 < len(state.events) < 200 and state.events[-1].seq == 199  # the newest kept
    assert len(state.audit) == 200 and state.audit_dropped == 0
    assert handed.state is not None and state.messages == handed.state.messages


def test_the_audit_is_cut_last_and_counted():
    handed = session(message_chars=1_000_000, events=100, audit=200, stream=50)
    budget = handover_bytes(handed) - 250_000
    fitted, problem = fit_handover(handed, budget)
    assert problem is None and handover_bytes(fitted) <= budget
    state = fitted.state
    assert state is not None and state.stream is not None
    assert state.events == [] and state.stream.log == []
    assert 0 < len(state.audit) < 200
    assert state.audit_dropped == 200 - len(state.audit)
    assert state.audit[-1].call_id == "c199"
    assert state.audit_bytes == sum(len(e.model_dump_json()) for e in state.audit)


def test_a_hand_over_that_cannot_fit_says_why():
    handed = session(message_chars=1_600_000, events=10, audit=10, stream=10, publishers=3)
    _, problem = fit_handover(handed, 1_500_000)
    assert problem is not None
    assert "cannot continue as new" in problem and "the conversation 16" in problem
    assert "the run's rules" in problem


@settings(max_examples=25, deadline=None)
@given(
    st.integers(min_value=0, max_value=1_400_000),
    st.integers(min_value=0, max_value=300),
    st.integers(min_value=0, max_value=300),
    st.integers(min_value=0, max_value=150),
    st.integers(min_value=0, max_value=50),
)
def test_a_hand_over_fits_or_says_why(message_chars, events, audit, stream, publishers):
    handed = session(
        message_chars=message_chars,
        events=events,
        audit=audit,
        stream=stream,
        publishers=publishers,
    )
    fitted, problem = fit_handover(handed, 1_500_000)
    if problem is None:
        assert handover_bytes(fitted) <= 1_500_000
    else:
        assert handover_bytes(fitted) > 1_500_000
        assert fitted.state is not None and fitted.state.events == []
