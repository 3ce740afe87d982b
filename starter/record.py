"""A closed run read from its history, with no worker: its status, messages, events and audit.

A query to a closed run needs a worker (it replays the run's history to answer), so without one
`history`, `audit`, `watch` and the web pages of a finished run would wait and fail. A closed
run's history is complete and cannot change, so this program replays it itself, with the same
workflow code and data converter a worker uses (`temporalio.worker.Replayer`), and reads the
answers the queries would have given from the replayed run. Nothing is sent to the run; the
server is asked only for the history and the run's description.

    record = await read_record(client, workflow_id)   # None while the run is open
    record.status, record.messages, record.events, record.audit, record.closed, record.failure

A run that closed without finishing (terminated, timed out) has no final status of its own: its
phase is the last one it published (`AgentStatus`), `closed` says how it ended, and `failure` why
when Temporal recorded a reason (a failure's message, a termination's reason).
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from dataclasses import dataclass
from typing import Any

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from workflows import names
from workflows.model import AgentEvent, AgentStatus, AuditView, ChatMessage, Phase
from workflows.run.agent import AgentWorkflow

log = logging.getLogger(__name__)

# A replayed run that ended with handlers still open (a follower's long poll) would say so on
# stderr, as a worker does once when the run really ended: here that is only noise.
warnings.filterwarnings("ignore", category=workflow.UnfinishedUpdateHandlersWarning)
warnings.filterwarnings("ignore", category=workflow.UnfinishedSignalHandlersWarning)

_OPEN = {WorkflowExecutionStatus.RUNNING, None}
_ENDED_BY_TEMPORAL = {WorkflowExecutionStatus.TERMINATED, WorkflowExecutionStatus.TIMED_OUT}
_PHASES: tuple[Phase, ...] = (
    "running",
    "awaiting_approval",
    "awaiting_answer",
    "approval_expired",
    "waiting_for_message",
    "finished",
    "budget_exhausted",
    "waiting_for_sub_agents",
)


@dataclass(frozen=True)
class RunRecord:
    """What a closed run's queries would answer, read from its history."""

    status: AgentStatus
    messages: list[ChatMessage]
    events: list[AgentEvent]
    audit: AuditView
    closed: str
    """How Temporal closed the run: `completed`, `failed`, `canceled`, `terminated`,
    `timed_out`, `continued_as_new`."""
    failure: str | None = None
    """Why Temporal closed it, when it recorded a reason (a failure's message, a termination's
    reason); None for a run that completed."""


class NotReplayable(Exception):
    """The history could not be replayed here (e.g. a run of another version of the code)."""


class _Capture(Interceptor):
    """Keeps the replayed run's instance, its status when its `run` returned or raised, and how
    many events and messages it had after each activation (`seen`).

    A run Temporal ended (terminated, timed out) never returned: when the replay reaches the end
    of its history the replayer evicts it, which cancels it, and the workflow's own cancellation
    path adds events that never happened. Only what it had after its last recorded activation
    counts then."""

    def __init__(self) -> None:
        self.instance: AgentWorkflow | None = None
        self.status: AgentStatus | None = None
        self.seen = (0, 0)

    def snapshot(self) -> bool:
        """A wait condition that is never met: conditions are checked after every activation."""
        if self.instance is not None:
            self.seen = (len(self.instance.events(-1)), len(self.instance.messages()))
        return False

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        capture = self

        class _Inbound(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                capture.instance = workflow.instance()
                watching = asyncio.ensure_future(workflow.wait_condition(capture.snapshot))
                try:
                    return await super().execute_workflow(input)
                finally:
                    watching.cancel()
                    if capture.instance is not None:
                        capture.status = capture.instance.status()

        return _Inbound


async def read_record(
    client: Client, workflow_id: str, run_id: str | None = None
) -> RunRecord | None:
    """The record of the run (the latest of `workflow_id` without `run_id`) when it has closed;
    None while it is open. Raises RPCError (e.g. NOT_FOUND) as the server does, and
    NotReplayable when the history cannot be replayed here."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    description = await handle.describe()
    if description.status in _OPEN:
        return None
    history = await handle.fetch_history()
    return await replay_record(client, history, description.status, _phase_of(description))


async def replay_record(
    client: Client,
    history: WorkflowHistory,
    closed: WorkflowExecutionStatus | None,
    last_phase: Phase = "running",
) -> RunRecord:
    """Replay a closed run's history and read what its queries would answer. Raises the
    codec's DecryptionError, as a query's answer would, when the run is sealed with a key this
    program lacks."""
    await _decrypt_input(client, history)
    capture = _Capture()
    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=client.data_converter,
        interceptors=[capture],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    instance = capture.instance
    if result.replay_failure is not None or instance is None:
        raise NotReplayable(str(result.replay_failure or "the run never started"))
    events, messages, status = instance.events(-1), instance.messages(), capture.status
    if closed in _ENDED_BY_TEMPORAL or status is None:
        events, messages = events[: capture.seen[0]], messages[: capture.seen[1]]
        status = _unfinished_status(history, events, last_phase)
    return RunRecord(
        status=status,
        messages=messages,
        events=events,
        audit=instance.audit(),
        closed=(closed.name if closed else "CLOSED").lower(),
        failure=(
            await close_reason(history.events[-1], client.data_converter)
            if history.events
            else None
        ),
    )


async def _decrypt_input(client: Client, history: WorkflowHistory) -> None:
    """Decrypt the run's start input once: a replay would only report a failed activation."""
    codec = client.data_converter.payload_codec
    if codec is None or not history.events:
        return
    started = history.events[0].workflow_execution_started_event_attributes
    if started.input.payloads:
        await codec.decode(list(started.input.payloads))


def _unfinished_status(
    history: WorkflowHistory, events: list[AgentEvent], phase: Phase
) -> AgentStatus:
    """The status of a run Temporal ended before its `run` returned (terminated, timed out): the
    phase it last published, the round of its last event, nothing pending any more."""
    started = history.events[0].workflow_execution_started_event_attributes
    return AgentStatus(
        phase=phase,
        round=events[-1].round if events else 0,
        pending_approvals=[],
        run_id=started.first_execution_run_id or None,
    )


def _phase_of(description: Any) -> Phase:
    value = description.typed_search_attributes.get(names.AGENT_STATUS)
    return next((p for p in _PHASES if p == value), "running")


async def close_reason(event: HistoryEvent, converter: DataConverter) -> str | None:
    """Why Temporal closed a run, from its close event: a failure's message (decoded: with a
    key, failure messages are sealed), a termination's reason, a timeout; None when it
    completed or continued as new."""
    kind = event.event_type
    if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
        failure = Failure()
        failure.CopyFrom(event.workflow_execution_failed_event_attributes.failure)
        try:
            error = await converter.decode_failure(failure)
        except Exception as err:  # sealed with a key this program lacks
            log.debug("failure of the run unreadable: %s", err)
            return "failed (its reason cannot be read here)"
        return str(error) or type(error).__name__
    if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
        reason = event.workflow_execution_terminated_event_attributes.reason
        return f"terminated: {reason}" if reason else "terminated"
    if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
        return "the run's execution timeout passed"
    if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
        return "cancelled through Temporal"
    return None
