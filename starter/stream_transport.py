"""How a follower reads a run's workflow stream: two transports, one sequence of wire items.

- live: the stream's long-poll update (`__temporal_workflow_stream_poll`), answered as soon as
  new items exist. Each live follower holds one of the run's in-flight update slots, and
  Temporal admits only a few per run, so the slots must stay free for answers.
- polled: the stream's poll query of the same name: immediate, no update slot, asked again every
  `QUERY_INTERVAL` while nothing is new.

A follower starts live. When the run refuses another long poll (`StreamPollersBusy`), Temporal
refuses the update (RESOURCE_EXHAUSTED) or does not admit it quickly, the follower goes on with
the query, and tries the live transport again after `LIVE_RETRY_SECONDS`. Both transports take
and return the same offsets, so the items, their order and the resume offsets are the same
whichever carried them. Continue-as-new is followed (the handle targets the latest run), and a
closed run's retained items are read to the end before the sequence stops.

With a `Patience` (`starter.patience`), a failure that passes (an update the server aborted, a
cancelled or timed-out request, no worker for a while) is tried again from the same offset after
a pause, for as long as the run is open, so the items still come once each and in order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.contrib.workflow_streams import PollInput, PollResult
from temporalio.service import RPCError

from starter.request_trouble import is_busy

if TYPE_CHECKING:
    from starter.patience import Patience

log = logging.getLogger(__name__)

POLL = "__temporal_workflow_stream_poll"
POLLERS_BUSY = "StreamPollersBusy"
"""The run already serves as many long polls as it admits (the rest stay free for answers)."""
TRUNCATED_OFFSET = "TruncatedOffset"
STREAM_DRAINING = "StreamDraining"

QUERY_INTERVAL = 0.4
"""Seconds between poll queries while nothing is new."""
LIVE_RETRY_SECONDS = 60.0
"""How long a follower stays on the query before it asks for a long poll again."""
ADMIT_SECONDS = 5.0
"""A long poll not admitted within this time counts as refused (the SDK would otherwise retry
an overloaded run's refusals for many seconds while the follower shows nothing)."""
CLOSED_CHECK_SECONDS = 2.0
"""While the query finds nothing new, look this often whether the run has closed."""

_CLOSED = {
    WorkflowExecutionStatus.COMPLETED,
    WorkflowExecutionStatus.FAILED,
    WorkflowExecutionStatus.CANCELED,
    WorkflowExecutionStatus.TERMINATED,
    WorkflowExecutionStatus.TIMED_OUT,
}


def _failure_type(err: WorkflowUpdateFailedError) -> str | None:
    kind = getattr(err.cause, "type", None)
    return kind if isinstance(kind, str) else None


class _Refused(Exception):
    """The live transport is not available now; use the query."""


class StreamReader:
    """The wire items of one run's stream from `offset` on, over whichever transport works
    (`long_poll=False`: the poll query only)."""

    def __init__(
        self,
        client: Client,
        workflow_id: str,
        topics: list[str],
        offset: int,
        *,
        cooldown: timedelta,
        long_poll: bool = True,
        patience: Patience | None = None,
    ) -> None:
        self._client = client
        self._workflow_id = workflow_id
        self._topics = topics
        self.offset = offset
        self._cooldown = cooldown.total_seconds()
        self._latest: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id)
        self._closed_run: WorkflowHandle[Any, Any] | None = None
        self._use_long_poll = long_poll
        self._live_again_at = 0.0
        """Monotonic time from which the live transport is tried again (0: live now)."""
        self._last_closed_check = time.monotonic()
        self._patience = patience
        """Failures that pass are tried again (None: they end the sequence)."""

    @property
    def live(self) -> bool:
        return (
            self._use_long_poll
            and self._closed_run is None
            and time.monotonic() >= self._live_again_at
        )

    async def items(self) -> AsyncIterator[Any]:
        """Yield each wire item (`topic`, `data`, `offset`) in stream order; end after a closed
        run's last retained item."""
        while True:
            result, last = await self._next_batch()
            for item in result.items:
                yield item
            self.offset = result.next_offset
            if last:
                return
            if result.more_ready:
                continue
            pause = self._cooldown if self.live else QUERY_INTERVAL
            if pause > 0:
                await asyncio.sleep(pause)

    async def _next_batch(self) -> tuple[PollResult, bool]:
        """The next batch, and whether it is the last one (the run has closed)."""
        while True:
            if self._closed_run is not None:
                try:
                    result = await self._query(self._closed_run)
                except Exception as err:
                    await self._again(err)
                    continue
                return result, not result.more_ready
            if self.live:
                try:
                    result = await self._long_poll()
                except _Refused:
                    self._live_again_at = time.monotonic() + LIVE_RETRY_SECONDS
                    continue
                except Exception as err:
                    await self._again(err)
                    continue
                self._worked()
                return result, False
            polled = await self._polled_batch()
            if polled is not None:
                return polled, False

    async def _again(self, err: Exception) -> None:
        """A failed request: raised, unless it may pass (then a pause before the next try)."""
        if self._patience is None or not self._patience.transient(err):
            raise err
        await self._patience.pause(err)

    def _worked(self) -> None:
        if self._patience is not None:
            self._patience.ok()

    async def _long_poll(self) -> PollResult:
        polled_run: str | None = None
        try:
            handle = await asyncio.wait_for(
                self._latest.start_update(
                    POLL,
                    PollInput(topics=self._topics, from_offset=self.offset),
                    wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                    result_type=PollResult,
                ),
                ADMIT_SECONDS,
            )
            polled_run = handle.workflow_run_id
            result: PollResult = await handle.result()
            return result
        except TimeoutError:
            log.debug("long poll of %s not admitted in time: using the query", self._workflow_id)
            raise _Refused() from None
        except WorkflowUpdateFailedError as err:
            kind = _failure_type(err)
            if kind == POLLERS_BUSY:
                log.debug("%s serves enough long polls: using the query", self._workflow_id)
                raise _Refused() from None
            if kind == TRUNCATED_OFFSET:
                self.offset = 0  # the retained items start later; the stream says where
                return PollResult(next_offset=0, more_ready=True)
            if kind == STREAM_DRAINING:  # continue-as-new under way: poll the next run
                return PollResult(next_offset=self.offset)
            failure: Exception = err
        except RPCError as err:
            if is_busy(err):
                log.debug("update refused for %s: using the query", self._workflow_id)
                raise _Refused() from None
            failure = err
        except WorkflowUpdateRPCTimeoutOrCancelledError as err:
            failure = err
        if await self._run_has_moved_on(polled_run):
            return PollResult(next_offset=self.offset, more_ready=True)
        raise failure

    async def _polled_batch(self) -> PollResult | None:
        """One poll query of the latest run; None when there was nothing to read yet (the run
        closed meanwhile, or the query could not be answered this time)."""
        try:
            result = await self._query(self._latest)
        except WorkflowQueryFailedError:
            raise  # the run has no stream (or it failed): the caller falls back
        except RPCError as err:
            if await self._run_has_moved_on(None):
                return None
            log.debug("poll query of %s failed (%s): retrying", self._workflow_id, err)
            if self._patience is not None:
                await self._again(err)
            else:
                await asyncio.sleep(QUERY_INTERVAL)
            return None
        self._worked()
        if result.items or result.more_ready:
            self._last_closed_check = time.monotonic()
            return result
        if time.monotonic() - self._last_closed_check >= CLOSED_CHECK_SECONDS:
            self._last_closed_check = time.monotonic()
            if await self._run_has_moved_on(None):
                return None
        return result

    async def _query(self, handle: WorkflowHandle[Any, Any]) -> PollResult:
        result: PollResult = await handle.query(
            POLL, PollInput(topics=self._topics, from_offset=self.offset), result_type=PollResult
        )
        return result

    async def _run_has_moved_on(self, polled_run: str | None) -> bool:
        """After a failed poll: True when the run continued as new (follow the next one) or
        closed (read what it retained, then stop); False when it still runs."""
        handle = (
            self._client.get_workflow_handle(self._workflow_id, run_id=polled_run)
            if polled_run
            else self._latest
        )
        try:
            description = await handle.describe()
        except RPCError as err:
            if self._patience is not None:
                self._patience.server_failed(err)  # raises when the run or the server is gone
            return False
        if self._patience is not None:
            self._patience.server_answered()
        if description.status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
            self._latest = self._client.get_workflow_handle(self._workflow_id)
            return True
        if description.status in _CLOSED and description.run_id:
            self._closed_run = self._client.get_workflow_handle(
                self._workflow_id, run_id=description.run_id
            )
            return True
        return False
