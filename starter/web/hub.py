"""What the server shares among its viewers, so that the cost to Temporal does not grow with them:

- `Inbox`: one poll loop for every inbox page: a visibility query on the search attributes
  (`AgentStatus="awaiting_approval"`) plus a `status` query per waiting run, about once a second
  while anyone looks at an inbox. Pages read its snapshot, never Temporal.
- `RunWatch`: one live stream subscription per watched run (`starter.live.follow`), whatever the
  number of its viewers. Each subscription holds one of the run's long-poll updates, and a run
  admits only a few of those: answers (`submit_approval`) need the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from starter import live
from starter.inbox import INBOX_QUERY
from workflows import names
from workflows.model import AgentEvent, AgentStatus, ChatMessage, FinishedEvent, ToolCall

log = logging.getLogger(__name__)
T = TypeVar("T")

WAITING_QUERY = INBOX_QUERY
INBOX_POLL_SECONDS = 0.8
INBOX_IDLE_SECONDS = 30.0
"""The inbox stops polling Temporal when nobody looked for this long."""
QUERY_TIMEOUT_SECONDS = 5.0
RETRY_SECONDS = 10.0
"""A run whose `status` query timed out is asked again only after this long."""
QUERY_CONCURRENCY = 16
DETAILS_WAIT_SECONDS = 0.5
"""How long a poll waits for the runs' answers before it lists what it has."""
WATCH_IDLE_SECONDS = 60.0
"""A run's subscription ends when none of its viewers asked for this long."""
FALLBACK_POLL_SECONDS = 1.0


async def _bounded(what: Awaitable[T]) -> T:
    return await asyncio.wait_for(what, QUERY_TIMEOUT_SECONDS)


@dataclass(frozen=True)
class WaitingRun:
    """A run in the inbox: what `starter pending --json` prints, plus the context for people."""

    workflow_id: str
    run_id: str | None
    awaiting_since: datetime | None
    round: int
    pending: list[ToolCall]
    first_user: str
    round_text: str
    first_run_id: str | None = None
    """The first run id of the run's chain, as the page shows it: what an answer carries as
    `run_id`, so that it is refused if another run took this workflow id since."""

    def as_json(self) -> dict[str, Any]:
        return {
            "workflow_id": self.workflow_id,
            "run_id": self.run_id,
            "awaiting_since": self.awaiting_since.isoformat() if self.awaiting_since else None,
            "pending": [c.model_dump(mode="json") for c in self.pending],
        }


