"""Following one run, for every client: `watch` yields what happens in a run, in order, once
each, and ends with one `Ended`.

It reads the run's live stream (`starter.live`: the events and the model's text as it is
generated) and, when the stream ends without a `finished` event (a run that was terminated) or
cannot be read at all (a worker without the stream), the durable event log (the `events` query)
until the run closes. Events carry gap-free sequence numbers across continue-as-new, so an
event is passed on exactly once: one the stream repeats is skipped, and when the stream's
retained tail begins later than the follower is, the log fills the gap first.

    async with contextlib.aclosing(watch(client, workflow_id)) as items:
        async for item in items:
            ...  # Text, Streamed, Restart, an AgentEvent, Quiet, and last Ended

The command line prints these and asks a person at a terminal (`starter.follow`); the web
inbox keeps them for every viewer of the run (`starter.web.hub`). `Quiet` comes after a while
without anything new, so a follower can look at the run (is a session waiting for a message?).

A failure that passes (an aborted update, a cancelled request, a slow answer, a worker away for a
restart) never ends following while the run is open: it is tried again, from where following
was, after a pause that grows, and the caller's `Patience` says so once if it lasts
(`starter.patience`). Following ends with the run (its last events from its history), or when
the server is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from starter import live
from starter.handle import AgentHandle
from starter.patience import Patience
from workflows.model import AgentEvent, BaseEvent, FinishedEvent, FinishReason, TextDeltaEvent

log = logging.getLogger(__name__)

T = TypeVar("T")

POLL_SECONDS = 0.25
"""How often the event log is read while the stream cannot be."""
QUIET_SECONDS = 1.5
"""After this long without anything new, `Quiet` is yielded."""


@dataclass(frozen=True)
class Text:
    """A piece of the model's text as it is generated (the live view only; the durable record
    is the round's `text_delta` event)."""

    round: int
    text: str


@dataclass(frozen=True)
class Streamed:
    """The model's reply whose text the `Text` pieces gave is complete: its `text_delta` event
    (`seq`), left out (`skip_streamed_text`), with the text it holds (a preview, as events do)."""

    seq: int
    round: int
    text: str


@dataclass(frozen=True)
class Restart:
    """The model call of `round` started again (its earlier attempt was cut off): the text
    shown for it since its last `text_delta` event is void."""

    round: int


@dataclass(frozen=True)
class Quiet:
    """Nothing new for a while; `last_seq` is the last event passed on."""

    last_seq: int


@dataclass(frozen=True)
class Ended:
    """How following ended: the run's finish reason after its `finished` event, or, when it
    closed without one (terminated, failed, timed out), Temporal's status in `closed_status`."""

    finish_reason: FinishReason | None
    last_seq: int
    closed_status: str | None = None
    reason: str | None = None
    """With `closed_status`: why Temporal closed the run, when its history says (a failure's
    message, a termination's reason)."""


Item = Text | Streamed | Restart | AgentEvent | Quiet | Ended


async def watch(
    client: Client,
    workflow_id: str,
    *,
    after: int = -1,
    stream: bool = True,
    skip_streamed_text: bool = True,
    long_poll: bool = True,
    quiet_seconds: float = QUIET_SECONDS,
    patience: Patience | None = None,
) -> AsyncGenerator[Item, None]:
    """Everything that happens in run `workflow_id` after event `after`, in order.

    - `stream=False`: read the event log only (no live text).
    - `skip_streamed_text`: leave out a `text_delta` event whose text the `Text` pieces
      already gave (a terminal that printed the pieces): a `Streamed` item comes in its place.
    - `long_poll=False`: read the stream through its poll query only (no update slot).
    - `patience`: how failures that pass are ridden through, and who is told when they last
      (the caller's, when it asks the run things of its own between items).
    """
    handle = AgentHandle(client, workflow_id)
    patience = patience or Patience()
    last = after
    if await _closed(handle, patience) is not None:  # a closed run: its history says it all
        async with contextlib.aclosing(_from_history(handle, after)) as items:
            async for item in items:
                yield item
        return
    if stream:
        async with contextlib.aclosing(
            _from_stream(
                client, handle, after, skip_streamed_text, long_poll, quiet_seconds, patience
            )
        ) as items:
            async for item in items:
                if isinstance(item, BaseEvent | Streamed):
                    last = item.seq
                yield item
                if isinstance(item, Ended):
                    return
    async with contextlib.aclosing(_from_log(handle, last, quiet_seconds, patience)) as items:
        async for item in items:
            yield item


