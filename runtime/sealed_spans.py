"""Spans without run content when encryption is on: what a failure's message may quote (a
provider's error quoting the prompt, a body that is not a chat completion, a refused answer)
stays out of the trace collector.

Temporal's tracing interceptor marks a failed span with `"{type}: {message}"` as its status and
records the exception (its message and stack trace, which ends with the message) as an event.
With a key, `SealedSpanExporter` sends each span with only the exception's type in both: the
message itself travels sealed in the run's history (the failure converter encrypts it), where a
key holder reads it. With `AGENT_TRACE_CONTENT=true` an operator asked for content in traces,
and spans go out as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Status

SEALED = "(sealed: encryption is on)"
CONTENT_KEYS = ("exception.message", "exception.stacktrace")


def _event(event: Event) -> Event:
    if not any(key in (event.attributes or {}) for key in CONTENT_KEYS):
        return event
    attributes = {
        key: (SEALED if key in CONTENT_KEYS else value)
        for key, value in (event.attributes or {}).items()
    }
    return Event(event.name, attributes, event.timestamp)


def _status(status: Status) -> Status:
    if not status.description:
        return status
    kind = status.description.split(":", 1)[0].strip()
    return Status(status.status_code, kind or None)


def sealed_span(span: ReadableSpan) -> ReadableSpan:
    """`span` with only the types of its failures: no exception message, no stack trace."""
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=[_event(event) for event in span.events],
        links=span.links,
        kind=span.kind,
        status=_status(span.status),
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class SealedSpanExporter(SpanExporter):
    """`inner`, sent only sealed spans (`sealed_span`)."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([sealed_span(span) for span in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)
