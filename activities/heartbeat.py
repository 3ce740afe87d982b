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


@contextlib.asynccontextmanager
async def heartbeating(interval: float = HEARTBEAT_INTERVAL_SECONDS) -> AsyncIterator[None]:
    """Heartbeat every `interval` seconds in the background for the duration of the block.

    The first beat comes after one interval: an activity that is done sooner (most tool calls,
    a fast model) costs the server no heartbeat at all, and one that takes longer still learns
    of a cancellation within about a second."""
    if not activity.in_activity():
        yield
        return

    async def beat() -> None:
        while True:
            await asyncio.sleep(interval)
            activity.heartbeat()

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        # Not awaited: the task stops at its next await, and awaiting it here could swallow a
        # cancellation aimed at the activity itself.
        task.cancel()
