"""What the server shares among its viewers, so that the cost to Temporal does not grow with them:

- `Inbox`: one poll loop for every inbox page around the one waiting-runs listing
  (`starter.inbox`): the visibility query, then each run's details, asked concurrently and in
  the background, each bounded, keeping the last good answer of a run whose worker does not
  answer. About once a second while anyone looks at an inbox; pages read its snapshot, never
  Temporal.
- `RunWatch`: one follower per watched run (`starter.watch`), whatever the number of its
  viewers. Its live stream subscription holds one of the run's long-poll updates, and a run
  admits only a few of those: answers (`submit_approval`) need the rest. It rides through
  failures that pass (`starter.patience`) while the run is open: its page says so in one line
  (`RunState.trouble`) while they last.

Events stay the workflow's typed models here; they become JSON at the HTTP edge.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from starter.handle import AgentHandle
from starter.inbox import (
    Context,
    RunGone,
    WaitingRun,
    context_of,
    details,
    list_waiting,
    newest_wait_first,
    unavailable,
    waits_for_person,
)
from starter.patience import Patience
from starter.record import RunRecord
from starter.request_trouble import NoWorker
from starter.watch import Ended, Quiet, Restart, Streamed, Text, watch
from starter.web.run_answers import Key, RunAnswers
from workflows.model import AgentEvent, AgentStatus, AuditView, ChatMessage, FinishedEvent

log = logging.getLogger(__name__)

INBOX_POLL_SECONDS = 0.8
INBOX_IDLE_SECONDS = 30.0
"""The inbox stops polling Temporal when nobody looked for this long."""
QUERY_TIMEOUT_SECONDS = 5.0
RETRY_SECONDS = 10.0
"""A run whose `status` query timed out is asked again only after this long."""
QUERY_CONCURRENCY = 16
MAX_RUNS = 2_000
"""The waiting runs whose details are remembered (the least recently listed are forgotten)."""
DETAILS_WAIT_SECONDS = 0.5
"""How long a poll waits for the runs' answers before it lists what it has."""
WATCH_IDLE_SECONDS = 60.0
"""A run's subscription ends when none of its viewers asked for this long."""


class Changes:
    """A version number and a way to wait for it to move."""

    def __init__(self) -> None:
        self.version = 0
        self._event = asyncio.Event()

    def bump(self) -> None:
        self.version += 1
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, seen: int, seconds: float) -> None:
        if self.version != seen:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), seconds)


