"""The runs waiting for approval, across the namespace.

The list comes from the search attributes (`AgentStatus`, `AgentPendingApprovals`), which the
server answers without a worker; the details of each run (its pending calls and since when it
waits) come from its `status` query, which needs one. The queries run concurrently with a short
timeout each, so a missing worker makes the details unavailable, never the run invisible.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecution

from workflows import names
from workflows.model import AgentStatus

log = logging.getLogger(__name__)

DETAILS_TIMEOUT_SECONDS = 3.0

INBOX_QUERY = (
    f'WorkflowType="{names.WORKFLOW_TYPE}" AND {names.AGENT_STATUS.name}="awaiting_approval"'
    ' AND ExecutionStatus="Running"'
)
"""Runs waiting for a person. A run that was terminated while waiting keeps its last
`AgentStatus`, so only open runs count (and a query to a closed one would wait for a worker)."""


@dataclass
class WaitingRun:
    workflow_id: str
    run_id: str
    pending_count: int
    """The calls still unanswered, as the run's `AgentPendingApprovals` says."""
    status: AgentStatus | None
    """The run's `status`; None when no worker answered in time."""

    def as_json(self) -> dict[str, Any]:
        """The object `pending --json` prints for this run."""
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
            "decided": [d.model_dump(mode="json") for d in status.decided],
            "details": "available",
        }


async def _details(
    client: Client, execution: WorkflowExecution, seconds: float
) -> AgentStatus | None:
    handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
    try:
        status: AgentStatus = await asyncio.wait_for(
            handle.query(
                names.QUERY_STATUS,
                result_type=AgentStatus,
                rpc_timeout=timedelta(seconds=seconds),
            ),
            seconds,
        )
    except Exception as err:  # no worker, a closed run, a failed query: details unavailable
        log.debug("no status for %s: %s", execution.id, err)
        return None
    return status


async def waiting_runs(
    client: Client, *, seconds: float = DETAILS_TIMEOUT_SECONDS
) -> list[WaitingRun]:
    """Every run the search attributes list as awaiting approval, with its details when a worker
    answers within `seconds`. A run whose status shows it no longer waits (answered
    since the listing) is left out. Raises RPCError when the listing itself fails."""
    executions = [e async for e in client.list_workflows(INBOX_QUERY)]
    statuses = await asyncio.gather(*(_details(client, e, seconds) for e in executions))
    runs: list[WaitingRun] = []
    for execution, status in zip(executions, statuses, strict=True):
        if status is not None and (
            status.phase != "awaiting_approval" or not status.pending_approvals
        ):
            continue
        count = execution.typed_search_attributes.get(names.AGENT_PENDING_APPROVALS)
        runs.append(WaitingRun(execution.id, execution.run_id, count or 0, status))
    return runs
