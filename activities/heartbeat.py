"""Heartbeats that keep going while an activity waits (for response headers, a slow stream, a
long command), so the server can tell the activity it was cancelled."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity

HEARTBEAT_INTERVAL_SECONDS = 0.5
"""Local heartbeat calls are cheap: the SDK throttles what reaches the server (the worker sets
`max_heartbeat_throttle_interval`), and a cancellation arrives with the next one sent, so this
bounds how fast an immediate cancel reaches a waiting activity."""


def heartbeat_now() -> None:
    """Heartbeat if running inside an activity (no-op elsewhere, e.g. in plain unit tests)."""
    if activity.in_activity():
        activity.heartbeat()


@contextlib.asynccontextmanager
async def heartbeating(interval: float = HEARTBEAT_INTERVAL_SECONDS) -> AsyncIterator[None]:
    """Heartbeat every `interval` seconds in the background for the duration of the block."""
    if not activity.in_activity():
        yield
        return

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        # Not awaited: the task stops at its next await, and awaiting it here could swallow a
        # cancellation aimed at the activity itself.
        task.cancel()
