"""The last good answer of one query per run, for the views the server shares among its viewers
(`hub.Inbox` asks each waiting run's `status`, `run_counts.OpenRunCounts` each open run's
`audit`): asked in the background, `concurrency` at a time, a run that did not answer asked again
only after `retry_seconds`, and at most `size` runs remembered (the least recently asked are
forgotten first; a run that closed or left the list is forgotten at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
Key = tuple[str, str]
"""A run: its workflow id and run id."""


@dataclass(frozen=True)
class Answer(Generic[T]):
    value: T
    at: float


@dataclass
class _Entry(Generic[T]):
    answer: Answer[T] | None = None
    retry_at: float = float("-inf")
    asking: asyncio.Task[None] | None = None


class RunAnswers(Generic[T]):
    """One entry per run: its last good answer, when to ask again after no answer, and the
    query in flight."""

    def __init__(
        self,
        *,
        size: int,
        concurrency: int,
        retry_seconds: float,
        clock: Callable[[], float],
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._entries: OrderedDict[Key, _Entry[T]] = OrderedDict()
        self._size = size
        self._retry_seconds = retry_seconds
        self._clock = clock
        self._on_change = on_change
        self._gate = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self.asked = 0
        """Queries sent so far (for tests and measurements)."""

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Key) -> Answer[T] | None:
        entry = self._entries.get(key)
        return None if entry is None else entry.answer

    def asking(self, key: Key) -> bool:
        entry = self._entries.get(key)
        return entry is not None and entry.asking is not None

    def ask(
        self, key: Key, query: Callable[[], Awaitable[T]], fresh_for: float = 0.0
    ) -> asyncio.Task[None] | None:
        """The query in flight for `key`: a new one unless one is already, the last answer is
        younger than `fresh_for` seconds, or the run did not answer less than `retry_seconds`
        ago (then None)."""
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)
        now = self._clock()
        fresh = entry.answer is not None and now - entry.answer.at < fresh_for
        if entry.asking is None and not fresh and now >= entry.retry_at:
            entry.asking = task = asyncio.create_task(self._ask(key, entry, query))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return entry.asking

    async def _ask(self, key: Key, entry: _Entry[T], query: Callable[[], Awaitable[T]]) -> None:
        try:
            async with self._gate:
                self.asked += 1
                value = await query()
        except Exception as err:  # no worker, closed since: keep what was
            log.debug("no answer from %s: %s", key[0], err)
            entry.retry_at = self._clock() + self._retry_seconds
            return
        finally:
            entry.asking = None
        entry.retry_at = float("-inf")
        changed = entry.answer is None or entry.answer.value != value
        entry.answer = Answer(value, self._clock())
        if changed and self._on_change is not None:
            self._on_change()

    def forget(self, keys: Iterable[Key]) -> None:
        """Forget these runs (closed): their answers are of no use any more."""
        for key in keys:
            self._entries.pop(key, None)

    def keep_only(self, keys: Iterable[Key]) -> None:
        """Forget every run but these (the ones still listed)."""
        kept = set(keys)
        self.forget([key for key in self._entries if key not in kept])

    async def stop(self) -> None:
        """Cancel the queries in flight (of forgotten runs too)."""
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
