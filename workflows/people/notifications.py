"""People are told when a call waits for them: the one owner of a run's notifications.

When the worker notifies (`WorkerSetup.notify`, its AGENT_NOTIFY_URL), a call that starts waiting
for a person is one `notify` activity (`approval_waiting`, again when a person asks again for
an expired call), and again at half the approval timeout (`approval_reminder`), when its
timeout passes unanswered (`approval_expired`) and when it is escalated (`approval_escalated`);
the loop never waits for them, and a delivery that finally fails is a `warning`. The end of a
run that waited for a person (`run_finished`) goes out through `AgentNotification`, a child
workflow the run leaves behind, so the run closes at once while the delivery is retried for up
to an hour. That child sends only as the child of the run it tells
about: started any other way it fails before sending anything.

A failed delivery is retried with backoff (1 s, doubling, at most 5 minutes apart: after the
first five minutes never more than once a minute); a receiver's `Retry-After` may lengthen a wait,
never shorten it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Literal

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.workflow import ParentClosePolicy

from workflows import activity_calls as calls
from workflows import names
from workflows.context import RunContext
from workflows.contract.rules import Approvers
from workflows.model import FinishReason, NotifyRequest, ToolCall, WhoMay
from workflows.people.ask_user import ASK_USER, Question

NOTIFY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=5),
)
DELIVERY_TIME = timedelta(hours=1)
"""How long a notification is tried for, in all."""
ATTEMPT_TIME = timedelta(seconds=30)
CallEvent = Literal[
    "approval_waiting", "approval_reminder", "approval_expired", "approval_escalated"
]
"""The notifications about one waiting call."""


def start_notify(request: NotifyRequest) -> workflow.ActivityHandle[None]:
    return workflow.start_activity(
        names.ACTIVITY_NOTIFY,
        request,
        start_to_close_timeout=ATTEMPT_TIME,
        schedule_to_close_timeout=DELIVERY_TIME,
        retry_policy=NOTIFY_RETRY,
        summary=f"notify: {request.event} {request.call_id or ''}".rstrip(),
    )


class Notifier:
    def __init__(
        self,
        ctx: RunContext,
        *,
        approvers: Callable[[ToolCall], Approvers | None] = lambda _call: None,
    ) -> None:
        self._state = ctx.state
        self._warn = ctx.warn
        self._approvers = approvers
        """The approver rule's approvers of a call (`Approvals.approvers_for`): who may answer."""
        self._deliveries: set[asyncio.Task[None]] = set()

    @property
    def enabled(self) -> bool:
        setup = self._state.setup
        return setup is not None and setup.notify

    def reminder_due(self) -> datetime | None:
        """When the reminder of the current wait is due (half its timeout), if one is."""
        wait = self._state.approval_wait
        if not self.enabled or wait is None or wait.deadline is None or wait.reminded:
            return None
        return wait.since + (wait.deadline - wait.since) / 2

    def waiting(self, calls_waiting: Sequence[ToolCall], *, reminder: bool = False) -> None:
        """Tell people about each call waiting for them (the loop goes on at once)."""
        wait = self._state.approval_wait
        if reminder and wait is not None and self.enabled:
            wait.reminded = True
        self._tell("approval_reminder" if reminder else "approval_waiting", calls_waiting)

    def expired(self, calls_expired: Sequence[ToolCall]) -> None:
        """Tell people these calls expired unanswered (they wait on until someone acts)."""
        self._tell("approval_expired", calls_expired)

    def escalated(
        self,
        calls_escalated: Sequence[ToolCall],
        groups: Sequence[str],
        rule_groups: Mapping[str, list[str]] | None = None,
    ) -> None:
        """Tell people these calls may now be answered by `groups` too (a call in `rule_groups`
        only by its enforced rule's groups)."""
        self._tell(
            "approval_escalated", calls_escalated, groups=list(groups), rule_groups=rule_groups
        )

    def _tell(
        self,
        event: CallEvent,
        calls_told: Sequence[ToolCall],
        *,
        groups: list[str] | None = None,
        rule_groups: Mapping[str, list[str]] | None = None,
    ) -> None:
        wait = self._state.approval_wait
        if not self.enabled or wait is None:
            return
        self._state.waited_for_person = True
        info = workflow.info()
        for call in calls_told:
            self._deliver(
                NotifyRequest(
                    event=event,
                    workflow_id=info.workflow_id,
                    run_id=info.first_execution_run_id,
                    call_id=call.id,
                    tool=call.name,
                    arguments=call.arguments,
                    waiting_since=wait.since,
                    groups=groups,
                    rule_groups=(rule_groups or {}).get(call.id),
                    who_may=self._who_may(call),
                )
            )

    def _who_may(self, call: ToolCall) -> WhoMay | None:
        """Who may answer a call: its approver rule's groups and count (None: anyone)."""
        needed = self._approvers(call)
        if needed is None:
            return None
        return WhoMay(groups=list(needed.groups), count=needed.count)

    def questions(self, asked: Sequence[Question]) -> None:
        """Tell people about each question that starts waiting for their answer
        (`question_waiting`: the question and its options travel as the call's arguments)."""
        wait = self._state.approval_wait
        if not asked or not self.enabled or wait is None:
            return
        self._state.waited_for_person = True
        info = workflow.info()
        for question in asked:
            shown = question.shown()
            self._deliver(
                NotifyRequest(
                    event="question_waiting",
                    workflow_id=info.workflow_id,
                    run_id=info.first_execution_run_id,
                    call_id=question.call_id,
                    tool=ASK_USER,
                    arguments=shown.model_dump(exclude={"call_id", "arguments_sha256"}),
                    waiting_since=wait.since,
                )
            )

    def budget_exhausted(self, used: int, limit: int) -> None:
        """Tell people the run waits at its token budget for a grant (`budget_exhausted`); its
        end is told too (`run_finished`)."""
        if not self.enabled:
            return
        self._state.waited_for_person = True
        info = workflow.info()
        setup = self._state.setup
        groups = list(setup.budget_groups) if setup is not None else []
        self._deliver(
            NotifyRequest(
                event="budget_exhausted",
                workflow_id=info.workflow_id,
                run_id=info.first_execution_run_id,
                waiting_since=workflow.now(),
                used=used,
                limit=limit,
                who_may=WhoMay(groups=groups) if groups else None,
            )
        )

    def _deliver(self, request: NotifyRequest) -> None:
        parent = self._state.options.parent
        if parent is not None:  # a sub-agent's: name the run that delegated to it, and the call
            update = {"parent_workflow_id": parent.workflow_id, "parent_call_id": parent.call_id}
            request = request.model_copy(update=update)
        task = asyncio.create_task(self._watch(start_notify(request), request))
        self._deliveries.add(task)
        task.add_done_callback(self._deliveries.discard)

    async def _watch(self, handle: workflow.ActivityHandle[None], request: NotifyRequest) -> None:
        try:
            await handle
        except ActivityError as err:
            if calls.is_cancellation(err):
                return
            what = f"{request.event} for call '{request.call_id}'"
            self._warn(f"notification {what} was not delivered: {calls.failure_detail(err)}")

    async def finished(self, reason: FinishReason, error: str | None) -> None:
        """A run that waited for a person tells them how it ended (through a child workflow
        that outlives the run)."""
        if not self.enabled or not self._state.waited_for_person:
            return
        info = workflow.info()
        parent = self._state.options.parent
        request = NotifyRequest(
            event="run_finished",
            workflow_id=info.workflow_id,
            run_id=info.first_execution_run_id,
            finish_reason=reason,
            error=error,
            parent_workflow_id=None if parent is None else parent.workflow_id,
            parent_call_id=None if parent is None else parent.call_id,
        )
        await workflow.start_child_workflow(
            names.NOTIFICATION_WORKFLOW_TYPE,
            request,
            id=child_id(info.workflow_id, info.first_execution_run_id),
            task_queue=info.task_queue,
            parent_close_policy=ParentClosePolicy.ABANDON,
            static_summary=f"tell people how {info.workflow_id} ended: {reason}",
        )


