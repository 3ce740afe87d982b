"""The runs waiting for approval, across the namespace: one listing, one `WaitingRun`, for
`starter pending` and for the web inbox (which keeps the last good answer of each run and asks
again in the background, `starter.web.hub.Inbox`).

The list comes from the search attributes (`AgentStatus`, `AgentPendingApprovals`), which the
server answers without a worker; the details of each run (its pending calls and since when it
waits) come from its `status` query, which needs one. Each query is bounded and they run
concurrently, so a missing worker makes a run's details unavailable, never the run invisible.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from temporalio.client import Client, WorkflowExecution
from temporalio.service import RPCError, RPCStatusCode

from starter.handle import AgentHandle
from workflows import names
from workflows.contract.arguments import arguments_digest
from workflows.model import (
    PERSON_PHASES,
    AgentStatus,
    BudgetStatus,
    ChatMessage,
    PendingQuestion,
    Quorum,
    ToolCall,
)

log = logging.getLogger(__name__)

DETAILS_TIMEOUT_SECONDS = 3.0

FOR_A_PERSON = (*PERSON_PHASES, "budget_exhausted")
"""The phases in which a run waits for a person: calls to approve (also expired ones), questions
to answer, a token budget to grant."""
_PHASES = ", ".join(f'"{phase}"' for phase in FOR_A_PERSON)
INBOX_QUERY = (
    f'WorkflowType="{names.WORKFLOW_TYPE}" AND {names.AGENT_STATUS.name} IN ({_PHASES})'
    ' AND ExecutionStatus="Running"'
)
"""Runs waiting for a person (to approve calls, also after their approval timeout passed:
`approval_expired`, answer a question, or grant tokens). A run that was
terminated while waiting keeps its last `AgentStatus`, so only open runs count (and a query to
a closed one would wait for a worker)."""


@dataclass(frozen=True)
class Context:
    """What led to a wait, for people: the run's first user message and the assistant's text
    of the round that asked."""

    first_user: str = ""
    round_text: str = ""


@dataclass(frozen=True)
class WaitingRun:
    """A run waiting for a person, as `starter pending` and the web inbox show it."""

    workflow_id: str
    run_id: str
    """The run (execution) the listing found."""
    pending_count: int
    """The calls still unanswered, as the run's `AgentPendingApprovals` says."""
    status: AgentStatus | None
    """The run's `status`; None when no worker answered in time."""
    first_run_id: str | None = None
    """The first run id of the run's chain, as shown: what an answer carries as `run_id`, so
    it is refused if another run took this workflow id since."""
    context: Context | None = None
    """Asked for by the web inbox only."""

    @property
    def budget(self) -> BudgetStatus | None:
        """The run's token budget while it waits at it (`budget_exhausted`), else None."""
        status = self.status
        if status is None or status.phase != "budget_exhausted":
            return None
        return status.budget

    @property
    def pending(self) -> list[ToolCall]:
        return list(self.status.pending_approvals) if self.status else []

    @property
    def questions(self) -> list[PendingQuestion]:
        """The model's questions waiting for a person's answer."""
        return list(self.status.pending_questions) if self.status else []

    @property
    def awaiting_since(self) -> datetime | None:
        return self.status.awaiting_since if self.status else None

    @property
    def round(self) -> int | None:
        return self.status.round if self.status else None

    @property
    def first_user(self) -> str:
        return self.context.first_user if self.context else ""

    @property
    def round_text(self) -> str:
        return self.context.round_text if self.context else ""

    def quorum(self, call_id: str) -> Quorum | None:
        """A waiting call under an approver rule: who may answer, the approvals so far."""
        quorums = self.status.quorums if self.status else []
        return next((q for q in quorums if q.call_id == call_id), None)

    def as_json(self) -> dict[str, Any]:
        """The object `starter pending --json` and `GET /api/pending` print for this run."""
        status = self.status
        if status is None:
            return {
                "workflow_id": self.workflow_id,
                "run_id": self.run_id,
                "awaiting_since": None,
                "pending_count": self.pending_count,
                "pending": None,
                "details": "unavailable",
            }
        return {
            "workflow_id": self.workflow_id,
            "run_id": self.run_id,
            "awaiting_since": status.awaiting_since.isoformat() if status.awaiting_since else None,
            "pending_count": len(status.pending_approvals),
            "pending": [c.model_dump(mode="json") for c in status.pending_approvals],
            "expired": list(status.expired),
            "decided": [d.model_dump(mode="json") for d in status.decided],
            "questions": [q.model_dump(mode="json") for q in status.pending_questions],
            "quorums": [q.model_dump(mode="json") for q in status.quorums],
            "details": "available",
            "pins": self.pins(),
            **({"budget": self.budget.model_dump()} if self.budget else {}),
            **({"parent": self.parent_json()} if status.parent else {}),
        }

    def parent_json(self) -> dict[str, Any] | None:
        """For a sub-agent: the run and the `delegate` call that started it, and its task (what
        `pending --json` and `GET /api/pending` carry as `parent`; left out for other runs)."""
        parent = self.status.parent if self.status else None
        if parent is None:
            return None
        return {
            "workflow_id": parent.workflow_id,
            "call_id": parent.call_id,
            "depth": parent.depth,
            "task": parent.task,
        }

    def pins(self) -> list[dict[str, str | None]]:
        """For each waiting call, what pins an answer to it (`starter approve --run-id R
        --sha256 D`): the same in `starter pending --json` and `GET /api/pending`."""
        return [
            {"call_id": c.id, "run_id": self.first_run_id, "sha256": arguments_digest(c.arguments)}
            for c in self.pending
        ]


