"""Traces over OTLP/HTTP, set up once per process from the standard `OTEL_*` variables.

With `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set, every program
of the project exports OpenTelemetry traces: `install_tracing` sets the process's tracer
provider (an OTLP/HTTP exporter behind a batch processor; the exporter itself reads the
endpoint, `OTEL_EXPORTER_OTLP_HEADERS`, `_TIMEOUT`, `_COMPRESSION`, `_CERTIFICATE`; the batch
processor `OTEL_BSP_*`; the resource `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`), and
`client_interceptors` gives every client Temporal's tracing interceptor, which the workers built
on that client share (`runtime.trace_interceptor`). `OTEL_SDK_DISABLED=true` or
`OTEL_TRACES_EXPORTER=none` turn it off. Only OTLP over HTTP (`http/protobuf`, the port 4318 of a
collector) is spoken: another `OTEL_EXPORTER_OTLP_PROTOCOL` is refused with one line.

With an encryption key and without `AGENT_TRACE_CONTENT=true`, a failed span says only the
failure's type (`runtime.sealed_spans`): its message may quote the run.

Spans are batched; `runtime.process.exit_now` sends what is left (`flush_traces`) before the
process leaves, so the last spans of a short command are not lost.
"""

from __future__ import annotations

import os
import threading
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runtime.setting_error import SettingError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOL_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
HTTP_PROTOCOL = "http/protobuf"
CLIENT_SERVICE = "durable-agent-client"
WORKER_SERVICE = "durable-agent-worker"
FLUSH_MILLIS = 5_000

_lock = threading.Lock()
_provider: TracerProvider | None = None
_decided = False


class TracingConfigError(SettingError):
    """An `OTEL_*` setting this project cannot export traces with."""


def tracing_wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the variables ask for traces; TracingConfigError names one that cannot be used."""
    env = os.environ if environ is None else environ
    if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
        return False
    exporter = (env.get("OTEL_TRACES_EXPORTER") or "otlp").strip().lower()
    if exporter == "none":
        return False
    named = [(name, (env.get(name) or "").strip()) for name in ENDPOINT_ENVS]
    given = [(name, value) for name, value in named if value]
    if not given:
        return False
    if exporter != "otlp":
        raise TracingConfigError(
            f"OTEL_TRACES_EXPORTER must be otlp or none here, got {exporter!r}"
        )
    name, value = given[0]
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TracingConfigError(f"{name} must be an http:// or https:// URL, got {value!r}")
    for variable in PROTOCOL_ENVS:
        protocol = (env.get(variable) or "").strip()
        if protocol:
            if protocol != HTTP_PROTOCOL:
                raise TracingConfigError(
                    f"{variable} must be {HTTP_PROTOCOL} (traces go over OTLP/HTTP), got"
                    f" {protocol!r}"
                )
            break
    return True


def content_sealed(environ: Mapping[str, str]) -> bool:
    """Whether spans must carry no run content, failures' messages included: encryption is on
    and AGENT_TRACE_CONTENT does not ask for content."""
    from runtime.codec import parse_keys

    asked = (environ.get("AGENT_TRACE_CONTENT") or "").strip().lower() == "true"
    return not asked and parse_keys(environ) is not None


def install_tracing(
    service_name: str = CLIENT_SERVICE, environ: Mapping[str, str] | None = None
) -> bool:
    """Set this process's tracer provider from the variables, the first time only; whether
    traces are exported. `service_name` is used unless OTEL_SERVICE_NAME (or a `service.name`
    in OTEL_RESOURCE_ATTRIBUTES) names the service. TracingConfigError for a bad setting."""
    global _provider, _decided
    with _lock:
        if _decided:
            return _provider is not None
        if not tracing_wanted(environ):
            _decided = True
            return False
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create()
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: service_name}))
        provider = TracerProvider(resource=resource)
        exporter: Any = OTLPSpanExporter()
        if content_sealed(os.environ if environ is None else environ):
            from runtime.sealed_spans import SealedSpanExporter

            exporter = SealedSpanExporter(exporter)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        _provider = provider
        _decided = True
        return True


def tracing_on() -> bool:
    """Whether this process exports traces (install_tracing said so)."""
    return _provider is not None


def client_interceptors() -> list[Any]:
    """What a client of the project is connected with: the tracing interceptor when traces are
    exported (workers built on the client get it from there), else nothing."""
    if not tracing_on():
        return []
    from runtime.trace_interceptor import AgentTracingInterceptor

    return [AgentTracingInterceptor()]


def flush_traces(timeout_millis: int = FLUSH_MILLIS) -> None:
    """Send the spans still in the batch (called by `exit_now`; never raises)."""
    provider = _provider
    if provider is None:
        return
    try:
        provider.force_flush(timeout_millis)
    except Exception:  # an unreachable collector must not change how a program ends
        return
