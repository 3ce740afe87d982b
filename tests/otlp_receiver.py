"""A real OTLP/HTTP trace receiver for tests: what a collector's `:4318/v1/traces` does.

It listens on 127.0.0.1 (a free port), takes `POST /v1/traces` bodies of
`ExportTraceServiceRequest` protobuf (gzip or not), answers `ExportTraceServiceResponse`, and
keeps every span as a `ReceivedSpan` (its ids in hex, its attributes decoded, its resource's
`service.name`). Runs in a background thread:

    with OtlpReceiver() as otlp:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp.endpoint
        ...
        spans = otlp.spans()
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    """Empty for a root span."""
    service: str
    attributes: dict[str, Any]
    status: int
    """OTLP's status code: 0 unset, 1 ok, 2 error."""
    links: list[str] = field(default_factory=list)
    """The span ids this span links to."""
    text: str = ""
    """The whole span as protobuf text: its status message and events (an exception's message)
    included, to look for what must not be there."""


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind) if kind else None


def decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest.FromString(body)
    out: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope in resource_spans.scope_spans:
            for span in scope.spans:
                out.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        service=str(resource.get("service.name", "")),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        status=int(span.status.code),
                        links=[link.span_id.hex() for link in span.links],
                        text=str(span),
                    )
                )
    return out


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path.rstrip("/") != "/v1/traces":
            self.send_response(404)
            self.end_headers()
            return
        spans = decode(body)
        with self.server.lock:
            self.server.received.extend(spans)
            self.server.requests += 1
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.received: list[ReceivedSpan] = []
        self.requests = 0


class OtlpReceiver:
    def __init__(self) -> None:
        self._server = _Server()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it (the exporter adds /v1/traces)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def spans(self) -> list[ReceivedSpan]:
        with self._server.lock:
            return list(self._server.received)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
