"""The decision counts and tokens of the open runs on a runs page. A finished run carries them in
its memo; an open one has no memo yet, so its `audit` query is asked, as the inbox asks its runs'
`status`: concurrently and bounded (`COUNTS_CONCURRENCY` at a time, each at most
`QUERY_TIMEOUT_SECONDS`), the page waiting at most `PAGE_WAIT_SECONDS` for them, the last good
answer of each run kept (`starter.web.run_answers`) and used for `FRESH_SECONDS` (one query per
run however many people load the page), a run that did not answer asked again only after
`RETRY_SECONDS`. A run whose worker does not answer is listed without counts, never slower.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from temporalio.client import Client

from starter.handle import AgentHandle
from starter.runs import RunRow
from starter.web.run_answers import Key, RunAnswers
from workflows.model import AuditCounts, Usage

QUERY_TIMEOUT_SECONDS = 3.0
COUNTS_CONCURRENCY = 8
PAGE_WAIT_SECONDS = 1.0
FRESH_SECONDS = 5.0
RETRY_SECONDS = 10.0
MAX_KNOWN = 2_000
"""The runs whose counts are remembered (the least recently listed are forgotten first)."""


@dataclass(frozen=True)
class Known:
    decisions: AuditCounts
    tokens: Usage


class OpenRunCounts:
    """The counts of open runs, asked of each run's `audit` query and kept."""

    def __init__(self, client: Client, clock: Callable[[], float] | None = None) -> None:
        self._client = client
        self._answers: RunAnswers[Known] = RunAnswers(
            size=MAX_KNOWN,
            concurrency=COUNTS_CONCURRENCY,
            retry_seconds=RETRY_SECONDS,
            clock=clock or (lambda: asyncio.get_running_loop().time()),
        )

    @property
    def asked(self) -> int:
        """Audit queries sent so far (for tests and measurements)."""
        return self._answers.asked

    async def fill(self, rows: list[RunRow], wait: float = PAGE_WAIT_SECONDS) -> list[RunRow]:
        """`rows` with the counts of their open runs, as far as known within `wait` seconds; a
        run listed closed is forgotten (its memo has the counts)."""
        self._answers.forget((row.workflow_id, row.run_id) for row in rows if not row.is_open)
        wanted: list[asyncio.Task[None]] = []
        for row in rows:
            if row.is_open:
                key = (row.workflow_id, row.run_id)
                task = self._answers.ask(key, partial(self._audit, key), FRESH_SECONDS)
                if task is not None:
                    wanted.append(task)
        if wanted:
            await asyncio.wait(wanted, timeout=wait)
        return [self._with_counts(row) for row in rows]

    def _with_counts(self, row: RunRow) -> RunRow:
        known = self._answers.get((row.workflow_id, row.run_id)) if row.is_open else None
        if known is None:
            return row
        counts = known.value
        return replace(row, decisions=counts.decisions, tokens=counts.tokens, counts_from="audit")

    async def _audit(self, key: Key) -> Known:
        workflow_id, run_id = key
        handle = AgentHandle(
            self._client, workflow_id, run_id=run_id, worker_wait=QUERY_TIMEOUT_SECONDS
        )
        view = await handle.audit(seconds=QUERY_TIMEOUT_SECONDS)
        return Known(view.counts, view.usage)

    async def stop(self) -> None:
        await self._answers.stop()
