"""The worker's Prometheus endpoint: `AGENT_METRICS_ADDRESS=HOST:PORT`.

The Temporal SDK serves it from its own runtime (`PrometheusConfig`): the SDK's metrics
(`temporal_…`: polls, task latencies, activity and workflow outcomes) and the agent's, which the
activities and the workflow record through the SDK's meters (`activities.telemetry`,
`workflows.metrics`). The runtime is configured so the names are the Prometheus conventions the
dashboards expect: counters end in `_total`, durations are in seconds, and the agent's names
already carry their unit (`agent_llm_seconds`), so no unit suffix is added.

With several worker processes (`worker.py --processes N`), copy i serves on PORT + i
(`copy_addresses`): each process has its own runtime, and one port can be bound only once.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping

from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from runtime.setting_error import SettingError

METRICS_ADDRESS_ENV = "AGENT_METRICS_ADDRESS"

LLM_SECONDS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
"""`agent_llm_seconds`: a model call takes from a tenth of a second to minutes."""
APPROVAL_WAIT_BUCKETS = (
    1.0,
    5.0,
    15.0,
    30.0,
    60.0,
    300.0,
    900.0,
    1800.0,
    3600.0,
    4 * 3600.0,
    8 * 3600.0,
    24 * 3600.0,
    3 * 24 * 3600.0,
    7 * 24 * 3600.0,
)
"""`agent_approval_wait_seconds`: people answer in seconds, or after a weekend."""


class MetricsAddressError(SettingError):
    """`AGENT_METRICS_ADDRESS` cannot be served."""


def metrics_address(environ: Mapping[str, str] | None = None) -> str | None:
    """The socket address to serve metrics on (`IP:PORT`, a host name resolved once), or None
    when `AGENT_METRICS_ADDRESS` is unset. MetricsAddressError names the variable otherwise."""
    env = os.environ if environ is None else environ
    raw = (env.get(METRICS_ADDRESS_ENV) or "").strip()
    if not raw:
        return None
    host, sep, port_text = raw.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise MetricsAddressError(
            f"{METRICS_ADDRESS_ENV} must be HOST:PORT (e.g. 127.0.0.1:9464), got {raw!r}"
        )
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        try:
            found = socket.getaddrinfo(host, int(port_text), type=socket.SOCK_STREAM)
        except OSError as err:
            raise MetricsAddressError(
                f"{METRICS_ADDRESS_ENV}: cannot resolve host {host!r} ({err})"
            ) from None
        ip = ipaddress.ip_address(found[0][4][0])
    shown = f"[{ip}]" if ip.version == 6 else str(ip)
    return f"{shown}:{port_text}"


def copy_addresses(address: str, count: int) -> list[str]:
    """The metrics address of each of `count` worker processes: copy i serves on PORT + i of
    `address` (an `IP:PORT`, as `metrics_address` gives it), so every copy starts and each is
    scraped on its own. MetricsAddressError when the last port would be past 65535."""
    host, _, port_text = address.rpartition(":")
    port = int(port_text)
    if port + count - 1 > 65535:
        raise MetricsAddressError(
            f"{METRICS_ADDRESS_ENV}={address}: {count} worker processes serve on ports {port} to"
            f" {port + count - 1}, past 65535; choose a lower port"
        )
    return [f"{host}:{port + index}" for index in range(count)]


def prometheus_config(address: str) -> PrometheusConfig:
    """The SDK's Prometheus exporter on `address` (an `IP:PORT`), with the agent's buckets."""
    return PrometheusConfig(
        bind_address=address,
        counters_total_suffix=True,
        unit_suffix=False,
        durations_as_seconds=True,
        histogram_bucket_overrides={
            "agent_llm_seconds": LLM_SECONDS_BUCKETS,
            "agent_approval_wait_seconds": APPROVAL_WAIT_BUCKETS,
        },
    )


def metrics_runtime(address: str) -> Runtime:
    """A runtime that serves `http://ADDRESS/metrics` from now on; MetricsAddressError when the
    address cannot be bound (in use, not this machine's)."""
    try:
        return Runtime(telemetry=TelemetryConfig(metrics=prometheus_config(address)))
    except ValueError as err:
        raise MetricsAddressError(f"{METRICS_ADDRESS_ENV} {address}: {err}") from None