async def _from_stream(
    client: Client,
    handle: AgentHandle,
    after: int,
    skip_streamed_text: bool,
    long_poll: bool,
    quiet_seconds: float,
    patience: Patience,
) -> AsyncGenerator[Item, None]:
    """The stream's items until `finished` (then `Ended`), or until the stream ends without it
    or cannot be read (then nothing more: the caller reads the log)."""
    queue: asyncio.Queue[Item] = asyncio.Queue()
    subscription = asyncio.create_task(
        live.follow(
            client,
            handle.id,
            on_delta=lambda round_, text: queue.put_nowait(Text(round_, text)),
            on_event=queue.put_nowait,
            on_restart=lambda round_: queue.put_nowait(Restart(round_)),
            skip_streamed_text=skip_streamed_text,
            on_skip=lambda event: queue.put_nowait(_streamed(event)),
            long_poll=long_poll,
            patience=patience,
        )
    )
    last = after
    try:
        while True:
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait(
                {getter, subscription}, timeout=quiet_seconds, return_when=asyncio.FIRST_COMPLETED
            )
            if getter not in done:
                getter.cancel()
                if subscription.done() and queue.empty():
                    _log_end(handle.id, subscription)
                    return
                yield Quiet(last)
                continue
            item = getter.result()
            if not isinstance(item, BaseEvent | Streamed):
                yield item
                continue
            if item.seq <= last:
                continue  # retained from before `after`, or already filled from the log
            if item.seq > last + 1:  # the stream's retained tail begins later: the log first
                missed = await _patiently(handle, patience, partial(handle.events, last))
                if missed is None:
                    return  # it closed meanwhile: the caller reads the rest from its history
                for missing in missed:
                    if missing.seq >= item.seq:
                        break
                    yield missing
                    last = missing.seq
                    if isinstance(missing, FinishedEvent):
                        yield Ended(missing.finish_reason, last)
                        return
            yield item
            last = item.seq
            if isinstance(item, FinishedEvent):
                yield Ended(item.finish_reason, last)
                return
    finally:
        subscription.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await subscription


def _streamed(event: AgentEvent) -> Streamed:
    delta = event.delta if isinstance(event, TextDeltaEvent) else ""
    return Streamed(event.seq, event.round, delta)


def _log_end(workflow_id: str, subscription: asyncio.Task[FinishReason]) -> None:
    error = subscription.exception() if not subscription.cancelled() else None
    if isinstance(error, live.StreamEndedError):
        log.debug("the stream of %s ended without 'finished': reading its event log", workflow_id)
    elif error is not None:  # e.g. a worker without the stream
        log.info("stream of %s unavailable (%s): reading its event log", workflow_id, error)


async def _from_history(
    handle: AgentHandle, after: int, closed: WorkflowExecutionStatus | None = None
) -> AsyncGenerator[Item, None]:
    """A closed run's events from `after` on, read from its history (`AgentHandle.record`),
    then `Ended`: its finish reason, or how and why Temporal closed it."""
    record = await handle.record()
    last = after
    if record is None:  # its history cannot be read here: say how it closed
        yield _closed_without_finish(handle.id, closed or WorkflowExecutionStatus.TERMINATED, last)
        return
    for event in record.events:
        if event.seq <= last:
            continue
        yield event
        last = event.seq
        if isinstance(event, FinishedEvent):
            yield Ended(event.finish_reason, last)
            return
    log.debug("run %s closed without a finished event: %s", handle.id, record.closed)
    yield Ended(None, last, record.closed.upper(), record.failure)


async def _from_log(
    handle: AgentHandle, after: int, quiet_seconds: float, patience: Patience
) -> AsyncGenerator[Item, None]:
    """The event log from `after` until `finished`, or until the run closed without it (then
    the rest from its history)."""
    last = after
    quiet_since = asyncio.get_running_loop().time()
    while True:
        try:
            batch = await handle.events(last)
        except Exception as err:
            closed = await _closed(handle, patience)
            if closed is None:
                if not patience.transient(err):
                    raise
                await patience.pause(err)
                continue
            async with contextlib.aclosing(_from_history(handle, last, closed)) as rest:
                async for item in rest:
                    yield item
            return
        patience.ok()
        for event in batch:
            yield event
            last = event.seq
            if isinstance(event, FinishedEvent):
                yield Ended(event.finish_reason, last)
                return
        loop = asyncio.get_running_loop()
        if batch:
            quiet_since = loop.time()
        elif loop.time() - quiet_since >= quiet_seconds:
            quiet_since = loop.time()
            closed = await _closed(handle, patience)
            if closed is not None:
                # The finished event may have landed just before the close: the rest from its
                # history.
                async with contextlib.aclosing(_from_history(handle, last, closed)) as rest:
                    async for item in rest:
                        yield item
                return
            yield Quiet(last)
        await asyncio.sleep(POLL_SECONDS)


async def _closed(handle: AgentHandle, patience: Patience) -> WorkflowExecutionStatus | None:
    """The run's status once it has closed; None while it runs (or while the server does not
    answer: `patience` raises once the run or the server is gone)."""
    try:
        description = await handle.describe()
    except RPCError as err:
        patience.server_failed(err)
        return None
    patience.server_answered()
    if description.status == WorkflowExecutionStatus.RUNNING:
        return None
    return description.status or WorkflowExecutionStatus.TERMINATED


async def _patiently(
    handle: AgentHandle, patience: Patience, ask: Callable[[], Awaitable[T]]
) -> T | None:
    """`ask()`'s answer, asked again after each failure that passes; None once the run closed."""
    while True:
        try:
            answer = await ask()
        except Exception as err:
            if await _closed(handle, patience) is not None:
                return None
            if not patience.transient(err):
                raise
            await patience.pause(err)
            continue
        patience.ok()
        return answer


def _closed_without_finish(workflow_id: str, status: WorkflowExecutionStatus, last: int) -> Ended:
    log.debug("run %s closed without a finished event: %s", workflow_id, status.name)
    return Ended(None, last, status.name)
