"""`AgentHandle`: AgentWorkflow's interface, typed, for every client of the project (the command
line, the web inbox, the demo's follower). The names stay those of `workflows.names`, so the
`temporal` CLI drives the same interface with plain JSON.

Calls that need a worker (queries, updates) wait at most `worker_wait` seconds and then raise
`NoWorker`, instead of hanging while no worker polls the task queue. An answer goes through the
`submit_approval` update and is sent again while the run refuses it for having too many requests
in flight (people who watch a run hold some of its slots), with the same update id every time,
so Temporal applies it at most once (`answer`, `AnswerNotDelivered`). One the server turned down
because the worker's task never got to it (a loaded worker that dropped the run from its cache)
was not applied: it is sent again too, under a new id.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError

from starter.request_trouble import NoWorker, is_busy
from workflows import names
from workflows.contract.rules import ApprovalPolicy, PolicyView
from workflows.model import (
    AgentEvent,
    AgentRunInput,
    AgentRunResult,
    AgentStatus,
    AuditView,
    BudgetGrant,
    BudgetStatus,
    CancelRequest,
    ChatMessage,
    PendingQuestion,
    QuestionAnswer,
    ReopenRequest,
    ToolApprovalResponse,
    ToolCall,
)

if TYPE_CHECKING:
    from starter.record import RunRecord

log = logging.getLogger(__name__)

T = TypeVar("T")

WORKER_WAIT_SECONDS = 30.0
"""Queries and updates need a worker; say so instead of hanging when none answers."""
UNPROCESSED = "wasn't processed by worker"
"""The server's words for an update it turned down because the worker's task did not get to it
(`Workflow Update is rejected because it wasn't processed by worker. …`): not the workflow's
refusal, and nothing was applied."""
BUSY_PATIENCE_SECONDS = 30.0
FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 4.0


class AnswerNotDelivered(Exception):
    """No attempt to deliver an answer got through within the time allowed."""

    def __init__(self, busy: bool, seconds: float) -> None:
        super().__init__(f"not delivered within {seconds:.0f}s")
        self.busy = busy
        """True when the run kept refusing (too many requests in flight); False when no worker
        took the answer."""
        self.seconds = seconds


def unprocessed(err: WorkflowUpdateFailedError) -> bool:
    """The server, not the workflow, turned the update down: the worker never processed it."""
    return UNPROCESSED in str(getattr(err.cause, "message", err.cause))


async def start_run(
    client: Client, run_input: AgentRunInput, *, workflow_id: str, task_queue: str
) -> AgentHandle:
    """Start an AgentWorkflow run; the handle names the run it started (`run_id`)."""
    started = await client.start_workflow(
        names.WORKFLOW_TYPE, run_input, id=workflow_id, task_queue=task_queue
    )
    return AgentHandle(client, workflow_id, run_id=started.result_run_id)


class AgentHandle:
    """One run (a workflow id, or one run of it with `run_id`), through its public interface."""

    def __init__(
        self,
        client: Client,
        workflow_id: str,
        *,
        run_id: str | None = None,
        first_execution_run_id: str | None = None,
        worker_wait: float = WORKER_WAIT_SECONDS,
    ) -> None:
        self.client = client
        self.id = workflow_id
        self.run_id = run_id
        self.first_execution_run_id = first_execution_run_id
        """With it, signals and updates reach only the run chain that this run started: Temporal
        refuses them once another run took the workflow id (`starter approve --run-id`)."""
        self.worker_wait = worker_wait
        self.raw: WorkflowHandle[Any, Any] = client.get_workflow_handle(
            workflow_id, run_id=run_id, first_execution_run_id=first_execution_run_id
        )
        """The SDK's handle, for what the interface does not cover."""

    async def _worker(self, call: Awaitable[T], seconds: float | None) -> T:
        limit = self.worker_wait if seconds is None else seconds
        try:
            return await asyncio.wait_for(call, limit)
        except TimeoutError:
            raise NoWorker(limit) from None

    # ------------------------------------------------------------ queries

    async def status(self, *, seconds: float | None = None) -> AgentStatus:
        rpc = timedelta(seconds=seconds) if seconds is not None else None
        query = self.raw.query(names.QUERY_STATUS, result_type=AgentStatus, rpc_timeout=rpc)
        status: AgentStatus = await self._worker(query, seconds)
        return status

    async def events(self, after: int = -1, *, seconds: float | None = None) -> list[AgentEvent]:
        query = self.raw.query(names.QUERY_EVENTS, after, result_type=list[AgentEvent])
        events: list[AgentEvent] = await self._worker(query, seconds)
        return events

    async def messages(self, *, seconds: float | None = None) -> list[ChatMessage]:
        query = self.raw.query(names.QUERY_MESSAGES, result_type=list[ChatMessage])
        messages: list[ChatMessage] = await self._worker(query, seconds)
        return messages

    async def audit(self, *, seconds: float | None = None) -> AuditView:
        """Every decision of the run in order, across continue-as-new (a closed run answers too:
        a worker replays it)."""
        rpc = timedelta(seconds=seconds) if seconds is not None else None
        query = self.raw.query(names.QUERY_AUDIT, result_type=AuditView, rpc_timeout=rpc)
        view: AuditView = await self._worker(query, seconds)
        return view

    async def policy(self) -> PolicyView:
        view: PolicyView = await self._worker(
            self.raw.query(names.QUERY_POLICY, result_type=PolicyView), None
        )
        return view

    async def record(self) -> RunRecord | None:
        """What the queries of a closed run answer, read from its history with no worker
        (`starter.record`); None while the run is open."""
        from starter.record import NotReplayable, read_record  # the replayer: closed runs only

        try:
            return await read_record(self.client, self.id, self.run_id)
        except NotReplayable as err:  # e.g. a run of other code: a worker's queries may answer
            log.info("cannot read %s from its history (%s): asking a worker", self.id, err)
            return None

    # ------------------------------------------------------------ updates and signals

    async def set_policy(self, rules: ApprovalPolicy | dict[str, Any]) -> PolicyView:
        """Replace the run's rules; WorkflowUpdateFailedError when the workflow refuses them."""
        update = self.raw.execute_update(
            names.UPDATE_SET_APPROVAL_POLICY, rules, result_type=PolicyView
        )
        view: PolicyView = await self._worker(update, None)
        return view

    async def grant(self, grant: BudgetGrant) -> BudgetStatus:
        """More tokens for the run, or stop it at its budget (`grant_budget`); the budget after
        it. WorkflowUpdateFailedError when the workflow refuses it (it then changed nothing)."""
        update = self.raw.execute_update(
            names.UPDATE_GRANT_BUDGET,
            grant.model_dump(exclude_none=True, exclude_defaults=True),
            result_type=BudgetStatus,
        )
        budget: BudgetStatus = await self._worker(update, None)
        return budget

    async def reopen(self, request: ReopenRequest) -> AgentStatus:
        """Ask again for an expired call (`reopen_approval`): it waits with a new deadline.
        WorkflowUpdateFailedError (with the reason) when the workflow refuses it."""
        update = self.raw.execute_update(
            names.UPDATE_REOPEN_APPROVAL,
            request,
            id=f"reopen-{uuid.uuid4().hex}",
            result_type=AgentStatus,
        )
        status: AgentStatus = await self._worker(update, None)
        return status

    async def answer(
        self,
        response: ToolApprovalResponse | dict[str, Any],
        *,
        patience: float = BUSY_PATIENCE_SECONDS,
    ) -> list[ToolCall]:
        """Send an answer; return the calls still pending. Raises AnswerNotDelivered when it
        could not be delivered in `patience` seconds, WorkflowUpdateFailedError when the
        workflow refused it, and other errors as the SDK raises them."""
        pending: list[ToolCall] = await self._deliver(
            names.UPDATE_SUBMIT_APPROVAL, response, list[ToolCall], patience
        )
        return pending

    async def submit_answer(
        self,
        answer: QuestionAnswer | dict[str, Any],
        *,
        patience: float = BUSY_PATIENCE_SECONDS,
    ) -> list[PendingQuestion]:
        """Answer a question the model asked (`submit_answer`); return the questions still
        waiting. Raises as `answer` does."""
        waiting: list[PendingQuestion] = await self._deliver(
            names.UPDATE_SUBMIT_ANSWER, answer, list[PendingQuestion], patience
        )
        return waiting

    async def _deliver(self, update: str, payload: Any, result_type: Any, patience: float) -> Any:
        """One update, sent again while the run is busy, with the same update id every time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + patience
        update_id = f"answer-{uuid.uuid4().hex}"
        backoff = FIRST_BACKOFF_SECONDS
        busy = False
        while True:
            remaining = deadline - loop.time()
            try:
                return await asyncio.wait_for(
                    self.raw.execute_update(update, payload, id=update_id, result_type=result_type),
                    max(remaining, 0.1),
                )
            except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
                # The attempt ran out of time (ours or the server's): sending the same update
                # id again is safe, and pointless once the deadline has passed.
                if loop.time() >= deadline:
                    raise AnswerNotDelivered(busy, patience) from None
            except WorkflowUpdateFailedError as err:
                if not unprocessed(err):
                    raise  # the workflow's refusal
                busy = True
                update_id = f"answer-{uuid.uuid4().hex}"  # that one is over, and changed nothing
            except Exception as err:
                if not is_busy(err):
                    raise
                busy = True
            if loop.time() + backoff >= deadline:
                raise AnswerNotDelivered(busy, patience)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    async def cancel(self, request: CancelRequest) -> None:
        await self.raw.signal(names.SIGNAL_CANCEL, request.model_dump(exclude_none=True))

    async def say(self, message: str | ChatMessage) -> dict[str, Any]:
        """Send a user message (`send_message`); returns the payload sent."""
        payload: dict[str, Any] = (
            {"content": message} if isinstance(message, str) else message.model_dump(mode="json")
        )
        await self.raw.signal(names.SIGNAL_SEND_MESSAGE, payload)
        return payload

    # ------------------------------------------------------------ the run itself

    async def describe(self) -> WorkflowExecutionDescription:
        return await self.raw.describe()

    async def first_run_id(self, status: AgentStatus | None = None) -> str | None:
        """The first run id of the run chain (what an answer carries as `run_id`): the status
        says it; for a worker that does not yet, the run's description."""
        if status is not None and status.run_id:
            return status.run_id
        try:
            description = await self.describe()
        except RPCError:
            return None
        return description.raw_description.workflow_execution_info.first_run_id or None

    async def finished_how(self, status: WorkflowExecutionStatus | None) -> str:
        """How a closed run ended, in the run's own terms: its finish reason (`stop`, `error`,
        `cancelled`, `max_rounds`) when it completed, since Temporal's "completed" reads as
        success for every one of them; else Temporal's status (`terminated`, `timed_out`…)."""
        if status != WorkflowExecutionStatus.COMPLETED:
            return status.name.lower() if status else "closed"
        try:
            result = await asyncio.wait_for(self.result(), self.worker_wait)
        except Exception:  # a result this program cannot read (another key): Temporal's word
            return "completed"
        return str(result.finish_reason)

    async def result(self) -> AgentRunResult:
        handle = self.client.get_workflow_handle(
            self.id, run_id=self.run_id, result_type=AgentRunResult
        )
        result: AgentRunResult = await handle.result(follow_runs=False)
        return result