class Inbox:
    """The shared poll behind every inbox page and `GET /api/pending`."""

    def __init__(self, client: Client, clock: Callable[[], float] | None = None) -> None:
        self._client = client
        self._clock = clock or (lambda: asyncio.get_running_loop().time())
        self.runs: list[WaitingRun] = []
        self.changes = Changes()
        """Moves when the list changes."""
        self.polled = Changes()
        """Moves after every poll."""
        self.polls = 0
        self.error: str | None = None
        self._wanted = asyncio.Event()
        self._poke = asyncio.Event()
        self._answers: RunAnswers[WaitingRun | None] = RunAnswers(
            size=MAX_RUNS,
            concurrency=QUERY_CONCURRENCY,
            retry_seconds=RETRY_SECONDS,
            clock=self._clock,
            on_change=self._poke.set,  # the list changed: show it without waiting for a poll
        )
        """Each listed run's last good details (None: it does not wait for a person)."""
        self._context: dict[tuple[str, str, int | None], Context] = {}
        self._fresh_at = -1e9
        self._seen_at = -1e9
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._answers.stop()

    def viewed(self) -> None:
        self._seen_at = self._clock()
        self._wanted.set()

    def poke(self) -> None:
        """Poll again now (an answer was given here)."""
        self._poke.set()
        self.viewed()

    async def fresh(
        self, max_age: float = INBOX_POLL_SECONDS, patience: float = QUERY_TIMEOUT_SECONDS * 2
    ) -> list[WaitingRun]:
        """The snapshot, at most `max_age` old: when older, waits for the next poll (at most
        `patience` seconds, then the snapshot as it is)."""
        self.viewed()
        if self._clock() - self._fresh_at > max_age:
            seen = self.polled.version
            self._poke.set()
            await self.polled.wait(seen, patience)
        return self.runs

    async def _loop(self) -> None:
        while True:
            if self._clock() - self._seen_at > INBOX_IDLE_SECONDS:
                self._wanted.clear()
                await self._wanted.wait()
            try:
                runs = await self._poll()
                self.error = None
            except Exception as err:  # Temporal unreachable: keep the last list, say why
                log.warning("inbox poll failed: %s", err)
                self.error = f"cannot list waiting runs: {type(err).__name__}: {err}"
                runs = self.runs
            self.polls += 1
            self._fresh_at = self._clock()
            if _shown(runs) != _shown(self.runs):
                self.runs = runs
                self.changes.bump()
            self.polled.bump()
            self._poke.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), INBOX_POLL_SECONDS)

    async def _poll(self) -> list[WaitingRun]:
        """List the waiting runs, ask each for its details concurrently, and wait for the
        answers at most DETAILS_WAIT_SECONDS: a run whose worker does not answer is asked in
        the background (each query bounded) and keeps its last good answer meanwhile, so it
        never holds up the list for the others."""
        listed = {(e.id, e.run_id): e for e in await list_waiting(self._client)}
        asked = (self._answers.ask(key, partial(self._details, e)) for key, e in listed.items())
        in_flight = [task for task in asked if task is not None]
        if in_flight:
            await asyncio.wait(in_flight, timeout=DETAILS_WAIT_SECONDS)
        self._answers.keep_only(listed)
        runs = [self._known(key, execution) for key, execution in listed.items()]
        shown = [run for run in runs if run is not None]
        live = {(r.workflow_id, r.run_id, r.round) for r in shown}
        self._context = {
            k: v for k, v in self._context.items() if k in live or self._answers.asking(k[:2])
        }
        return newest_wait_first(shown)

    def _known(self, key: Key, execution: WorkflowExecution) -> WaitingRun | None:
        """The run's last good details, or the run without them until its worker answers."""
        known = self._answers.get(key)
        return unavailable(execution) if known is None else known.value

    async def _details(self, execution: WorkflowExecution) -> WaitingRun | None:
        """One run's details (None: it no longer waits). When no worker answers in time, this
        raises: the last good answer stays and the run is asked again after RETRY_SECONDS."""
        try:
            run = await details(
                self._client,
                execution,
                seconds=QUERY_TIMEOUT_SECONDS,
                with_context=self._context_missing(execution),
            )
        except RunGone:
            return None  # it finished between the listing and the query
        return self._with_context(run)

    def _context_missing(self, execution: WorkflowExecution) -> bool:
        """Whether this run's context is to be asked for (once per run and round)."""
        answer = self._answers.get((execution.id, execution.run_id))
        known = None if answer is None else answer.value
        return known is None or (execution.id, execution.run_id, known.round) not in self._context

    def _with_context(self, run: WaitingRun | None) -> WaitingRun | None:
        """The run with the context of its round, kept from an earlier answer when it did not
        come with this one."""
        if run is None:
            return None
        key = (run.workflow_id, run.run_id, run.round)
        if run.context is not None:
            self._context[key] = run.context
            return run
        known = self._context.get(key)
        if known is None:
            return run
        return WaitingRun(
            run.workflow_id, run.run_id, run.pending_count, run.status, run.first_run_id, known
        )


def _shown(runs: list[WaitingRun]) -> list[tuple[Any, ...]]:
    return [(r.as_json(), r.first_user, r.round_text, r.first_run_id) for r in runs]


@dataclass
class Piece:
    """A piece of the model's live text; `restart` voids the round's text shown so far."""

    round: int
    text: str
    restart: bool = False


