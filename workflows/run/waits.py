"""The run's durable waits: for a person's answers, and for a session's next message.

Each wait holds across continue-as-new (its deadline is carried in the state) and gives way to
a cancel and to continue-as-new; people are told when an approval wait begins, reminded at
half its timeout, and told when its calls expire or are escalated (`workflows.people.expiry`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow

from workflows import bounds
from workflows.context import RunContext
from workflows.gate.approvals import Approvals
from workflows.model import (
    ApprovalWait,
    AwaitingApprovalEvent,
    ReopenRequest,
    SessionWait,
    ToolApprovalResponse,
    ToolCall,
)
from workflows.people.ask_user import QUESTION_TIMED_OUT
from workflows.people.expiry import Expiry, escalation_of, phase_of, timeout_policy
from workflows.people.notifications import Notifier
from workflows.people.questions import Questions
from workflows.run.turns import Turns
from workflows.run.visibility import describe_expired, describe_questions, describe_waiting
from workflows.run.wording import APPROVAL_TIMED_OUT


class Waits:
    def __init__(
        self,
        ctx: RunContext,
        approvals: Approvals,
        questions: Questions,
        notifier: Notifier,
        turns: Turns,
        *,
        handing_over: Callable[[], bool],
    ) -> None:
        self._state = ctx.state
        self._expiry = Expiry(ctx, notifier)
        self._approvals = approvals
        self._questions = questions
        self._notifier = notifier
        self._turns = turns
        self._emit = ctx.emit
        self._set_phase = ctx.set_phase
        self._handing_over = handing_over
        """Whether the run should continue as new now (a wait gives way to it)."""

    async def for_answers(self, pending: list[ToolCall]) -> bool:
        """Wait durably until every pending call and question is answered, or cancel, or the
        timeout (people are told when the wait begins, reminded at half its timeout, and told of
        an escalation). With `on_approval_timeout: expire` the timeout expires the calls and the
        wait goes on, with no timer, until a person acts (`workflows.people.expiry`).

        Returns True when the approval timeout ended the wait (`cancel`, `reject`).
        """
        state = self._state
        waiting = self._approvals.unanswered(pending)
        if state.approval_wait is None:
            if waiting or not self._questions.waiting(pending):
                self._emit(AwaitingApprovalEvent(pending=[bounds.event_call(c) for c in waiting]))
            seconds = state.options.approval_timeout_seconds
            now = workflow.now()
            state.approval_wait = ApprovalWait(
                since=now, deadline=None if seconds is None else now + timedelta(seconds=seconds)
            )
            self._notifier.waiting(waiting)
        self._notifier.questions(self._questions.announce(pending))
        self.show(pending)
        wait = state.approval_wait
        policy = timeout_policy(state.options)
        escalation = escalation_of(state.options, state.setup)
        while True:
            deadline = wait.deadline
            reminder = self._notifier.reminder_due()
            escalate_at = self._expiry.escalation_due(
                self._approvals.unanswered(pending), escalation
            )
            moments = [m for m in (reminder, deadline, escalate_at) if m is not None]
            until = min(moments) if moments else None
            timeout: float | None = None
            if until is not None:
                timeout = max(0.0, (until - workflow.now()).total_seconds())
            summary = "approval timeout"
            if reminder is not None and until == reminder:
                summary = "approval reminder"
            elif escalate_at is not None and until == escalate_at:
                summary = "approval escalation"

            def done() -> bool:
                return (
                    state.cancel is not None
                    or not (self._approvals.unanswered(pending) or self._questions.waiting(pending))
                    or self._handing_over()
                )

            try:
                await workflow.wait_condition(
                    lambda: done() or wait.deadline != deadline,  # noqa: B023 - read at once
                    timeout=timeout,
                    timeout_summary=summary,
                )
            except TimeoutError:
                if reminder is not None and until == reminder:
                    self._notifier.waiting(self._approvals.unanswered(pending), reminder=True)
                if escalation is not None and escalate_at is not None and until == escalate_at:
                    self._expiry.escalate(
                        self._approvals.unanswered(pending),
                        escalation,
                        self._approvals.rule_groups,
                    )
                if deadline is None or until != deadline:
                    continue
                if policy == "expire":
                    self._expiry.expire(self.for_person(pending))
                    self.show(pending)
                    continue
                if policy == "reject":
                    for call in self._approvals.unanswered(pending):
                        self._approvals.answer(
                            ToolApprovalResponse(
                                call_id=call.id, approved=False, reason=APPROVAL_TIMED_OUT
                            ),
                            source="timeout",
                        )
                    self._questions.time_out(pending, QUESTION_TIMED_OUT)
                return True
            if not done():
                continue  # asked again: a new deadline
            return False

    def for_person(self, pending: list[ToolCall]) -> list[ToolCall]:
        """The pending calls a person must still act on: calls to approve, then questions."""
        return self._approvals.unanswered(pending) + self._questions.calls(pending)

    def expired_ids(self, pending: list[ToolCall]) -> list[str]:
        """The `status` query's `expired`: the waiting calls and questions that expired."""
        return [c.id for c in self.for_person(pending) if c.id in self._state.expired]

    def show(self, pending: list[ToolCall]) -> None:
        """The phase and details of a wait: `approval_expired` when everything waiting (calls
        and questions) has expired, else `awaiting_answer` while a question waits that has not,
        else `awaiting_approval`."""
        round_ = self._state.round
        calls = self._approvals.unanswered(pending)
        everything = self.for_person(pending)
        if phase_of(self._state, everything) == "approval_expired":
            self._set_phase("approval_expired", describe_expired(round_, everything))
            return
        questions = self._questions.waiting(pending)
        if any(q.call_id not in self._state.expired for q in questions):
            self._set_phase("awaiting_answer", describe_questions(round_, questions, calls))
            return
        self._set_phase("awaiting_approval", describe_waiting(round_, calls))

    def reopen(self, request: ReopenRequest, pending: list[ToolCall]) -> None:
        """Ask again for an expired call or question (`reopen_approval`, validated): a new
        deadline wakes the wait."""
        call = next(c for c in self.for_person(pending) if c.id == request.call_id)
        question = self._questions.question(call.id)
        self._expiry.reopen(request, call, question)  # the validator checked it waits, expired
        self.show(pending)

    async def for_message(self, wait: SessionWait) -> bool:
        """A session between turns, durably, across continue-as-new (the idle deadline is
        carried). Returns False when the idle timeout ended it; a message starts a new turn."""
        state = self._state
        self._set_phase("waiting_for_message", "waiting for the next message")
        timeout: float | None = None
        if wait.idle_deadline is not None:
            timeout = max(0.0, (wait.idle_deadline - workflow.now()).total_seconds())
        try:
            await workflow.wait_condition(
                lambda: (
                    bool(state.held_messages) or state.cancel is not None or self._handing_over()
                ),
                timeout=timeout,
                timeout_summary="session idle timeout",
            )
        except TimeoutError:
            return False
        if state.held_messages:
            self._turns.start()
        return True
