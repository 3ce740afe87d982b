"""A TCP relay on 127.0.0.1 in front of a server (the Temporal dev server, a model server), for
tests that take the way to it down and bring it back on the same port:

    async with Relay("127.0.0.1:7233") as relay:   # relay.address: what the client is given
        ...
        await relay.cut()    # every open connection dropped, new ones refused
        await relay.mend()   # connections taken again, on the same port

It passes bytes both ways and knows nothing of what they carry (gRPC, HTTP).
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

from tests.ports import free_ports


class Relay:
    def __init__(self, target: str, port: int | None = None) -> None:
        host, _, target_port = target.rpartition(":")
        self._target = (host or "127.0.0.1", int(target_port))
        self.port = port or free_ports()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections = 0
        """Connections taken so far."""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def __aenter__(self) -> Relay:
        await self.mend()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.cut()

    async def mend(self) -> None:
        """Listen (again) on the relay's port."""
        if self._server is None:
            self._server = await asyncio.start_server(
                self._serve, "127.0.0.1", self.port, reuse_address=True
            )

    async def cut(self) -> None:
        """Stop listening and drop every open connection: clients see their requests fail and
        new connections refused until `mend`."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        self._tasks.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        pumps = [
            asyncio.create_task(_pump(reader, up_writer)),
            asyncio.create_task(_pump(up_reader, writer)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
                self._tasks.discard(task)
            for side in (writer, up_writer):
                side.transport.abort()
                self._writers.discard(side)


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, OSError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