def context_of(messages: list[ChatMessage], pending: list[ToolCall]) -> tuple[str, str]:
    """The run's first user message and the assistant's text of the round that asked."""
    first = next((m.content for m in messages if m.role == "user"), "")
    ids = {c.id for c in pending}
    text = ""
    for message in reversed(messages):
        if message.role == "assistant" and any(c.id in ids for c in message.tool_calls or []):
            text = message.content
            break
    return first, text


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
        self._context: dict[tuple[str, str | None, int], tuple[str, str]] = {}
        self._last: dict[tuple[str, str | None], WaitingRun | None] = {}
        """Each listed run's last good details (None: it does not wait for a person)."""
        self._retry_at: dict[tuple[str, str | None], float] = {}
        self._asking: dict[tuple[str, str | None], asyncio.Task[None]] = {}
        self._first_run: dict[tuple[str, str | None], str | None] = {}
        self._gate = asyncio.Semaphore(QUERY_CONCURRENCY)
        self._wanted = asyncio.Event()
        self._poke = asyncio.Event()
        self._fresh_at = -1e9
        self._seen_at = -1e9
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        for task in [self._task, *self._asking.values()]:
            if task:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

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
        executions = [e async for e in self._client.list_workflows(WAITING_QUERY)]
        listed = {(e.id, e.run_id): e for e in executions}
        now = self._clock()
        for key, execution in listed.items():
            if key not in self._asking and now >= self._retry_at.get(key, -1e9):
                self._asking[key] = asyncio.create_task(self._ask(key, execution))
        in_flight = [self._asking[key] for key in listed if key in self._asking]
        if in_flight:
            await asyncio.wait(in_flight, timeout=DETAILS_WAIT_SECONDS)
        self._last = {k: v for k, v in self._last.items() if k in listed}
        self._retry_at = {k: v for k, v in self._retry_at.items() if k in listed}
        self._first_run = {k: v for k, v in self._first_run.items() if k in listed}
        runs = [run for key in listed if (run := self._last.get(key)) is not None]
        live_keys = {(r.workflow_id, r.run_id, r.round) for r in runs}
        self._context = {
            k: v for k, v in self._context.items() if k in live_keys or k[:2] in self._asking
        }
        runs.sort(key=lambda r: r.awaiting_since.timestamp() if r.awaiting_since else 0.0)
        runs.reverse()  # newest wait first
        return runs

    async def _ask(self, key: tuple[str, str | None], execution: WorkflowExecution) -> None:
        """One run's details, into `_last` (None: it no longer waits); on no answer, the last
        good one stays and the run is asked again after RETRY_SECONDS."""
        try:
            async with self._gate:
                run = await self._details(execution)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                self._retry_at[key] = self._clock() + RETRY_SECONDS
                return
            run = None  # it finished between the listing and the query
        except Exception:  # no worker answered in time: keep what was known, ask again later
            self._retry_at[key] = self._clock() + RETRY_SECONDS
            return
        finally:
            self._asking.pop(key, None)
        self._retry_at.pop(key, None)
        if key in self._last and self._last[key] == run:
            return
        self._last[key] = run
        self._poke.set()  # the list changed: show it without waiting for the next poll

    async def _details(self, execution: WorkflowExecution) -> WaitingRun | None:
        handle = self._client.get_workflow_handle(execution.id, run_id=execution.run_id)
        status: AgentStatus = await _bounded(
            handle.query(names.QUERY_STATUS, result_type=AgentStatus)
        )
        if status.phase != "awaiting_approval" or not status.pending_approvals:
            return None
        key = (execution.id, execution.run_id, status.round)
        if key not in self._context:
            try:
                history: list[ChatMessage] = await _bounded(
                    handle.query(names.QUERY_MESSAGES, result_type=list[ChatMessage])
                )
            except Exception:
                history = []
            self._context[key] = context_of(history, status.pending_approvals)
        first, text = self._context[key]
        return WaitingRun(
            execution.id,
            execution.run_id,
            status.awaiting_since,
            status.round,
            status.pending_approvals,
            first,
            text,
            status.run_id or await self._first_run_id(handle, execution),
        )

    async def _first_run_id(
        self, handle: WorkflowHandle[Any, Any], execution: WorkflowExecution
    ) -> str | None:
        """The chain's first run id for a run whose `status` does not say it (asked once)."""
        key = (execution.id, execution.run_id)
        if key not in self._first_run:
            found = execution.raw_info.first_run_id
            if not found:
                description = await _bounded(handle.describe())
                found = description.raw_description.workflow_execution_info.first_run_id
            self._first_run[key] = found or None
        return self._first_run[key]


def _shown(runs: list[WaitingRun]) -> list[tuple[Any, ...]]:
    return [(r.as_json(), r.first_user, r.round_text) for r in runs]


@dataclass
class Piece:
    """A piece of the model's live text; `restart` voids the round's text shown so far."""

    round: int
    text: str
    restart: bool = False


@dataclass
class RunState:
    events: list[dict[str, Any]] = field(default_factory=list)
    pieces: list[Piece] = field(default_factory=list)
    status: AgentStatus | None = None
    messages: list[ChatMessage] = field(default_factory=list)
    closed: str | None = None
    """The run's closed status when it ended without a `finished` event."""


