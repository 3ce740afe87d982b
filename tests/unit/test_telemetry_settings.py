"""The operators' settings and the pure parts of metrics and traces: AGENT_METRICS_ADDRESS, the
OTEL_* variables that turn traces on (and the ones refused), and the outcome label of a tool
call read from what the model is told."""

from __future__ import annotations

import socket

import pytest

from activities.markers import interrupted_message
from activities.telemetry import tool_outcome
from runtime.metrics_runtime import MetricsAddressError, metrics_address, metrics_runtime
from runtime.tracing import TracingConfigError, tracing_wanted
from workflows.contract.tool_results import (
    envelope_error,
    framework_error_message,
    invalid_arguments_message,
    rejection_message,
    tool_not_found_message,
    tool_output_message,
)


@pytest.mark.parametrize(
    ("raw", "address"),
    [
        ("127.0.0.1:9464", "127.0.0.1:9464"),
        (" 0.0.0.0:9000 ", "0.0.0.0:9000"),
        ("[::1]:9464", "[::1]:9464"),
        ("localhost:9464", None),  # resolved: 127.0.0.1 or ::1, whichever the host says first
    ],
)
def test_metrics_address(raw: str, address: str | None) -> None:
    got = metrics_address({"AGENT_METRICS_ADDRESS": raw})
    if address is None:
        assert got in ("127.0.0.1:9464", "[::1]:9464")
    else:
        assert got == address


def test_no_metrics_address_serves_nothing() -> None:
    assert metrics_address({}) is None
    assert metrics_address({"AGENT_METRICS_ADDRESS": "  "}) is None


@pytest.mark.parametrize("raw", ["9464", ":9464", "127.0.0.1:", "127.0.0.1:0", "h:70000", "a:b"])
def test_a_bad_metrics_address_names_the_variable(raw: str) -> None:
    with pytest.raises(MetricsAddressError, match=r"^AGENT_METRICS_ADDRESS must be HOST:PORT"):
        metrics_address({"AGENT_METRICS_ADDRESS": raw})


def test_an_address_in_use_names_the_variable() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(MetricsAddressError, match=rf"^AGENT_METRICS_ADDRESS {address}: "):
            metrics_runtime(address)


ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({}, False),
        (ENDPOINT, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://otel.example/v1/traces"}, True),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "true"}, False),
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False),
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, True),
        # The traces' own protocol wins over the general one.
        (
            {
                **ENDPOINT,
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            },
            True,
        ),
    ],
)
def test_which_variables_turn_traces_on(env: dict[str, str], wanted: bool) -> None:
    assert tracing_wanted(env) is wanted


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        (
            {**ENDPOINT, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        ),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "console"}, "OTEL_TRACES_EXPORTER"),
    ],
)
def test_a_trace_setting_that_cannot_be_used_names_the_variable(
    env: dict[str, str], variable: str
) -> None:
    with pytest.raises(TracingConfigError, match=rf"^{variable} must be "):
        tracing_wanted(env)


@pytest.mark.parametrize(
    ("content", "outcome"),
    [
        (tool_output_message({"ok": True, "data": {"path": "logs"}}), "ok"),
        (tool_output_message({"ok": True, "data": "x" * 10}), "ok"),
        (envelope_error("no such file: notes.txt"), "error"),
        (framework_error_message("boom"), "error"),
        (interrupted_message("call_1"), "error"),
        (invalid_arguments_message("expected a JSON object, got list"), "invalid_arguments"),
        (tool_not_found_message("rm_rf"), "not_found"),
        (rejection_message("the worker's rules deny it"), "refused"),
    ],
)
def test_the_outcome_of_a_tool_call(content: str, outcome: str) -> None:
    assert tool_outcome(content) == outcome
