"""The audit: every decision about a call, in order, kept in the run's state (so the whole
chain of continue-as-new is in it) and bounded in bytes, the oldest going first (counted). The
counts by who decided are kept whatever is dropped. Pure; no Temporal import."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from workflows.contract.arguments import arguments_json
from workflows.model import (
    AgentState,
    ApprovalRecord,
    AuditAction,
    AuditEntry,
    AuditView,
    BudgetGrant,
    QuestionRecord,
    ToolCall,
)
from workflows.shown import shorten

AUDIT_BYTES = 200_000
"""The audit takes at most this much of the hand-over at continue-as-new."""
AUDIT_ARGUMENTS_CHARS = 500
"""Arguments in the audit are a preview of at most this many characters (`messages` has them)."""


def audit_arguments(arguments: Any) -> Any:
    text = arguments_json(arguments)
    return arguments if len(text) <= AUDIT_ARGUMENTS_CHARS else shorten(text, 500)


def record_decision(
    state: AgentState, call: ToolCall, record: ApprovalRecord, *, edited: bool
) -> None:
    """Add one decision (`call` with the arguments that run) to the run's audit."""
    entry = AuditEntry(
        call_id=call.id,
        tool=call.name,
        arguments=audit_arguments(call.arguments),
        approved=record.approved,
        source=record.source,
        rule=record.rule,
        approver=record.approver,
        reason=None if record.reason is None else shorten(record.reason, 500),
        at=record.at,
        edited=edited,
        approvers=record.approvers,
        reasons=_reasons(record.reasons),
    )
    counts = state.audit_counts
    if record.source == "person":
        if record.approved:
            counts.approved_by_person += 1
        else:
            counts.rejected_by_person += 1
    elif record.source == "policy":
        counts.by_rule += 1
    elif record.source == "timeout":
        counts.by_timeout += 1
    else:
        counts.seeded += 1
    _keep(state, entry)


def _reasons(reasons: dict[str, str | None] | None) -> dict[str, str | None] | None:
    """Each approver's reason, bounded as a decision's reason is."""
    if reasons is None:
        return None
    return {name: None if r is None else shorten(r, 500) for name, r in reasons.items()}


def record_remembered(
    state: AgentState, call: ToolCall, approver: str | None, reason: str | None, at: datetime
) -> None:
    """Add a call answered with a person's no remembered for the turn (nobody was asked): who
    said it first, and that the answer was remembered."""
    entry = AuditEntry(
        call_id=call.id,
        tool=call.name,
        arguments=audit_arguments(call.arguments),
        approved=False,
        source="person",
        approver=approver,
        reason=None if reason is None else shorten(reason, 500),
        at=at,
        remembered=True,
    )
    state.audit_counts.remembered += 1
    _keep(state, entry)


def record_answer(state: AgentState, call: ToolCall, record: QuestionRecord) -> None:
    """Add a question's answer (`ask_user`) to the run's audit: who answered, when, what."""
    answer = record.answer
    if isinstance(answer, str):
        answer = shorten(answer, 500)
    entry = AuditEntry(
        call_id=call.id,
        tool=call.name,
        arguments=audit_arguments(call.arguments),
        approved=record.answer is not None,
        source=record.source,
        approver=record.approver,
        reason=record.error,
        at=record.at,
        answer=answer,
    )
    if record.source == "person":
        state.audit_counts.questions_answered += 1
    elif record.source == "timeout":
        state.audit_counts.by_timeout += 1
    _keep(state, entry)


GRANT_BUDGET = "grant_budget"
"""What the audit names a grant by, in place of a tool (`call_id`: `budget`)."""


def record_grant(state: AgentState, grant: BudgetGrant, at: datetime) -> None:
    """Add a person's grant (more tokens: `approved`) or stop (not `approved`) to the audit."""
    entry = AuditEntry(
        call_id="budget",
        tool=GRANT_BUDGET,
        arguments={"stop": True} if grant.stop else {"tokens": grant.tokens},
        approved=not grant.stop,
        source="person",
        approver=grant.approver,
        at=at,
    )
    state.audit_counts.tokens_granted += grant.tokens or 0
    _keep(state, entry)


def record_action(
    state: AgentState,
    call: ToolCall,
    action: AuditAction,
    at: datetime,
    *,
    approver: str | None = None,
    reason: str | None = None,
) -> None:
    """Add what happened to a waiting call that is no decision: it `expired`, was `reopened`
    (asked again, by `approver`) or `escalated` (to the groups `reason` names)."""
    entry = AuditEntry(
        call_id=call.id,
        tool=call.name,
        arguments=audit_arguments(call.arguments),
        approved=False,
        source="person" if action == "reopened" else "timeout",
        approver=approver,
        reason=None if reason is None else shorten(reason, 500),
        at=at,
        action=action,
    )
    counts = state.audit_counts
    if action == "expired":
        counts.expired += 1
    elif action == "reopened":
        counts.reopened += 1
    elif action == "escalated":
        counts.escalated += 1
    _keep(state, entry)


def record_sub_agent(state: AgentState, entries: list[AuditEntry], workflow_id: str) -> None:
    """A sub-agent's decisions join its parent's audit, each naming the sub-agent (an entry of
    a sub-agent's own sub-agent keeps the id it has). Counted as the run's own are."""
    for entry in entries:
        named = (
            entry
            if entry.workflow_id is not None
            else entry.model_copy(update={"workflow_id": workflow_id})
        )
        _keep(state, named)


def _keep(state: AgentState, entry: AuditEntry) -> None:
    """The entry joins the audit; the oldest go past its budget (counted)."""
    size = len(entry.model_dump_json())
    state.audit.append(entry)
    state.audit_bytes += size
    while state.audit_bytes > AUDIT_BYTES and len(state.audit) > 1:
        dropped = state.audit.pop(0)
        state.audit_bytes -= len(dropped.model_dump_json())
        state.audit_dropped += 1


def audit_view(state: AgentState) -> AuditView:
    return AuditView(
        decisions=list(state.audit),
        counts=state.audit_counts,
        dropped=state.audit_dropped,
        usage=state.usage,
    )


PROMPT_MEMO_CHARS = 200
"""How much of a run's first user message its memo keeps (the runs page shows less)."""


def prompt_memo(state: AgentState) -> dict[str, Any]:
    """The run's first user message, cut short, for the runs page's prompt column: set once by
    the first generation (continue-as-new keeps the memo). Empty without a user message."""
    first = next((m.content for m in state.messages if m.role == "user" and m.content), None)
    return {"prompt": shorten(first, PROMPT_MEMO_CHARS)} if first else {}


def audit_memo(
    state: AgentState, finish_reason: str, error: str | None = None, run_id: str | None = None
) -> dict[str, Any]:
    """What a finished run leaves in its memo for the runs page (one visibility listing shows
    every row without asking each run): how it ended, and why when it ended with an error.
    `run_id`: the run writing it. A client may start a run with a memo of its own, but cannot
    know the id the server will give that run: the runs page reads only a memo that names the
    very run it is listed with."""
    memo: dict[str, Any] = {
        "finish_reason": finish_reason,
        "decisions": state.audit_counts.model_dump(),
        "tokens": state.usage.model_dump(),
    }
    if error is not None:
        memo["error"] = error
    if run_id is not None:
        memo["run_id"] = run_id
    return {"agent": memo}
