"""The runs this worker process holds that wait for a person: one registry per process.

`workflows.metrics` imports it through the sandbox's pass-through, so every run of the process
(each in its own sandbox, with its own copies of the modules it imports) shares this one object,
and the gauge it sets is the worker's, bound by the plugin. No Temporal import: it is plain state.
"""

from __future__ import annotations

import threading
from typing import Protocol


class Gauge(Protocol):
    def set(self, value: int) -> None: ...


class WaitingRuns:
    """Run ids by (namespace, task queue), and the gauge that shows how many there are."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], set[str]] = {}
        self._gauges: dict[tuple[str, str], Gauge] = {}

    def bind(self, namespace: str, task_queue: str, gauge: Gauge) -> None:
        """Show the count of (namespace, task_queue) on `gauge` from now on."""
        key = (namespace, task_queue)
        with self._lock:
            self._gauges[key] = gauge
            gauge.set(len(self._runs.get(key, ())))

    def mark(self, namespace: str, task_queue: str, run_id: str, waiting: bool) -> None:
        """The run waits for a person (or no longer does); the gauge follows."""
        key = (namespace, task_queue)
        with self._lock:
            runs = self._runs.setdefault(key, set())
            if waiting == (run_id in runs):
                return
            if waiting:
                runs.add(run_id)
            else:
                runs.discard(run_id)
            gauge = self._gauges.get(key)
            if gauge is not None:  # None: a worker the plugin did not configure (no gauge)
                gauge.set(len(runs))

    def count(self, namespace: str, task_queue: str) -> int:
        with self._lock:
            return len(self._runs.get((namespace, task_queue), ()))

    def total(self) -> int:
        """Every run this process counts as waiting, on any queue."""
        with self._lock:
            return sum(len(runs) for runs in self._runs.values())


WAITING_RUNS = WaitingRuns()
