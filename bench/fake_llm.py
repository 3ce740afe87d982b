"""A tiny OpenAI-compatible chat-completions server on 127.0.0.1 for the benchmark: leaner than
`tests/fake_openai.py` (it must not dominate the figures) and it records when a client went away.

It runs its own event loop in a thread, so the worker's loop only pays for the HTTP client, as it
would against a real provider. Two behaviours: `instant` (a reply of `content_size` characters
plus one `tool` call, at once; a request without tools, such as a compaction's summary, gets the
text alone) and `slow` (text for `stream_seconds`, then a `tool` call; records when the client
went away, which is when an immediate cancel really aborted the request). The usage it reports
counts 4 bytes of request per prompt token.

`GET /bench/stats` answers what it was sent so far (`requests`, `body_bytes`, `summaries`), so a
figure can check that two variants sent the same bytes; `GET /bench/recent?n=N` the last N model
requests as they came (`head`, the request line and headers, and `body`, the JSON text; at most
`RECENT` are kept), so the fair floor can send the agent's own bodies and a figure can check that
it did; any other GET (the client's `/props` probe) is a 404.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

RECENT = 256
"""Model requests the server keeps for `GET /bench/recent` (more than a reference run makes)."""


@dataclass
class FakeLlmServer:
    mode: str = "instant"
    content_size: int = 100
    tool: str = "list_dir"
    stream_seconds: float = 15.0
    port: int = 0
    requests: int = 0
    body_bytes: int = 0
    """Bytes of every model request's body."""
    summaries: int = 0
    """Requests without tools (a compaction's summary)."""
    disconnects: list[float] = field(default_factory=list)
    """`time.monotonic()` of every slow stream the client aborted before its end."""
    recent_requests: deque[tuple[bytes, bytes]] = field(
        default_factory=lambda: deque(maxlen=RECENT)
    )
    """The last model requests, (head, body), oldest first."""
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _server: asyncio.Server | None = None
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeLlmServer:
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", 0)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=serve, name="fake-llm", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        loop = self._loop
        if loop is not None:
            asyncio.run_coroutine_threadsafe(self._close_connections(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    async def _close_connections(self) -> None:
        """Stop listening and hang up on kept-alive connections; their handlers see the end of
        the stream and return, so none is left pending when the loop closes."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if handlers:
            await asyncio.wait(handlers, timeout=2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n")[1:]:
                    key, _, value = line.partition(":")
                    if key.strip().lower() == "content-length":
                        length = int(value.strip())
                raw = await reader.readexactly(length) if length else b""
                if head.startswith(b"GET /bench/stats "):
                    await self._json(writer, self.stats())
                    continue
                if head.startswith(b"GET /bench/recent?n="):
                    count = int(head.split(b" ", 2)[1].partition(b"=")[2])
                    await self._json(writer, self.recent(min(count, RECENT)))
                    continue
                if not head.startswith(b"POST "):  # the client's `GET /props`: no model call
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                body = json.loads(raw) if raw else {}
                self.requests += 1
                self.body_bytes += len(raw)
                self.recent_requests.append((head, raw))
                tools = bool(body.get("tools"))
                self.summaries += not tools
                if self.mode == "slow":
                    await self._slow(reader, writer)
                    return
                await self._instant(writer, bool(body.get("stream")), tools, len(raw))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def _reply(self) -> tuple[str, dict[str, Any]]:
        call: dict[str, Any] = {
            "index": 0,
            "id": f"call_{next(self._ids)}",
            "type": "function",
            "function": {"name": self.tool, "arguments": json.dumps({"path": "."})},
        }
        return "x" * self.content_size, call

    def stats(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "body_bytes": self.body_bytes,
            "summaries": self.summaries,
        }

    def recent(self, count: int) -> list[dict[str, str]]:
        """The last `count` model requests, oldest first: `head` (request line and headers) and
        `body` (the JSON text, as sent)."""
        if count > RECENT:
            raise ValueError(f"the server keeps the last {RECENT} requests, not {count}")
        kept = list(self.recent_requests)[-count:] if count else []
        return [{"head": h.decode("latin-1"), "body": b.decode("utf-8")} for h, b in kept]

    async def _json(self, writer: asyncio.StreamWriter, value: Any) -> None:
        data = json.dumps(value).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        await writer.drain()

    async def _instant(
        self, writer: asyncio.StreamWriter, stream: bool, tools: bool, request_bytes: int
    ) -> None:
        content, call = self._reply()
        prompt = max(1, request_bytes // 4)
        usage = {"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5}
        finish = "tool_calls" if tools else "stop"
        if not stream:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if tools:
                message["tool_calls"] = [call]
            payload = {
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
            data = json.dumps(payload).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(data)}\r\n\r\n".encode()
                + data
            )
            await writer.drain()
            return
        chunks: list[dict[str, Any]] = [{"role": "assistant", "content": content}]
        if tools:
            chunks.append({"tool_calls": [call]})
        events = [_chunk(delta, None) for delta in chunks]
        events.append(_chunk({}, finish, usage))
        body = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()

    async def _slow(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        end = time.monotonic() + self.stream_seconds
        try:
            while time.monotonic() < end:
                if reader.at_eof() or writer.is_closing():
                    raise ConnectionResetError("client went away")
                writer.write(f"data: {json.dumps(_chunk({'content': 'tick '}, None))}\n\n".encode())
                await writer.drain()
                await asyncio.sleep(0.1)
            # End with a tool call, so a plain cancel is seen at the next iteration's start.
            _, call = self._reply()
            tail = [_chunk({"tool_calls": [call]}, None), _chunk({}, "tool_calls")]
            for event in tail:
                writer.write(f"data: {json.dumps(event)}\n\n".encode())
            writer.write(b"data: [DONE]\n\n")
            await writer.drain()
        except ConnectionError:
            self.disconnects.append(time.monotonic())


def _chunk(delta: dict[str, Any], finish: str | None, usage: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        out["usage"] = usage
    return out


class FakeLlmProcess:
    """The same server in a process of its own, so that its CPU does not share the worker's
    interpreter lock: a figure about orchestration overhead should not charge the model's work
    to the worker. Prints `port N` once listening."""

    def __init__(self, mode: str = "instant", content_size: int = 100, tool: str = "list_dir"):
        self._args = ["--mode", mode, "--content-size", str(content_size), "--tool", tool]
        self._proc: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def stats(self) -> dict[str, int]:
        """What the server was sent so far (`GET /bench/stats`)."""
        value: dict[str, int] = self._get("stats")
        return value

    def recent(self, count: int) -> list[dict[str, str]]:
        """The last `count` model requests, oldest first (`GET /bench/recent`)."""
        value: list[dict[str, str]] = self._get(f"recent?n={count}")
        return value

    def _get(self, what: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/bench/{what}", timeout=10) as r:
            return json.loads(r.read())

    def __enter__(self) -> FakeLlmProcess:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.fake_llm", *self._args],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "port":
            self._proc.kill()
            raise RuntimeError(f"fake LLM process did not start: {line!r}")
        self.port = int(line[1])
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", default="instant", choices=["instant", "slow"])
    parser.add_argument("--content-size", type=int, default=100)
    parser.add_argument("--tool", default="list_dir")
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with FakeLlmServer(mode=args.mode, content_size=args.content_size, tool=args.tool) as server:
        print(f"port {server.port}", flush=True)
        stop.wait()


if __name__ == "__main__":
    _main()
