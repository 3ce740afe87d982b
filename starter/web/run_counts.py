"""The decision counts and tokens of the open runs on a runs page. A finished run carries them in
its memo; an open one has no memo yet, so its `audit` query is asked, as the inbox asks its runs'
`status`: concurrently and bounded (`COUNTS_CONCURRENCY` at a time, each at most
`QUERY_TIMEOUT_SECONDS`), the page waiting at most `PAGE_WAIT_SECONDS` for them, the last good
answer of each run kept and used for `FRESH_SECONDS` (one query per run however many people load
the page), a run that did not answer asked again only after `RETRY_SECONDS`. A run whose worker
does not answer is listed without counts, never slower.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

from temporalio.client import Client

from starter.handle import AgentHandle
from starter.runs import RunRow
from workflows.model import AuditCounts, Usage

log = logging.getLogger(__name__)

QUERY_TIMEOUT_SECONDS = 3.0
COUNTS_CONCURRENCY = 8
PAGE_WAIT_SECONDS = 1.0
FRESH_SECONDS = 5.0
RETRY_SECONDS = 10.0
MAX_KNOWN = 2_000
"""The runs whose counts are remembered (the least recently listed are forgotten first)."""

Key = tuple[str, str]


@dataclass(frozen=True)
class Known:
    decisions: AuditCounts
    tokens: Usage
    at: float


class OpenRunCounts:
    """The counts of open runs, asked of each run's `audit` query and kept."""

    def __init__(self, client: Client, clock: Callable[[], float] | None = None) -> None:
        self._client = client
        self._clock = clock or (lambda: asyncio.get_running_loop().time())
        self._known: OrderedDict[Key, Known] = OrderedDict()
        self._retry_at: dict[Key, float] = {}
        self._asking: dict[Key, asyncio.Task[None]] = {}
        self._gate = asyncio.Semaphore(COUNTS_CONCURRENCY)
        self.asked = 0
        """Audit queries sent so far (for tests and measurements)."""

    async def fill(self, rows: list[RunRow], wait: float = PAGE_WAIT_SECONDS) -> list[RunRow]:
        """`rows` with the counts of their open runs, as far as known within `wait` seconds."""
        now = self._clock()
        wanted: list[asyncio.Task[None]] = []
        for row in rows:
            if not row.is_open:
                continue
            key = (row.workflow_id, row.run_id)
            known = self._known.get(key)
            if key in self._known:
                self._known.move_to_end(key)
            fresh = known is not None and now - known.at < FRESH_SECONDS
            if key not in self._asking and not fresh and now >= self._retry_at.get(key, -1e9):
                self._asking[key] = asyncio.create_task(self._ask(key))
            if key in self._asking:
                wanted.append(self._asking[key])
        if wanted:
            await asyncio.wait(wanted, timeout=wait)
        return [self._with_counts(row) for row in rows]

    def _with_counts(self, row: RunRow) -> RunRow:
        known = self._known.get((row.workflow_id, row.run_id)) if row.is_open else None
        if known is None:
            return row
        return replace(row, decisions=known.decisions, tokens=known.tokens, counts_from="audit")

    async def _ask(self, key: Key) -> None:
        workflow_id, run_id = key
        handle = AgentHandle(
            self._client, workflow_id, run_id=run_id, worker_wait=QUERY_TIMEOUT_SECONDS
        )
        try:
            async with self._gate:
                self.asked += 1
                view = await handle.audit(seconds=QUERY_TIMEOUT_SECONDS)
        except Exception as err:  # no worker, an earlier release, closed since: no counts
            log.debug("no audit for %s: %s", workflow_id, err)
            self._retry_at[key] = self._clock() + RETRY_SECONDS
            return
        finally:
            self._asking.pop(key, None)
        self._retry_at.pop(key, None)
        self._known[key] = Known(view.counts, view.usage, self._clock())
        self._known.move_to_end(key)
        while len(self._known) > MAX_KNOWN:
            self._known.popitem(last=False)
        if len(self._retry_at) > MAX_KNOWN:
            self._retry_at.clear()

    async def stop(self) -> None:
        for task in list(self._asking.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