@dataclass
class RunState:
    events: list[AgentEvent] = field(default_factory=list)
    pieces: list[Piece] = field(default_factory=list)
    status: AgentStatus | None = None
    messages: list[ChatMessage] = field(default_factory=list)
    closed: str | None = None
    """The run's closed status when it ended without a `finished` event."""
    audit: AuditView | None = None
    """Every decision of the run so far (its `audit` query), the last good answer."""
    audit_error: str | None = None
    """Why the last `audit` query got no answer."""
    trouble: str | None = None
    """While following has been failing for a while (it goes on): what the page says of it."""


class RunWatch:
    """One run, watched: its events and live text, from one follower shared by its viewers."""

    def __init__(self, client: Client, workflow_id: str, clock: Callable[[], float]) -> None:
        self.workflow_id = workflow_id
        self.state = RunState()
        self.changes = Changes()
        self._client = client
        self._handle = AgentHandle(client, workflow_id, worker_wait=QUERY_TIMEOUT_SECONDS)
        self._clock = clock
        self._seen_at = clock()
        self._task: asyncio.Task[None] | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._refresh_wanted = asyncio.Event()
        self.done = False
        self.missing = False
        """No run has this workflow id."""
        self.first_run_id: str | None = None
        """The run chain's first run id, as the page shows it (what an answer carries)."""
        self._patience = Patience(on_notice=self._trouble)

    def _trouble(self, line: str | None) -> None:
        self.state.trouble = line
        self.changes.bump()

    def viewed(self) -> None:
        self._seen_at = self._clock()

    def idle(self) -> bool:
        return self._clock() - self._seen_at > WATCH_IDLE_SECONDS

    @property
    def last_seq(self) -> int:
        return self.state.events[-1].seq if self.state.events else -1

    @property
    def waiting(self) -> WaitingRun | None:
        """The run as an inbox entry while it waits for a person, else None."""
        status = self.state.status
        if self.state.closed or status is None or not waits_for_person(status):
            return None
        return WaitingRun(
            self.workflow_id,
            "",
            len(status.pending_approvals) + len(status.pending_questions),
            status,
            status.run_id or self.first_run_id,
            context_of(self.state.messages, status.pending_approvals),
        )

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        for task in (self._task, self._refresher):
            if task:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _run(self) -> None:
        try:
            if self._take(await self._handle.record()):
                return  # a closed run: all of it from its history at once, no worker needed
            await self._refresh_or_later()  # the first look, for the first page
            self._refresher = asyncio.create_task(self._refresh_when_wanted())
            items = watch(
                self._client,
                self.workflow_id,
                skip_streamed_text=False,
                patience=self._patience,
            )
            async with contextlib.aclosing(items):
                async for item in items:
                    if isinstance(item, Text):
                        self.state.pieces.append(Piece(item.round, item.text))
                    elif isinstance(item, Restart):
                        self.state.pieces.append(Piece(item.round, "", True))
                    elif isinstance(item, Quiet | Streamed):
                        continue  # (no Streamed: the page takes every text_delta event)
                    elif isinstance(item, Ended):
                        if item.closed_status is not None:
                            self.state.closed = item.closed_status.lower()
                        await self._refresh_or_later()
                    else:
                        self.state.events.append(item)
                        self._refresh_wanted.set()
                        if isinstance(item, FinishedEvent):
                            await self._refresh_or_later()
                    self.changes.bump()
        except asyncio.CancelledError:
            raise
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                self.missing = True
            self.state.closed = self.state.closed or f"cannot watch: {err.message}"
        except Exception as err:  # Temporal or the worker does not answer: the page says so
            log.warning("watching %s failed: %s", self.workflow_id, err)
            self.state.closed = self.state.closed or f"cannot watch: {type(err).__name__}"
        finally:
            if self._refresher:
                self._refresher.cancel()
            self.done = True
            self.changes.bump()

    async def _refresh_when_wanted(self) -> None:
        """Refresh the status and messages after new events, one refresh at a time however
        many events arrive meanwhile; one that failed is tried again after a pause."""
        while True:
            await self._refresh_wanted.wait()
            self._refresh_wanted.clear()
            await self._refresh_or_later()
            self.changes.bump()

    async def _refresh_or_later(self) -> None:
        """`_refresh`; when the run does not answer now, the refresher asks again after a pause
        (the page keeps what it knew meanwhile)."""
        try:
            await self._refresh()
        except Exception as err:
            log.debug("refreshing %s failed: %s", self.workflow_id, err)
            if not self._patience.transient(err):
                return  # the next event asks again
            await self._patience.pause(err)
            self._refresh_wanted.set()

    async def _refresh(self) -> None:
        """The run's status, messages and audit, once for all viewers. A run that closed
        without its worker answering keeps what was known, with its closed status."""
        try:
            status = await self._handle.status()
            if status.run_id is None and self.first_run_id is None:
                self.first_run_id = await self._handle.first_run_id()
            messages = await self._handle.messages()
        except Exception:
            description = await self._handle.describe()
            if description.status == WorkflowExecutionStatus.RUNNING:
                raise
            if self._take(await self._handle.record(), events=False):
                return  # the events come from the follower
            if not any(isinstance(e, FinishedEvent) for e in self.state.events[-1:]):
                name = description.status.name if description.status else "CLOSED"
                self.state.closed = name.lower()
            return
        audit, audit_error = await self._read_audit()
        self.state.status, self.state.messages = status, messages
        self.state.audit = audit or self.state.audit
        self.state.audit_error = audit_error

    def _take(self, record: RunRecord | None, *, events: bool = True) -> bool:
        """A closed run's record (`AgentHandle.record`) as the page's state (its events too,
        unless the follower brings them); False without one."""
        if record is None:
            return False
        state = self.state
        state.status, state.messages = record.status, record.messages
        if events:
            state.events = list(record.events)
        state.audit, state.audit_error = record.audit, None
        if not any(isinstance(e, FinishedEvent) for e in record.events[-1:]):
            state.closed = record.closed
        self.first_run_id = self.first_run_id or record.status.run_id
        return True

    async def _read_audit(self) -> tuple[AuditView | None, str | None]:
        """The run's decisions, or why there are none: asked apart, so a run whose worker cannot
        answer the `audit` query still shows its phase and conversation."""
        try:
            return await self._handle.audit(), None
        except Exception as err:
            log.debug("no audit for %s: %s", self.workflow_id, err)
            return None, audit_unavailable(err)


