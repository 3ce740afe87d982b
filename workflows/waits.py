"""The run's durable waits: for a person's answers, and for a session's next message.

Each wait holds across continue-as-new (its deadline is carried in the state) and gives way to
a cancel and to continue-as-new; people are told when an approval wait begins, and reminded at
half its timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow

from workflows import bounds
from workflows.approvals import Approvals
from workflows.asking import Questions
from workflows.model import (
    AgentState,
    ApprovalWait,
    AwaitingApprovalEvent,
    BaseEvent,
    Phase,
    SessionWait,
    ToolApprovalResponse,
    ToolCall,
)
from workflows.notices import APPROVAL_TIMED_OUT
from workflows.notifications import Notifier
from workflows.questions import QUESTION_TIMED_OUT
from workflows.turns import Turns
from workflows.visibility import describe_questions, describe_waiting


class Waits:
    def __init__(
        self,
        state: AgentState,
        approvals: Approvals,
        notifier: Notifier,
        turns: Turns,
        *,
        questions: Questions,
        emit: Callable[[BaseEvent], None],
        set_phase: Callable[[Phase, str], None],
        handing_over: Callable[[], bool],
    ) -> None:
        self._state = state
        self._approvals = approvals
        self._questions = questions
        self._notifier = notifier
        self._turns = turns
        self._emit = emit
        self._set_phase = set_phase
        self._handing_over = handing_over
        """Whether the run should continue as new now (a wait gives way to it)."""

    async def for_answers(self, pending: list[ToolCall]) -> bool:
        """Wait durably until every pending call and question is answered, or cancel, or the
        timeout (people are told when the wait begins, and reminded at half its timeout).

        Returns True when the approval timeout fired.
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
        while True:
            deadline = state.approval_wait.deadline
            reminder = self._notifier.reminder_due()
            until = reminder or deadline
            timeout: float | None = None
            if until is not None:
                timeout = max(0.0, (until - workflow.now()).total_seconds())
            try:
                await workflow.wait_condition(
                    lambda: (
                        state.cancel is not None
                        or not (
                            self._approvals.unanswered(pending) or self._questions.waiting(pending)
                        )
                        or self._handing_over()
                    ),
                    timeout=timeout,
                    timeout_summary="approval reminder" if reminder else "approval timeout",
                )
                return False
            except TimeoutError:
                if reminder is not None:
                    self._notifier.waiting(self._approvals.unanswered(pending), reminder=True)
                    continue
            if state.options.on_approval_timeout == "reject":
                for call in self._approvals.unanswered(pending):
                    self._approvals.answer(
                        ToolApprovalResponse(
                            call_id=call.id, approved=False, reason=APPROVAL_TIMED_OUT
                        ),
                        source="timeout",
                    )
                self._questions.time_out(pending, QUESTION_TIMED_OUT)
            return True

    def show(self, pending: list[ToolCall]) -> None:
        """The phase and details of a wait: `awaiting_answer` while a question waits."""
        round_ = self._state.round
        questions = self._questions.waiting(pending)
        if questions:
            calls = self._approvals.unanswered(pending)
            self._set_phase("awaiting_answer", describe_questions(round_, questions, calls))
            return
        calls = self._approvals.unanswered(pending)
        self._set_phase("awaiting_approval", describe_waiting(round_, calls))

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