class RunWatch:
    """One run, watched: its events and live text, from one subscription shared by its viewers."""

    def __init__(self, client: Client, workflow_id: str, clock: Callable[[], float]) -> None:
        self.workflow_id = workflow_id
        self.state = RunState()
        self.changes = Changes()
        self.subscriptions = 0
        """Live stream subscriptions this watch holds right now (never more than one)."""
        self.subscriptions_opened = 0
        self._client = client
        self._clock = clock
        self._seen_at = clock()
        self._queue: asyncio.Queue[AgentEvent | Piece | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.done = False
        self.missing = False
        """No run has this workflow id."""
        self.first_run_id: str | None = None
        """The run chain's first run id, when the run's `status` does not say it."""

    @property
    def handle(self) -> WorkflowHandle[Any, Any]:
        return self._client.get_workflow_handle(self.workflow_id)

    def viewed(self) -> None:
        self._seen_at = self._clock()

    def idle(self) -> bool:
        return self._clock() - self._seen_at > WATCH_IDLE_SECONDS

    @property
    def last_seq(self) -> int:
        return int(self.state.events[-1]["seq"]) if self.state.events else -1

    def finished(self) -> bool:
        return self.done

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        try:
            await self._fill()
            await self._refresh()
            if self._ended():
                return
            consumer = asyncio.create_task(self._consume())
            try:
                await self._subscribe()
            finally:
                self._queue.put_nowait(None)
            await consumer  # everything the stream delivered is applied
            if not self._ended():
                await self._poll_until_end()
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
            self.done = True
            self.changes.bump()

    def _ended(self) -> bool:
        return self.state.closed is not None or any(
            e["type"] == "finished" for e in self.state.events[-1:]
        )

    async def _subscribe(self) -> None:
        self.subscriptions += 1
        self.subscriptions_opened += 1
        try:
            await live.follow(
                self._client,
                self.workflow_id,
                on_delta=lambda round_, text: self._queue.put_nowait(Piece(round_, text)),
                on_event=self._queue.put_nowait,
                on_restart=lambda round_: self._queue.put_nowait(Piece(round_, "", True)),
                skip_streamed_text=False,
            )
        except live.StreamEndedError:
            pass
        except Exception as err:  # a worker without the stream: poll the event log instead
            log.info("stream of %s unavailable (%s): polling its events", self.workflow_id, err)
        finally:
            self.subscriptions -= 1

    async def _consume(self) -> None:
        while (item := await self._queue.get()) is not None:
            await self._apply(item)

    async def _apply(self, item: AgentEvent | Piece) -> None:
        if isinstance(item, Piece):
            self.state.pieces.append(item)
            self.changes.bump()
            return
        if item.seq <= self.last_seq:
            return  # already known from the event log
        if item.seq > self.last_seq + 1:
            await self._fill()  # the stream's retained tail began later: the log has the rest
            if item.seq <= self.last_seq:
                return
        self.state.events.append(item.model_dump(mode="json"))
        if self._queue.empty() or isinstance(item, FinishedEvent):
            await self._refresh()
        self.changes.bump()

    async def _fill(self) -> None:
        events: list[AgentEvent] = await _bounded(
            self.handle.query(names.QUERY_EVENTS, self.last_seq, result_type=list[AgentEvent])
        )
        for event in events:
            if event.seq > self.last_seq:
                self.state.events.append(event.model_dump(mode="json"))
        self.changes.bump()

    async def _refresh(self) -> None:
        """The run's status and messages, once for all viewers."""
        try:
            status: AgentStatus = await _bounded(
                self.handle.query(names.QUERY_STATUS, result_type=AgentStatus)
            )
            self.state.status = status
            if status.run_id is None and self.first_run_id is None:
                description = await _bounded(self.handle.describe())
                info = description.raw_description.workflow_execution_info
                self.first_run_id = info.first_run_id or None
            self.state.messages = await _bounded(
                self.handle.query(names.QUERY_MESSAGES, result_type=list[ChatMessage])
            )
        except Exception:
            description = await self.handle.describe()
            if description.status != WorkflowExecutionStatus.RUNNING:
                if not self._ended_by_finished():
                    name = description.status.name if description.status else "CLOSED"
                    self.state.closed = name.lower()
            else:
                raise
        self.changes.bump()

    def _ended_by_finished(self) -> bool:
        return any(e["type"] == "finished" for e in self.state.events[-1:])

    async def _poll_until_end(self) -> None:
        """The stream ended without `finished` (a terminated run), or cannot be read."""
        while not self._ended():
            description = await self.handle.describe()
            if description.status != WorkflowExecutionStatus.RUNNING:
                with contextlib.suppress(Exception):
                    await self._fill()
                if not self._ended_by_finished():
                    name = description.status.name if description.status else "CLOSED"
                    self.state.closed = name.lower()
                self.changes.bump()
                return
            before = self.last_seq
            try:
                await self._fill()
            except Exception:
                await self._refresh()
            if self.last_seq != before:
                await self._refresh()
            await asyncio.sleep(FALLBACK_POLL_SECONDS)


class Watches:
    """Every watched run, at most one RunWatch (so one subscription) each."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._watches: dict[str, RunWatch] = {}
        self._janitor: asyncio.Task[None] | None = None

    def _clock(self) -> float:
        return asyncio.get_running_loop().time()

    def get(self, workflow_id: str) -> RunWatch:
        watch = self._watches.get(workflow_id)
        failed = (
            watch is not None and watch.done and (watch.state.closed or "").startswith("cannot")
        )
        if watch is None or failed:
            watch = RunWatch(self._client, workflow_id, self._clock)
            self._watches[workflow_id] = watch
            watch.start()
        watch.viewed()
        if self._janitor is None:
            self._janitor = asyncio.create_task(self._sweep())
        return watch

    def peek(self, workflow_id: str) -> RunWatch | None:
        return self._watches.get(workflow_id)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(WATCH_IDLE_SECONDS / 4)
            for workflow_id, watch in list(self._watches.items()):
                if watch.idle():
                    del self._watches[workflow_id]
                    await watch.stop()

    async def stop(self) -> None:
        if self._janitor:
            self._janitor.cancel()
        for watch in list(self._watches.values()):
            await watch.stop()
        self._watches.clear()
