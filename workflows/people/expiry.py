"""Expiry and escalation of the calls that wait for a person.

With `on_approval_timeout: "expire"` (the default) the approval timeout
rejects nothing and cancels nothing: the calls still unanswered become `expired` (an
`approval_expired` event and notification, the phase `approval_expired`), the model is not told,
and the run waits on, with no timer, until a person acts: asks again (`reopen_approval`, a new
deadline), rejects the call, or cancels the run. An expired call is approved only after it was
asked again. A question (`ask_user`) waiting at the deadline expires with the calls, the same way:
it is answered only after it was asked again (`answer_problem`), and asking again tells people
`question_waiting` once more.

With `approval_escalate_after_seconds` and `approval_escalate_to` (the run's, else the worker's
AGENT_ESCALATE_AFTER_SECONDS and AGENT_ESCALATE_TO), the calls still unanswered that long after the
wait began are escalated: an `approval_escalated` event and notification, and the groups are
eligible to answer them too (`gate.quorum.extra_groups`): under no approver rule anyone may answer
anyway, and under a run's own approver rule they vote as its groups do. Under the worker's enforced
approver rule they do not: the worker counts that rule's groups alone as the call runs, so their
vote is refused at once (`gate.quorum.escalated_groups`), and the event and notification name the
rule's groups as the only ones that may answer (`gate.quorum.rule_groups`).

No I/O: the workflow hands in the clock, where events go and who is notified.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from workflows import bounds, metrics
from workflows.context import RunContext
from workflows.gate.audit import record_action
from workflows.model import (
    AgentRunOptions,
    AgentState,
    ApprovalEscalatedEvent,
    ApprovalExpiredEvent,
    ApprovalReopenedEvent,
    ApprovalTimeoutPolicy,
    Phase,
    ReopenRequest,
    ToolCall,
    WorkerSetup,
)
from workflows.people.ask_user import Question
from workflows.people.notifications import Notifier
from workflows.shown import shorten

MAX_ESCALATION_GROUPS = 20
"""At most this many groups a call is escalated to (the hand-over carries them per call)."""
MAX_GROUP_CHARS = 100


def resolve_timeout_policy(options: AgentRunOptions) -> None:
    """Fill in what the timeout does when the run's options do not say (`expire`). Set once, in
    the options the run hands on at continue-as-new."""
    if options.on_approval_timeout is None:
        options.on_approval_timeout = timeout_policy(options)


def timeout_policy(options: AgentRunOptions) -> ApprovalTimeoutPolicy:
    """What the approval timeout does in this run."""
    if options.on_approval_timeout is not None:
        return options.on_approval_timeout
    return "expire"


@dataclass(frozen=True)
class Escalation:
    """After `after_seconds` of waiting, `groups` may answer too."""

    after_seconds: float
    groups: tuple[str, ...]


def escalation_of(options: AgentRunOptions, setup: WorkerSetup | None) -> Escalation | None:
    """The run's escalation (its options, else the worker's defaults), or None."""
    after = options.approval_escalate_after_seconds
    if after is None and setup is not None:
        after = setup.escalate_after_seconds
    groups = options.approval_escalate_to
    if groups is None:
        groups = setup.escalate_to if setup is not None else []
    kept = tuple(dict.fromkeys(g[:MAX_GROUP_CHARS] for g in groups if g))[:MAX_ESCALATION_GROUPS]
    if after is None or not kept:
        return None
    return Escalation(after, kept)


def expired_calls(state: AgentState, waiting: Sequence[ToolCall]) -> list[ToolCall]:
    """The waiting calls that expired."""
    return [c for c in waiting if c.id in state.expired]


def phase_of(state: AgentState, waiting: Sequence[ToolCall]) -> Phase:
    """`approval_expired` while every call waiting has expired (nobody is being asked), else
    `awaiting_approval`."""
    if waiting and all(c.id in state.expired for c in waiting):
        return "approval_expired"
    return "awaiting_approval"


def reopen_problem(
    state: AgentState, waiting: Sequence[ToolCall], call_id: str, *, finished: bool
) -> str | None:
    """Why `reopen_approval` for `call_id` is refused, or None: only a waiting call that
    expired can be asked again."""
    if finished:
        return "the run has finished"
    shown = shorten(call_id, bounds.ECHO_CHARS)
    if call_id in state.answers:
        return f"call '{shown}' was already answered"
    if call_id in state.questions:
        return f"question '{shown}' was already answered"
    if call_id not in {c.id for c in waiting}:
        if not waiting:
            return f"no call is waiting for approval (got '{shown}')"
        known = shorten(", ".join(c.id for c in waiting), 400)
        return f"unknown call id '{shown}' (waiting: {known})"
    if call_id not in state.expired:
        return (
            f"call '{shown}' has not expired: it is waiting for an answer (only an expired"
            " call can be asked again)"
        )
    return None


def answer_problem(state: AgentState, call_id: str) -> str | None:
    """Why an answer to a question is refused because it expired, or None: as an expired call
    is approved only after it was asked again, an expired question is answered only then."""
    if call_id in state.expired:
        shown = shorten(call_id, bounds.ECHO_CHARS)
        return (
            f"question '{shown}' has expired: ask again first (reopen_approval, `Ask again`),"
            " or cancel the run"
        )
    return None


class Expiry:
    """What happens to waiting calls at their deadline, when asked again, and when escalated."""

    def __init__(self, ctx: RunContext, notifier: Notifier) -> None:
        self._state = ctx.state
        self._notifier = notifier
        self._emit = ctx.emit
        self._now = ctx.now

    def expire(self, waiting: Sequence[ToolCall]) -> None:
        """The deadline passed: the unanswered calls expire (nothing is answered), and the wait
        goes on without a deadline."""
        state = self._state
        new = [c for c in waiting if c.id not in state.expired]
        if state.approval_wait is not None:
            state.approval_wait.deadline = None
        if not new:
            return
        at = self._now()
        state.expired.extend(c.id for c in new)
        self._emit(
            ApprovalExpiredEvent(
                call_ids=[c.id for c in new], calls=[bounds.event_call(c) for c in new], at=at
            )
        )
        for call in new:
            record_action(state, call, "expired", at)
        metrics.approvals_expired(len(new))
        self._notifier.expired(new)

    def reopen(
        self, request: ReopenRequest, call: ToolCall, question: Question | None = None
    ) -> datetime | None:
        """Ask again for an expired call (or `question`, the call's when it is `ask_user`): it
        waits with a new deadline (the run's approval timeout from now), and people are told it
        waits (`approval_waiting`, or `question_waiting` for a question)."""
        state = self._state
        at = self._now()
        state.expired.remove(call.id)
        seconds = state.options.approval_timeout_seconds
        deadline = None if seconds is None else at + timedelta(seconds=seconds)
        wait = state.approval_wait
        if wait is not None:
            wait.deadline = deadline
            wait.reminded = True  # asking again is the reminder
        self._emit(
            ApprovalReopenedEvent(
                call_id=call.id, approver=request.approver, deadline=deadline, at=at
            )
        )
        record_action(state, call, "reopened", at, approver=request.approver)
        if question is not None:
            self._notifier.questions([question])
        else:
            self._notifier.waiting([call])
        return deadline

    def escalation_due(
        self, waiting: Sequence[ToolCall], escalation: Escalation | None
    ) -> datetime | None:
        """When the waiting calls not yet escalated are, if any are to be."""
        wait = self._state.approval_wait
        if escalation is None or wait is None:
            return None
        if all(c.id in self._state.escalations for c in waiting):
            return None
        return wait.since + timedelta(seconds=escalation.after_seconds)

    def escalate(
        self,
        waiting: Sequence[ToolCall],
        escalation: Escalation,
        only: Callable[[ToolCall], list[str] | None] = lambda _call: None,
    ) -> None:
        """The calls waited long enough: their escalation groups may answer them too, except a
        call `only` gives groups for (`rule_groups`: the worker's enforced approver rule's,
        the only ones that may answer it), which the event and notification say."""
        state = self._state
        new = [c for c in waiting if c.id not in state.escalations]
        if not new:
            return
        at = self._now()
        groups = list(escalation.groups)
        held = {c.id: found for c in new if (found := only(c)) is not None}
        for call in new:
            state.escalations[call.id] = groups
            record_action(state, call, "escalated", at, reason=", ".join(groups))
        self._emit(
            ApprovalEscalatedEvent(
                call_ids=[c.id for c in new], groups=groups, at=at, rule_groups=held or None
            )
        )
        self._notifier.escalated(new, groups, held)
