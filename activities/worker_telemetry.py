"""What the agent's plugin adds to every client and worker for operators.

- Every worker: `RunTracking` (the gauge of runs waiting for a person learns when a run's
  execution ends on the worker) and the gauge itself, bound to the meter of the worker's
  runtime (`workflows.metrics`).
- With traces exported (`runtime.tracing`): the tracing interceptor on a client connected with
  the plugin, and on a worker whose client has none, so every worker traces exactly once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.worker import Interceptor

from runtime.tracing import client_interceptors, tracing_on
from workflows.metrics import RunTracking, bind_waiting_gauge


def _traces(interceptors: Sequence[Any]) -> bool:
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return any(isinstance(i, TracingInterceptor) for i in interceptors)


def with_client_tracing(interceptors: Sequence[Any]) -> list[Any]:
    """A client's interceptors, with the tracing one when traces are exported."""
    if not tracing_on() or _traces(interceptors):
        return list(interceptors)
    return [*interceptors, *client_interceptors()]


def with_worker_telemetry(client: Client, interceptors: Sequence[Interceptor]) -> list[Interceptor]:
    """A worker's interceptors, with RunTracking and (when traces are exported and the client
    does not trace already) the tracing interceptor."""
    out = [*interceptors, RunTracking()]
    if tracing_on() and not _traces([*client.config()["interceptors"], *interceptors]):
        out.extend(client_interceptors())
    return out


def bind_worker_gauge(client: Client, task_queue: str) -> None:
    """The waiting-runs gauge of this worker, on its runtime's meter (a no-op meter when the
    runtime serves no metrics)."""
    runtime = client.service_client.config.runtime or Runtime.default()
    bind_waiting_gauge(client.namespace, task_queue, runtime.metric_meter)
