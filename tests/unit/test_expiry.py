"""The pure parts of expiry and escalation: which runs expire by default (new runs; a run
recorded by an earlier release keeps `cancel`), the escalation a run gets (its options, else the
worker's), the extra groups of an escalated call, the phase, and the refusals of `reopen_approval`
and of approving an expired call. Plus what the notifications say and the audit table shows."""

from __future__ import annotations

from datetime import UTC, datetime

from activities.notify_message import json_body, slack_text
from starter.audit_table import audit_lines, counts_line
from workflows.gate.quorum import approval_problem, extra_groups
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    AgentState,
    AuditCounts,
    AuditEntry,
    AuditView,
    NotifyRequest,
    ToolApprovalResponse,
    ToolCall,
    WorkerSetup,
)
from workflows.people.expiry import (
    answer_problem,
    escalation_of,
    phase_of,
    reopen_problem,
    resolve_timeout_policy,
    timeout_policy,
)

AT = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
C1 = ToolCall(id="c1", name="delete_path", arguments='{"path": "logs"}')
C2 = ToolCall(id="c2", name="run_command", arguments='{"command": "ls"}')


def state(**fields: object) -> AgentState:
    return AgentState.model_validate({"messages": [], "options": {}, **fields})


def test_an_input_without_the_option_decodes_as_none_and_expires():
    old_input = AgentRunInput.model_validate({"messages": [], "options": {"max_rounds": 3}})
    assert old_input.options.on_approval_timeout is None
    assert timeout_policy(old_input.options) == "expire"


def test_an_explicit_policy_wins():
    for given in ("cancel", "reject", "expire"):
        options = AgentRunOptions(on_approval_timeout=given)
        assert timeout_policy(options) == given


def test_resolving_fills_in_the_options_the_run_hands_on():
    fresh = AgentRunOptions()
    resolve_timeout_policy(fresh)
    assert fresh.on_approval_timeout == "expire"
    assert AgentRunOptions.model_validate(fresh.model_dump()).on_approval_timeout == "expire"


def test_escalation_comes_from_the_run_else_the_worker():
    setup = WorkerSetup(tools=[], escalate_after_seconds=600, escalate_to=["ops"])
    worker = escalation_of(AgentRunOptions(), setup)
    assert worker is not None and (worker.after_seconds, worker.groups) == (600, ("ops",))
    run = AgentRunOptions(approval_escalate_after_seconds=60, approval_escalate_to=["sre", "sre"])
    mine = escalation_of(run, setup)
    assert mine is not None and (mine.after_seconds, mine.groups) == (60, ("sre",))
    assert escalation_of(AgentRunOptions(), WorkerSetup(tools=[])) is None
    no_groups = AgentRunOptions(approval_escalate_to=[])
    assert escalation_of(no_groups, setup) is None


def test_extra_groups_are_those_a_call_was_escalated_to():
    s = state(escalations={"c1": ["ops", "oncall"]})
    assert extra_groups(s, "c1") == ["ops", "oncall"]
    assert extra_groups(s, "c2") == []


def test_the_phase_is_expired_only_when_every_waiting_call_expired():
    s = state(expired=["c1"])
    assert phase_of(s, [C1]) == "approval_expired"
    assert phase_of(s, [C1, C2]) == "awaiting_approval"
    assert phase_of(s, []) == "awaiting_approval"


def test_reopen_refusals():
    s = state(expired=["c1"])
    assert reopen_problem(s, [C1, C2], "c1", finished=False) is None
    assert reopen_problem(s, [C1, C2], "c2", finished=False) == (
        "call 'c2' has not expired: it is waiting for an answer (only an expired call can be"
        " asked again)"
    )
    assert reopen_problem(s, [C1, C2], "c9", finished=False) == (
        "unknown call id 'c9' (waiting: c1, c2)"
    )
    assert reopen_problem(s, [], "c1", finished=False) == (
        "no call is waiting for approval (got 'c1')"
    )
    assert reopen_problem(s, [C1], "c1", finished=True) == "the run has finished"
    answered = state(
        expired=["c1"],
        answers={"c1": {"call_id": "c1", "approved": False, "at": AT.isoformat()}},
    )
    assert reopen_problem(answered, [C2], "c1", finished=False) == "call 'c1' was already answered"


def test_an_expired_call_is_rejected_but_not_approved_without_asking_again():
    s = state(expired=["c1"])
    yes = ToolApprovalResponse(call_id="c1", approved=True)
    no = ToolApprovalResponse(call_id="c1", approved=False, reason="no")
    problem = approval_problem(s, yes)
    assert problem is not None and "ask again first" in problem
    assert approval_problem(s, no) is None
    assert approval_problem(s, ToolApprovalResponse(call_id="c2", approved=True)) is None


def test_an_expired_question_is_answered_only_after_asking_again():
    s = state(expired=["q1"])
    problem = answer_problem(s, "q1")
    assert problem == (
        "question 'q1' has expired: ask again first (reopen_approval, `Ask again`), or cancel"
        " the run"
    )
    assert answer_problem(s, "q2") is None
    asked = ToolCall(id="q1", name="ask_user", arguments='{"question": "Which?"}')
    assert reopen_problem(s, [asked], "q1", finished=False) is None
    answered = state(questions={"q1": {"call_id": "q1", "answer": "tmp", "at": AT.isoformat()}})
    assert (
        reopen_problem(answered, [], "q1", finished=False) == "question 'q1' was already answered"
    )


def request(event: str, **fields: object) -> NotifyRequest:
    values: dict[str, object] = {
        "event": event,
        "workflow_id": "agent-42",
        "run_id": "run-1",
        "call_id": "c1",
        "tool": "delete_path",
        "arguments": '{"path": "logs"}',
        "waiting_since": AT,
        **fields,
    }
    return NotifyRequest.model_validate(values)


def test_notifications_of_expiry_and_escalation():
    expired = json_body(request("approval_expired"), link=None, include_content=False)
    assert expired["event"] == "approval_expired" and expired["call_id"] == "c1"
    assert "groups" not in expired
    escalated = request("approval_escalated", groups=["ops", "oncall"])
    body = json_body(escalated, link=None, include_content=False)
    assert body["event"] == "approval_escalated" and body["groups"] == ["ops", "oncall"]
    line = slack_text(escalated, link=None, include_content=False)
    assert "escalated to `ops`, `oncall`" in line
    assert "expired unanswered" in slack_text(
        request("approval_expired"), link=None, include_content=False
    )


def test_the_audit_table_shows_expiries_and_asking_again():
    entries = [
        AuditEntry(
            call_id="c1", tool="delete_path", approved=False, source="timeout", at=AT,
            action="expired",
        ),
        AuditEntry(
            call_id="c1", tool="delete_path", approved=False, source="person", at=AT,
            approver="ann", action="reopened",
        ),
    ]  # fmt: skip
    view = AuditView(decisions=entries, counts=AuditCounts(expired=1, reopened=1))
    lines = "\n".join(audit_lines("agent-42", view))
    assert "expired" in lines and "asked again  person ann" in lines
    assert counts_line(view).endswith("; expired 1, asked again 1, escalated 0")
    assert "action" not in AuditEntry(
        call_id="c1", tool="t", approved=True, source="person", at=AT
    ).model_dump(mode="json")
