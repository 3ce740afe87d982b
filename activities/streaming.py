"""Live model text: `call_llm` publishes the text as it arrives on the workflow's live stream
(`temporalio.contrib.workflow_streams`, topic `deltas`), in batches.

Each batch is one `StreamDelta` item and one signal to the workflow (a few history events), so
the text is coalesced: a batch goes out every `interval` seconds, or earlier once `max_chars`
characters wait. Publishing is best effort: a failed publish is logged and never fails the model
call; after a few failures the publisher gives up for the rest of the call. The messages never
see any of this: they only get the activity's final result.

    async with DeltaPublisher(client, workflow_id, round=3, call="run/7", attempt=1) as live:
        reply = await llm.complete(messages, tools, on_text=live.add)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from types import TracebackType

from temporalio.client import Client
from temporalio.contrib.workflow_streams import TopicHandle, WorkflowStreamClient

from workflows import names
from workflows.model import StreamDelta

logger = logging.getLogger(__name__)

MAX_FAILURES = 3
"""After this many failed flushes in one call, stop publishing (the model call goes on)."""
CLOSE_TIMEOUT_SECONDS = 5.0
"""The longest the last flush may hold up the end of a model call."""
RETRY_SECONDS = 10.0
"""A batch whose signal keeps failing is dropped after this long."""


class DeltaPublisher:
    def __init__(
        self,
        client: Client,
        workflow_id: str,
        *,
        round: int,
        call: str,
        attempt: int = 1,
        interval: float = 0.2,
        max_chars: int = 2_000,
        enabled: bool = True,
    ) -> None:
        self._client = client
        self._workflow_id = workflow_id
        self._round = round
        self._call = call
        self._attempt = attempt
        self._interval = interval
        self._max_chars = max(1, max_chars)
        self._enabled = enabled
        self._pending: list[str] = []
        self._pending_chars = 0
        self._index = 0
        self._failures = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stream: WorkflowStreamClient | None = None
        self._topic: TopicHandle[StreamDelta] | None = None
        self.batches = 0
        """Batches handed to the stream client (for tests and measurements)."""
        self._flushed_live = False

    @property
    def active(self) -> bool:
        return self._enabled and self._stream is not None

    async def __aenter__(self) -> DeltaPublisher:
        if self._enabled:
            try:
                self._stream = WorkflowStreamClient.create(
                    self._client,
                    self._workflow_id,
                    batch_interval=timedelta(seconds=self._interval),
                    max_retry_duration=timedelta(seconds=RETRY_SECONDS),
                )
                self._topic = self._stream.topic(names.STREAM_DELTAS, type=StreamDelta)
            except Exception as err:  # the live view is optional; the model call is not
                logger.warning("live text disabled for this call: %s", err)
                self._enabled = False
            else:
                self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if not self.active or isinstance(exc, asyncio.CancelledError):
            return  # cancelled: nothing more to say, and no time to say it
        if not self._flushed_live:
            # The whole reply came within one flush interval: the round's `text_delta` event
            # follows at once, so publishing it too would only cost a signal and a workflow task.
            return
        self.cut()
        await self._flush(limit=CLOSE_TIMEOUT_SECONDS)

    def add(self, text: str) -> None:
        """Queue a piece of text (sync, never raises, never blocks)."""
        if not self.active or not text:
            return
        self._pending.append(text)
        self._pending_chars += len(text)
        if self._pending_chars >= self._max_chars:
            self.cut()
            self._wake.set()

    def cut(self) -> None:
        """End the current batch: the text queued so far becomes one `StreamDelta` item."""
        if not self._pending or self._topic is None:
            return
        delta = StreamDelta(
            round=self._round,
            call=self._call,
            attempt=self._attempt,
            index=self._index,
            text="".join(self._pending),
        )
        self._pending, self._pending_chars = [], 0
        self._index += 1
        self.batches += 1
        self._topic.publish(delta)

    async def _run(self) -> None:
        while self.active:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self._interval)
            self._wake.clear()
            before = self.batches
            self.cut()
            if self.batches > before:
                self._flushed_live = True
                await self._flush()

    async def _flush(self, limit: float | None = None) -> None:
        if self._stream is None:
            return
        try:
            if limit is None:
                await self._stream.flush()
            else:
                await asyncio.wait_for(self._stream.flush(), timeout=limit)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a failed publish never fails the model call
            self._failures += 1
            logger.warning(
                "publishing live text to %s failed (%d/%d): %s",
                self._workflow_id,
                self._failures,
                MAX_FAILURES,
                err or type(err).__name__,
            )
            if self._failures >= MAX_FAILURES:
                logger.warning("live text for %s stopped for this call", self._workflow_id)
                self._enabled = False
