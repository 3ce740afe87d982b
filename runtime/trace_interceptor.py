"""Temporal's tracing interceptor, less the traffic that says nothing about a run.

`TracingInterceptor` (temporalio.contrib.opentelemetry) makes one trace per run: the client's
`StartWorkflow` span is its root; the workflow's spans (`RunWorkflow`, `StartActivity`,
`HandleSignal`, `HandleUpdate`, `CompleteWorkflow`; continue-as-new stays in the trace) and the
activities' `RunActivity` spans hang under it, with the activities' own spans (the model call,
the tool call) inside those. Its workflow spans are created only when the run is not
replaying, and carry no state of the run, so replay is unaffected.

Two kinds of traffic would drown that tree, and are left untraced here:
- the live stream's signals and long-poll updates (`__temporal_…`: many per round), on the
  workflow side and, outside a trace, on the client side;
- queries made outside a trace (a follower or the web inbox polling `status` and `events`: one
  new trace per poll otherwise). A query inside a trace (the model call reading the
  conversation) is traced as a child of its span.
"""

from __future__ import annotations

from typing import Any

import opentelemetry.trace
import temporalio.client
import temporalio.worker
from temporalio.contrib.opentelemetry import TracingInterceptor, TracingWorkflowInboundInterceptor

INTERNAL_PREFIX = "__temporal_"


def _in_trace() -> bool:
    return opentelemetry.trace.get_current_span() is not opentelemetry.trace.INVALID_SPAN


def _internal(name: str) -> bool:
    return name.startswith(INTERNAL_PREFIX)


class AgentTracingInterceptor(TracingInterceptor):
    """The project's tracing interceptor, for clients (and the workers built on them)."""

    def intercept_client(
        self, next: temporalio.client.OutboundInterceptor
    ) -> temporalio.client.OutboundInterceptor:
        return _QuietClient(super().intercept_client(next), next)

    def workflow_interceptor_class(
        self, input: temporalio.worker.WorkflowInterceptorClassInput
    ) -> type[TracingWorkflowInboundInterceptor]:
        super().workflow_interceptor_class(input)  # registers the span extern
        return _QuietWorkflow


class _QuietClient(temporalio.client.OutboundInterceptor):
    """Traced calls go to `next` (the tracing interceptor); the others straight to `plain`."""

    def __init__(
        self,
        traced: temporalio.client.OutboundInterceptor,
        plain: temporalio.client.OutboundInterceptor,
    ) -> None:
        super().__init__(traced)
        self._plain = plain

    async def query_workflow(self, input: temporalio.client.QueryWorkflowInput) -> Any:
        if _in_trace():
            return await self.next.query_workflow(input)
        return await self._plain.query_workflow(input)

    async def signal_workflow(self, input: temporalio.client.SignalWorkflowInput) -> None:
        if _internal(input.signal) and not _in_trace():
            return await self._plain.signal_workflow(input)
        return await self.next.signal_workflow(input)

    async def start_workflow_update(
        self, input: temporalio.client.StartWorkflowUpdateInput
    ) -> temporalio.client.WorkflowUpdateHandle[Any]:
        if _internal(input.update) and not _in_trace():
            return await self._plain.start_workflow_update(input)
        return await self.next.start_workflow_update(input)


class _QuietWorkflow(TracingWorkflowInboundInterceptor):
    """The workflow's spans, without one per live-stream signal or poll."""

    async def handle_signal(self, input: temporalio.worker.HandleSignalInput) -> None:
        if _internal(input.signal):
            return await self.next.handle_signal(input)
        return await super().handle_signal(input)

    def handle_update_validator(self, input: temporalio.worker.HandleUpdateInput) -> None:
        if _internal(input.update):
            return self.next.handle_update_validator(input)
        return super().handle_update_validator(input)

    async def handle_update_handler(self, input: temporalio.worker.HandleUpdateInput) -> Any:
        if _internal(input.update):
            return await self.next.handle_update_handler(input)
        return await super().handle_update_handler(input)