def child_id(workflow_id: str, first_run_id: str) -> str:
    """The id of the `AgentNotification` a run leaves behind."""
    return f"{workflow_id}/notify/{first_run_id}"


def not_from_its_run(request: NotifyRequest) -> str | None:
    """Why this `AgentNotification` must not send, if it must not: it runs only as the child an
    `AgentWorkflow` starts about itself (`finished`). Started any other way (a namespace client
    starting it directly, with text of its own) it would post that text as the worker."""
    info = workflow.info()
    parent = info.parent
    if parent is None:
        return (
            f"{names.NOTIFICATION_WORKFLOW_TYPE} runs only as the child of the run it tells"
            " about; it was started on its own, and sent nothing"
        )
    if (
        request.event != "run_finished"
        or parent.namespace != info.namespace
        or parent.workflow_id != request.workflow_id
        or info.workflow_id != child_id(request.workflow_id, request.run_id)
    ):
        return (
            f"{names.NOTIFICATION_WORKFLOW_TYPE} tells only how the run that started it ended;"
            " this one was asked about another, and sent nothing"
        )
    return None


@workflow.defn(name=names.NOTIFICATION_WORKFLOW_TYPE)
class AgentNotification:
    """One notification that must outlive the run it is about (`run_finished`)."""

    @workflow.run
    async def run(self, request: NotifyRequest) -> None:
        refusal = not_from_its_run(request)
        if refusal is not None:  # before any activity: nothing is sent
            raise ApplicationError(refusal, type="NotificationRefused", non_retryable=True)
        await start_notify(request)