class RunGone(Exception):
    """The run closed between the listing and its query."""


async def list_waiting(client: Client) -> list[WorkflowExecution]:
    """Every open run the search attributes list as awaiting approval (no worker needed).
    Raises RPCError when the listing itself fails."""
    return [e async for e in client.list_workflows(INBOX_QUERY)]


def context_of(messages: list[ChatMessage], pending: list[ToolCall]) -> Context:
    """The run's first user message and the assistant's text of the round that asked."""
    first = next((m.content for m in messages if m.role == "user"), "")
    ids = {c.id for c in pending}
    for message in reversed(messages):
        if message.role == "assistant" and any(c.id in ids for c in message.tool_calls or []):
            return Context(first, message.content)
    return Context(first, "")


async def details(
    client: Client,
    execution: WorkflowExecution,
    *,
    seconds: float = DETAILS_TIMEOUT_SECONDS,
    with_context: bool = False,
) -> WaitingRun | None:
    """One listed run with its details (None when its status shows it no longer waits for a
    person). Raises RunGone when the run closed meanwhile, and whatever the query raised when
    no worker answered in time (NoWorker, RPCError)."""
    handle = AgentHandle(client, execution.id, run_id=execution.run_id, worker_wait=seconds)
    try:
        status = await handle.status(seconds=seconds)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise RunGone(execution.id) from None
        raise
    if not waits_for_person(status):
        return None
    context = None
    if with_context:
        try:
            context = context_of(await handle.messages(seconds=seconds), status.pending_approvals)
        except Exception as err:  # the context is for people; the call is what counts
            log.debug("no messages for %s: %s", execution.id, err)
            context = Context()
    return WaitingRun(
        execution.id,
        execution.run_id,
        _pending_count(execution),
        status,
        status.run_id or execution.raw_info.first_run_id or await handle.first_run_id(),
        context,
    )


def waits_for_person(status: AgentStatus) -> bool:
    """Calls to approve, questions to answer, or a token budget to grant."""
    if status.phase == "budget_exhausted":
        return status.budget is not None
    waits = status.phase in PERSON_PHASES
    return waits and bool(status.pending_approvals or status.pending_questions)


def unavailable(execution: WorkflowExecution) -> WaitingRun:
    """A listed run whose worker did not answer: what the search attributes say."""
    return WaitingRun(execution.id, execution.run_id, _pending_count(execution), None)


def _pending_count(execution: WorkflowExecution) -> int:
    return execution.typed_search_attributes.get(names.AGENT_PENDING_APPROVALS) or 0


def newest_wait_first(runs: list[WaitingRun]) -> list[WaitingRun]:
    """The order people see them in: the newest wait first, runs without details last."""

    def key(run: WaitingRun) -> tuple[bool, float]:
        since = run.awaiting_since
        return since is not None, since.timestamp() if since else 0.0

    return sorted(runs, key=key, reverse=True)


async def waiting_runs(
    client: Client, *, seconds: float = DETAILS_TIMEOUT_SECONDS
) -> list[WaitingRun]:
    """Every run the search attributes list as awaiting approval, with its details when a worker
    answers within `seconds`, newest wait first. A run whose status shows it no longer waits
    (answered since the listing) is left out. Raises RPCError when the listing itself fails."""
    executions = await list_waiting(client)

    async def one(execution: WorkflowExecution) -> WaitingRun | None:
        try:
            return await details(client, execution, seconds=seconds)
        except RunGone:
            return None
        except Exception as err:  # no worker, a failed query: details unavailable
            log.debug("no status for %s: %s", execution.id, err)
            return unavailable(execution)

    found = await asyncio.gather(*(one(e) for e in executions))
    return newest_wait_first([r for r in found if r is not None])
