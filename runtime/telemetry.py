"""Keep the SDK's own log lines off a person's terminal.

The Temporal SDK's core writes its warnings straight to stderr (e.g. a `WARN
temporalio_client::retry` line each time it retries a refused request). The command line handles
those situations itself and says what happened in one line, so its runtime forwards the core's
log records to the Python logger `starter.sdk`, which (like the SDK's Python loggers) keeps them
unless a program attaches a handler.
"""

from __future__ import annotations

import logging

from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)

SDK_LOGGER = logging.getLogger("starter.sdk")


def _silence(logger: logging.Logger) -> None:
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())


def quiet_runtime() -> Runtime:
    """A runtime whose core logs go to `SDK_LOGGER`, never to the console."""
    return Runtime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(
                filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
                forwarding=LogForwardingConfig(logger=SDK_LOGGER),
            ),
            metrics=None,
        ),
        worker_heartbeat_interval=None,
    )


def install_quiet_runtime() -> None:
    """Make every client (and in-process worker) this process creates from now on use
    `quiet_runtime()`, and keep the SDK's Python loggers off stderr too."""
    _silence(SDK_LOGGER)
    _silence(logging.getLogger("temporalio"))
    Runtime.set_default(quiet_runtime(), error_if_already_set=False)
