"""Recent runs of the namespace, for the runs page and `GET /api/runs`: one visibility listing per
page, newest first as Temporal's visibility orders runs (open runs first, by start; then closed
runs, by when they closed: it offers no other order), one row per run chain (the generations a
run continued as new from are left out, and the row's start is the chain's first start).

Finished runs carry their decision counts and tokens in their memo, naming the run
(`workflows.gate.audit.audit_memo`), so a page of them costs one listing and no worker. Open runs
have no memo yet: their phase is their `AgentStatus` search attribute, and their counts are asked
for by the web app (`starter.web.run_counts`), not here.

Sub-agents (the child runs a `delegate` call starts) are listed under their parent: a page
without a status filter lists the runs no other run started (`ParentWorkflowId IS NULL`), then
one more listing finds the sub-agents of its runs (`RootWorkflowId IN (…)`, Temporal's own record
of who started whom) and puts each under its parent, depth first. A status filter lists every
run that matches, sub-agents too, each row naming its parent.

Filters are visibility queries wherever visibility can answer them: the status by
`ExecutionStatus` and `AgentStatus`, the text by `WorkflowId STARTS_WITH`. What it cannot answer
is checked here, row by row, over a bounded scan (`SCAN_LIMIT` rows per page asked for): how a
finished run ended (its memo), and the part of the text from the first character visibility
does not match reliably (a quote, a backslash, a control or other hidden character).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError

from workflows import names
from workflows.model import AuditCounts, Usage
from workflows.shown import hidden

log = logging.getLogger(__name__)

PAGE_SIZE = 50
SCAN_PAGE = 200
"""Rows per visibility request while a filter is checked row by row (the same every time, so a
cursor into such a page finds the same rows again)."""
SCAN_LIMIT = 2_000
"""At most this many rows are looked at for one page: a page that found fewer than PAGE_SIZE
rows by then ends early, with a cursor to go on from there."""
CHAIN_LIMIT = 2_000
"""At most this many earlier generations are read to find the pages' chains' first starts."""
SUB_AGENT_LIMIT = 1_000
"""At most this many sub-agents are listed under the runs of one page."""
MAX_TEXT_CHARS = 200
LIST_TIMEOUT = timedelta(seconds=10)

OPEN_STATUSES = (
    "running",
    "awaiting_approval",
    "approval_expired",
    "awaiting_answer",
    "waiting_for_message",
    "budget_exhausted",
    "waiting_for_sub_agents",
)
FINISH_REASONS = ("stop", "max_rounds", "cancelled", "error", "budget")
ENDED_BY_TEMPORAL = ("terminated", "timed_out", "failed")
STATUSES = (*OPEN_STATUSES, "finished", *FINISH_REASONS, *ENDED_BY_TEMPORAL)
"""What `status` filters by. A row's status is one of these; `finished` is every run that
finished by itself (the row says how: `stop`, `max_rounds`, `cancelled`, `error`, `budget`, or
`finished` when its memo does not say)."""

BASE_QUERY = f'WorkflowType="{names.WORKFLOW_TYPE}" AND ExecutionStatus!="ContinuedAsNew"'
_WAITING = (
    '("awaiting_approval", "approval_expired", "awaiting_answer", "waiting_for_message",'
    ' "budget_exhausted", "waiting_for_sub_agents")'
)
_PHASE = names.AGENT_STATUS.name
STATUS_QUERIES = {
    "running": f'ExecutionStatus="Running" AND ({_PHASE} IS NULL OR {_PHASE} NOT IN {_WAITING})',
    "awaiting_approval": f'ExecutionStatus="Running" AND {_PHASE}="awaiting_approval"',
    "awaiting_answer": f'ExecutionStatus="Running" AND {_PHASE}="awaiting_answer"',
    "approval_expired": f'ExecutionStatus="Running" AND {_PHASE}="approval_expired"',
    "waiting_for_message": f'ExecutionStatus="Running" AND {_PHASE}="waiting_for_message"',
    "budget_exhausted": f'ExecutionStatus="Running" AND {_PHASE}="budget_exhausted"',
    "waiting_for_sub_agents": f'ExecutionStatus="Running" AND {_PHASE}="waiting_for_sub_agents"',
    "finished": 'ExecutionStatus IN ("Completed", "Canceled")',
    "stop": 'ExecutionStatus="Completed"',
    "max_rounds": 'ExecutionStatus="Completed"',
    "error": 'ExecutionStatus="Completed"',
    "budget": 'ExecutionStatus="Completed"',
    "cancelled": 'ExecutionStatus IN ("Completed", "Canceled")',
    "terminated": 'ExecutionStatus="Terminated"',
    "timed_out": 'ExecutionStatus="TimedOut"',
    "failed": 'ExecutionStatus="Failed"',
}
"""The visibility query of each status; for a finish reason, of the runs it is among (the memo
says which)."""

_CLOSED_STATUS = {
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed_out",
    WorkflowExecutionStatus.FAILED: "failed",
}


class BadFilter(ValueError):
    """A filter the runs page cannot use; the message is the one line to show."""


@dataclass(frozen=True)
class RunRow:
    """One run (chain) as the runs page lists it."""

    workflow_id: str
    run_id: str
    status: str
    started_at: datetime | None
    closed_at: datetime | None
    decisions: AuditCounts | None = None
    """How its calls were decided; None when not known (an open run whose worker did not
    answer, a run Temporal ended)."""
    tokens: Usage | None = None
    counts_from: str | None = None
    """Where the counts come from: `memo` (a finished run), `audit` (asked of an open run)."""
    error: str | None = None
    """Why the run ended, when it ended with an error (its memo says)."""
    prompt: str | None = None
    """The run's first user message as its memo keeps it (cut short); None for a run started
    before the memo had it, or a memo this program cannot read."""
    parent_workflow_id: str | None = None
    """For a sub-agent: the run whose `delegate` call started it (Temporal's parent)."""
    depth: int = 0
    """How far under the page's run it is listed (0: a run of its own; 1: its sub-agent, …)."""

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES

    def as_json(self) -> dict[str, Any]:
        """The row as `GET /api/runs` answers it."""
        return {
            "workflow_id": self.workflow_id,
            "run_id": self.run_id,
            "status": self.status,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "closed_at": self.closed_at.isoformat() if self.closed_at else None,
            "decisions": self.decisions.model_dump() if self.decisions else None,
            "tokens": self.tokens.model_dump() if self.tokens else None,
            "counts_from": self.counts_from,
            "error": self.error,
            "prompt": self.prompt,
            "parent_workflow_id": self.parent_workflow_id,
        }


@dataclass(frozen=True)
class Cursor:
    """Where a page starts: visibility's page token, and how many rows of that page were
    already shown (a page checked row by row can end in the middle of one)."""

    token: bytes | None = None
    skip: int = 0


@dataclass(frozen=True)
class RunsPage:
    rows: list[RunRow]
    next: Cursor | None
    """The next page; None on the last."""
    scanned: int
    """The rows visibility returned for this page (more than shown when a filter is checked
    row by row)."""


def quotable(text: str) -> bool:
    """Whether `text` can stand in a visibility query's double-quoted string and be matched as
    it is. Visibility matches no quote or backslash reliably (escaped or not), nor controls."""
    return not any(c in "\"'\\" or hidden(c) for c in text)


def quotable_prefix(text: str) -> str:
    """The longest start of `text` that visibility matches as it is."""
    for index, char in enumerate(text):
        if not quotable(char):
            return text[:index]
    return text


@dataclass(frozen=True)
class RunFilter:
    """A status (one of STATUSES, or None for every run) and text the workflow id starts with."""

    status: str | None = None
    text: str = ""

    @property
    def visibility_query(self) -> str:
        parts = [BASE_QUERY]
        if self.status is not None:
            parts.append(STATUS_QUERIES[self.status])
        else:  # sub-agents are listed under their parents (`with_sub_agents`)
            parts.append("ParentWorkflowId IS NULL")
        prefix = quotable_prefix(self.text)
        if prefix:
            parts.append(f'WorkflowId STARTS_WITH "{prefix}"')
        return " AND ".join(f"({p})" if " OR " in p else p for p in parts)

    @property
    def checked_here(self) -> bool:
        """Whether some of the filter is checked row by row (visibility cannot answer it)."""
        return self.status in FINISH_REASONS or quotable_prefix(self.text) != self.text

    def matches(self, row: RunRow) -> bool:
        if not row.workflow_id.startswith(self.text):
            return False
        if self.status in FINISH_REASONS:
            return row.status == self.status
        return True


def parse_filter(status: str | None, text: str | None) -> RunFilter:
    """The filter of a request (`status`, `q`); BadFilter says what is wrong."""
    status = (status or "").strip() or None
    if status is not None and status not in STATUSES:
        raise BadFilter(f"unknown status '{status[:40]}': one of {', '.join(STATUSES)}")
    text = text or ""
    if len(text) > MAX_TEXT_CHARS:
        raise BadFilter(
            f"the workflow id filter is {len(text)} characters; at most {MAX_TEXT_CHARS}"
        )
    return RunFilter(status, text)


def _own_memo(memo: Any, run_id: str) -> Any:
    """The memo when the run wrote it itself: one naming this very run
    (`workflows.gate.audit.audit_memo`). Any other (a client's own memo given at start) says
    nothing: None."""
    return memo if isinstance(memo, dict) and memo.get("run_id") == run_id else None


def _memo_error(memo: Any) -> str | None:
    """Why a finished run ended with an error, as its memo says."""
    error = memo.get("error") if isinstance(memo, dict) else None
    return error if isinstance(error, str) else None


def _memo_counts(memo: Any) -> tuple[str | None, AuditCounts | None, Usage | None]:
    """What a finished run's memo says: how it ended, its decision counts, its tokens."""
    if not isinstance(memo, dict):
        return None, None, None
    reason = memo.get("finish_reason")
    try:
        counts = AuditCounts.model_validate(memo["decisions"]) if "decisions" in memo else None
        tokens = Usage.model_validate(memo["tokens"]) if "tokens" in memo else None
    except ValidationError:
        counts, tokens = None, None
    return (reason if isinstance(reason, str) else None), counts, tokens


async def _prompt(execution: WorkflowExecution) -> str | None:
    """The first user message the run put in its memo, or None."""
    try:
        prompt = await execution.memo_value("prompt", None)
    except Exception as err:  # e.g. sealed with a key this program lacks
        log.debug("memo of %s unreadable: %s", execution.id, err)
        return None
    return prompt if isinstance(prompt, str) and prompt else None


async def row_of(execution: WorkflowExecution) -> RunRow:
    """One listed run as a row: its status from Temporal's and the search attributes, its
    counts from its memo when it has one (a memo this program cannot read counts as none)."""
    reason, counts, tokens, error = None, None, None, None
    if execution.status not in (None, WorkflowExecutionStatus.RUNNING):
        try:
            memo = await execution.memo_value("agent", None)
        except Exception as err:  # e.g. sealed with a key this program lacks
            log.debug("memo of %s unreadable: %s", execution.id, err)
            memo = None
        memo = _own_memo(memo, execution.run_id)
        reason, counts, tokens = _memo_counts(memo)
        error = _memo_error(memo)
    if execution.status == WorkflowExecutionStatus.RUNNING or execution.status is None:
        phase = execution.typed_search_attributes.get(names.AGENT_STATUS)
        status = phase if phase in OPEN_STATUSES else "running"
    elif execution.status == WorkflowExecutionStatus.COMPLETED:
        status = reason if reason in FINISH_REASONS else "finished"
    else:
        status = _CLOSED_STATUS.get(execution.status, execution.status.name.lower())
    return RunRow(
        workflow_id=execution.id,
        run_id=execution.run_id,
        status=status,
        started_at=execution.start_time,
        closed_at=execution.close_time,
        decisions=counts,
        tokens=tokens,
        counts_from="memo" if counts is not None else None,
        error=error,
        prompt=await _prompt(execution),
        parent_workflow_id=execution.parent_id,
        depth=1 if execution.parent_id else 0,
    )


async def _visibility_page(
    client: Client, query: str, token: bytes | None, size: int
) -> tuple[list[WorkflowExecution], bytes | None]:
    listing = client.list_workflows(
        query, page_size=size, next_page_token=token, rpc_timeout=LIST_TIMEOUT
    )
    await listing.fetch_next_page()
    return list(listing.current_page or []), listing.next_page_token


async def list_runs(
    client: Client,
    run_filter: RunFilter,
    cursor: Cursor | None = None,
    *,
    page_size: int = PAGE_SIZE,
    scan_limit: int = SCAN_LIMIT,
) -> RunsPage:
    """One page of runs, newest first. Raises RPCError when visibility refuses or fails."""
    cursor = cursor or Cursor()
    query = run_filter.visibility_query

    async def finish(rows: list[RunRow]) -> list[RunRow]:
        """The page's rows with their sub-agents under them (when the filter leaves them out
        of the listing) and their chains' first starts."""
        if run_filter.status is None:
            rows = await with_sub_agents(client, rows)
        return await with_chain_starts(client, rows)

    if not run_filter.checked_here:
        executions, token = await _visibility_page(client, query, cursor.token, page_size)
        rows = [await row_of(e) for e in executions]
        following = Cursor(token) if token else None
        return RunsPage(await finish(rows), following, len(executions))
    rows, scanned = [], 0
    token, skip = cursor.token, cursor.skip
    while True:
        executions, after = await _visibility_page(client, query, token, SCAN_PAGE)
        scanned += max(0, len(executions) - skip)
        for index in range(skip, len(executions)):
            row = await row_of(executions[index])
            if not run_filter.matches(row):
                continue
            rows.append(row)
            if len(rows) == page_size:
                rest = index + 1 < len(executions) or after is not None
                following = Cursor(token, index + 1) if rest else None
                return RunsPage(await finish(rows), following, scanned)
        token, skip = after, 0
        if token is None:
            return RunsPage(await finish(rows), None, scanned)
        if scanned >= scan_limit:
            return RunsPage(await finish(rows), Cursor(token), scanned)


async def with_sub_agents(client: Client, rows: list[RunRow]) -> list[RunRow]:
    """The rows, each followed by its sub-agents (and theirs, depth first, in the order they
    started), found in one listing by Temporal's `RootWorkflowId`."""
    roots = sorted({r.workflow_id for r in rows if quotable(r.workflow_id)})
    if not roots:
        return rows
    listed = ", ".join(f'"{i}"' for i in roots)
    query = f"{BASE_QUERY} AND ParentWorkflowId IS NOT NULL AND RootWorkflowId IN ({listed})"
    children: dict[str, list[RunRow]] = {}
    try:
        found = [e async for e in client.list_workflows(query, limit=SUB_AGENT_LIMIT)]
    except RPCError as err:  # the runs stand without them
        log.warning("cannot list the sub-agents of a runs page: %s", err.message)
        return rows
    for execution in sorted(found, key=lambda e: e.start_time):
        if execution.parent_id:
            children.setdefault(execution.parent_id, []).append(await row_of(execution))
    if not children:
        return rows
    out: list[RunRow] = []

    def place(row: RunRow, depth: int) -> None:
        out.append(replace(row, depth=depth))
        if depth < 10:
            for child in children.pop(row.workflow_id, []):
                place(child, depth + 1)

    for row in rows:
        place(row, 0)
    return out


async def with_chain_starts(client: Client, rows: list[RunRow]) -> list[RunRow]:
    """The rows with the first start of their chain: a generation that continued as new closed
    at the very time the next one started, so each row's chain is followed back from its start
    through the earlier generations of its workflow id (one listing for the whole page)."""
    ids = sorted({r.workflow_id for r in rows if quotable(r.workflow_id)})
    if not ids:
        return rows
    listed = ", ".join(f'"{i}"' for i in ids)
    query = (
        f'WorkflowType="{names.WORKFLOW_TYPE}" AND ExecutionStatus="ContinuedAsNew"'
        f" AND WorkflowId IN ({listed})"
    )
    earlier: dict[tuple[str, datetime], datetime] = {}
    token: bytes | None = None
    try:
        while len(earlier) < CHAIN_LIMIT:
            executions, token = await _visibility_page(client, query, token, 1000)
            for e in executions:
                if e.close_time is not None:
                    earlier[(e.id, e.close_time)] = e.start_time
            if token is None:
                break
    except RPCError as err:  # the rows stand without it: each generation's own start
        log.warning("cannot list the earlier generations of a runs page: %s", err.message)
        return rows
    if not earlier:
        return rows
    return [_chain_start(row, earlier) for row in rows]


def _chain_start(row: RunRow, earlier: dict[tuple[str, datetime], datetime]) -> RunRow:
    start = row.started_at
    for _ in range(len(earlier)):
        if start is None or (row.workflow_id, start) not in earlier:
            break
        start = earlier[(row.workflow_id, start)]
    return row if start == row.started_at else replace(row, started_at=start)