def audit_unavailable(err: Exception) -> str:
    """Why a run's audit could not be read, for people."""
    if isinstance(err, WorkflowQueryFailedError):
        return f"this run cannot answer the audit query: {err}"
    if isinstance(err, NoWorker):
        return "no worker answered the audit query in time"
    return f"cannot read the audit: {type(err).__name__}"


class Watches:
    """Every watched run, at most one RunWatch (so one subscription) each."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._watches: dict[str, RunWatch] = {}
        self._janitor: asyncio.Task[None] | None = None

    def _clock(self) -> float:
        return asyncio.get_running_loop().time()

    def get(self, workflow_id: str) -> RunWatch:
        watch_ = self._watches.get(workflow_id)
        failed = (
            watch_ is not None and watch_.done and (watch_.state.closed or "").startswith("cannot")
        )
        if watch_ is None or failed:
            watch_ = RunWatch(self._client, workflow_id, self._clock)
            self._watches[workflow_id] = watch_
            watch_.start()
        watch_.viewed()
        if self._janitor is None:
            self._janitor = asyncio.create_task(self._sweep())
        return watch_

    def peek(self, workflow_id: str) -> RunWatch | None:
        return self._watches.get(workflow_id)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(WATCH_IDLE_SECONDS / 4)
            for workflow_id, watch_ in list(self._watches.items()):
                if watch_.idle():
                    del self._watches[workflow_id]
                    await watch_.stop()

    async def stop(self) -> None:
        if self._janitor:
            self._janitor.cancel()
        for watch_ in list(self._watches.values()):
            await watch_.stop()
        self._watches.clear()
