"""What people see of a run without reading code: the inbox's search attributes (`AgentStatus`,
`AgentPendingApprovals`, so runs waiting for a person are findable across the cluster) and the
run's current details in the Temporal UI."""

from __future__ import annotations

from temporalio import workflow

from workflows import names
from workflows.bounds import arguments_text
from workflows.model import (
    PERSON_PHASES,
    AgentState,
    AgentStatus,
    ApprovalRecord,
    BudgetStatus,
    FinishReason,
    PendingQuestion,
    Phase,
    Quorum,
    SubAgentStatus,
    ToolCall,
)
from workflows.people.ask_user import Question
from workflows.shown import shorten


class Visibility:
    def __init__(self) -> None:
        self._published: tuple[str, int] | None = None

    def show(self, phase: Phase, details: str, pending: int = 0) -> None:
        """Set the current details, and the search attributes when they changed (an upsert is a
        command in history: only changes are written)."""
        workflow.set_current_details(details)
        if self._published != (phase, pending):
            self._published = (phase, pending)
            workflow.upsert_search_attributes(
                [
                    names.AGENT_STATUS.value_set(phase),
                    names.AGENT_PENDING_APPROVALS.value_set(pending),
                ]
            )


def describe_waiting(round_: int, waiting: list[ToolCall]) -> str:
    lines = [f"round {round_}: awaiting approval of {len(waiting)} call(s)"]
    for call in waiting:
        lines.append(f"- {call.id}: {call.name} {shorten(arguments_text(call.arguments), 200)}")
    return "\n".join(lines)


def describe_questions(round_: int, questions: list[Question], calls: list[ToolCall]) -> str:
    """The details while questions (and maybe calls) wait for a person."""
    lines = [f"round {round_}: awaiting the answer to {len(questions)} question(s)"]
    for question in questions:
        lines.append(f"- {question.call_id}: {shorten(question.question, 200)}")
    if calls:
        lines.append(describe_waiting(round_, calls))
    return "\n".join(lines)


def describe_expired(round_: int, waiting: list[ToolCall]) -> str:
    """The details while every waiting call expired: nobody is being asked until someone asks
    again."""
    lines = [f"round {round_}: {len(waiting)} call(s) expired unanswered (ask again, or reject)"]
    for call in waiting:
        lines.append(f"- {call.id}: {call.name} {shorten(arguments_text(call.arguments), 200)}")
    return "\n".join(lines)


def status_of(
    state: AgentState,
    phase: Phase,
    finish_reason: FinishReason | None,
    *,
    run_id: str,
    waiting: list[ToolCall],
    decided: list[ApprovalRecord],
    expired: list[str],
    questions: list[PendingQuestion],
    quorums: list[Quorum],
    budget: BudgetStatus | None,
    sub_agents: list[SubAgentStatus],
) -> AgentStatus:
    """The `status` query's answer: the phase, what waits for whom, and since when."""
    wait = state.approval_wait if phase in PERSON_PHASES else None
    return AgentStatus(
        phase=phase,
        round=state.round,
        pending_approvals=waiting,
        finish_reason=finish_reason,
        cancel_requested=state.cancel is not None,
        awaiting_since=wait.since if wait is not None else None,
        decided=decided,
        run_id=run_id,
        expired=expired,
        escalations={c.id: state.escalations[c.id] for c in waiting if c.id in state.escalations},
        approval_deadline=wait.deadline if wait is not None else None,
        pending_questions=questions,
        budget=budget,
        quorums=quorums,
        sub_agents=sub_agents,
        parent=state.options.parent,
        forked_from=state.options.forked_from,
    )
