"""The demo's notification receiver: a small HTTP server on 127.0.0.1 that takes the worker's
POSTs (`AGENT_NOTIFY_URL`), keeps their JSON bodies and lets the demo wait for one, so the demo
shows a notification arriving the way a team's webhook would get it."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

MAX_BODY_BYTES = 1024 * 1024
WAIT_SECONDS = 10.0
"""How long the demo waits for a notification before saying none arrived."""


@dataclass
class DemoReceiver:
    port: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    _arrived: asyncio.Condition = field(default_factory=asyncio.Condition)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/notify"

    async def wait_for(self, event: str, workflow_id: str | None = None) -> dict[str, Any] | None:
        """The first body of `event` (about `workflow_id`, when given) that arrived (waiting up
        to WAIT_SECONDS), or None."""

        def found() -> dict[str, Any] | None:
            return next(
                (
                    b
                    for b in self.bodies
                    if b.get("event") == event
                    and (workflow_id is None or b.get("workflow_id") == workflow_id)
                ),
                None,
            )

        async with self._arrived:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._arrived.wait_for(lambda: found() is not None), WAIT_SECONDS
                )
            return found()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            length = 0
            for line in head.decode("latin-1").split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip() or 0)
            if not 0 <= length <= MAX_BODY_BYTES:
                raise ValueError("body too large")
            body = json.loads(await asyncio.wait_for(reader.readexactly(length), 10))
            if isinstance(body, dict):
                async with self._arrived:
                    self.bodies.append(body)
                    self._arrived.notify_all()
            writer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
        except (ValueError, OSError, asyncio.IncompleteReadError, TimeoutError):
            writer.write(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
        finally:
            with contextlib.suppress(OSError):
                await writer.drain()
                writer.close()


@contextlib.asynccontextmanager
async def demo_receiver() -> AsyncIterator[DemoReceiver]:
    receiver = DemoReceiver()
    server = await asyncio.start_server(receiver._serve, "127.0.0.1", 0)
    receiver.port = server.sockets[0].getsockname()[1]
    try:
        yield receiver
    finally:
        server.close()
        await server.wait_closed()
