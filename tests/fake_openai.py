"""A real, local OpenAI-compatible chat-completions server for tests and demos.

It listens on 127.0.0.1 (a random free port by default) and speaks the chat-completions protocol
for real: streaming (SSE, chunked `data: {...}` lines ending with `data: [DONE]`) or plain JSON,
as the request asks. Each request takes the next scripted behaviour from a queue; when the queue
is empty it answers as the offline `scripted` assistant (`activities.scripted.scripted_reply`),
so a worker pointed at it can play the whole story over HTTP. It records every request body
(`requests`, `request_count`), its headers (`headers`) and every client disconnect it saw
mid-reply (`disconnects`).

It is as strict as llama.cpp's server about the conversation it is sent, and a little stricter: a
request whose assistant message has a tool call with `arguments` that are not the text of a JSON
object is answered HTTP 500 `{"error": {"message": "Failed to parse tool call arguments as
JSON"}}` (llama.cpp refuses text that is not JSON, `NaN` and lone surrogates included; chat
templates that iterate over the arguments need an object besides), counted
in `rejected` (and kept in `rejections` as well as `requests`), and does not use up the queued
behaviour. Every test
that talks to it therefore also proves the conversation is one a strict server accepts
(`strict = False` turns the check off).

In-process (a background thread, so it keeps serving while the test's event loop is busy):

    from tests.fake_openai import FakeOpenAI, text, tool_calls, rate_limited, server_error

    with FakeOpenAI() as fake:
        fake.enqueue(
            tool_calls(("call_1", "list_dir", '{"path": "."}')),   # split mid-JSON
            rate_limited(retry_after=2),                             # 429 + Retry-After: 2
            text("All done."),                                       # streamed in small chunks
        )
        settings = Settings(llm_base_url=fake.base_url, llm_api_key="sk-test", ...)
        ...
        assert len(fake.requests) == 3
        assert fake.requests[0]["messages"][0]["role"] == "user"

Behaviours: `text`, `tool_calls` (several calls stream in parallel, interleaved), `Reply(...,
force_json=True)` (answers JSON to a streaming request: the client's fallback), `Reply(...,
finish_reason="length")` or `cut_short(...)` (a reply stopped at the token limit), `RawStream`
and `RawJson` (exactly these chunks or this body, e.g. a shape that is no chat completion),
`rate_limited`,
`server_error`, `unauthorized`, `HttpError(status, body, headers)`, `Malformed`, `CutOff`
(stream cut off midway; `abrupt=False` ends the body cleanly but without `[DONE]`), `Slow`
(N chunks with a delay: use it to test cancellation, then wait for `fake.disconnects`),
`Scripted` (the default).

As a subprocess (e.g. for a worker started as its own process):

    python -m tests.fake_openai --port 8765
    # prints "listening on http://127.0.0.1:8765"; serves until SIGTERM / Ctrl-C
    LLM_BASE_URL=http://127.0.0.1:8765/v1 python worker.py

Any path ending in `/chat/completions` is served (so the base URL may or may not end in `/v1`).
Over HTTP, `POST /_fake/enqueue` with a JSON list of behaviours (`{"kind": "text", "text":
"hi"}`, kinds: text, tool_calls, reply, http_error, malformed, cut_off, slow, scripted,
raw_stream, raw_json) queues them, and `GET /_fake/requests` returns `{"requests": [...],
"disconnects": N, "rejected": N, "counters": {...}}`.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import select
import signal
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from activities.scripted import scripted_reply
from workflows.model import ChatMessage, ToolCall

MODEL = "fake-model"


# ---------------------------------------------------------------- behaviours


@dataclass
class Reply:
    """An assistant reply: text and/or tool calls `(id, name, arguments JSON string)`."""

    text: str = ""
    tool_calls: Sequence[tuple[str, str, str]] = ()
    chunk_size: int = 4
    """Characters per streamed fragment of text or arguments."""
    usage: tuple[int, int] | None = (11, 7)
    """(prompt_tokens, completion_tokens), sent in the final chunk; None sends no usage."""
    force_json: bool = False
    """Answer `application/json` even when the request asked for a stream."""
    split_names: bool = True
    """Stream each tool name in two fragments (the id only in the first)."""
    open_after_done: float = 0.0
    """Seconds the streamed body stays open after `[DONE]` (a misbehaving provider)."""
    finish_reason: str | None = None
    """The finish_reason sent; None: `tool_calls` when there are calls, else `stop`."""

    @property
    def finish(self) -> str:
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")


def text(content: str, chunk_size: int = 3, finish_reason: str | None = None) -> Reply:
    return Reply(text=content, chunk_size=chunk_size, finish_reason=finish_reason)


def tool_calls(
    *calls: tuple[str, str, str],
    chunk_size: int = 5,
    content: str = "",
    finish_reason: str | None = None,
) -> Reply:
    return Reply(text=content, tool_calls=calls, chunk_size=chunk_size, finish_reason=finish_reason)


def cut_short(*calls: tuple[str, str, str], content: str = "", force_json: bool = False) -> Reply:
    """A reply stopped at the token limit (`finish_reason: "length"`): typically its last call's
    arguments end mid-JSON, e.g. `{"path":`."""
    return Reply(text=content, tool_calls=calls, finish_reason="length", force_json=force_json)


@dataclass
class HttpError:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


def rate_limited(retry_after: float | str | None = 2) -> HttpError:
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    body = {"error": {"message": "Rate limit reached for requests", "type": "requests"}}
    return HttpError(429, body, headers)


def server_error(
    message: str = "The server had an error while processing your request",
) -> HttpError:
    return HttpError(500, {"error": {"message": message, "type": "server_error"}})


def unauthorized(message: str = "Incorrect API key provided.") -> HttpError:
    return HttpError(401, {"error": {"message": message, "type": "invalid_request_error"}})


@dataclass
class Malformed:
    """A 200 whose body does not parse: garbage JSON, or a garbage SSE line when streaming."""

    body: str = "this is not json {"


@dataclass
class CutOff:
    """Streams `after_chunks` chunks of `text`, then stops. `abrupt`: drop the connection in the
    middle of the chunked body; else end the body cleanly without finish_reason or [DONE]."""

    text: str = "This reply is going to be cut off somewhere in the middle"
    after_chunks: int = 2
    abrupt: bool = True
    delay: float = 0.0
    """Seconds between chunks (to let a live follower see the partial text)."""


@dataclass
class Slow:
    """`chunks` text chunks, `delay` seconds apart (for cancellation tests)."""

    chunks: int = 50
    delay: float = 0.1
    piece: str = "tick "
    then_call: tuple[str, str, str] | None = None
    """A tool call (id, name, JSON arguments) streamed after the slow text."""


@dataclass
class RawStream:
    """An event stream of exactly these chunks (a str is sent as it is, anything else as JSON),
    then `[DONE]` when `done`: for replies that are JSON but not chat-completion chunks."""

    chunks: Sequence[Any] = ()
    done: bool = True


@dataclass
class RawJson:
    """A 200 `application/json` reply of exactly this value (not necessarily a completion)."""

    body: Any = None


@dataclass
class Scripted:
    """Answer as the offline scripted assistant, from the request's messages and tools."""

    chunk_size: int = 8


Behaviour = Reply | HttpError | Malformed | CutOff | Slow | Scripted | RawStream | RawJson


def behaviour_from_json(spec: dict[str, Any]) -> Behaviour:
    """The HTTP control endpoint's form of a behaviour: `{"kind": ..., **fields}`."""
    spec = dict(spec)
    kind = spec.pop("kind")
    if kind == "text":
        return text(spec.pop("text"), **spec)
    if kind == "tool_calls":
        calls = [tuple(c) for c in spec.pop("calls")]
        return tool_calls(*calls, **spec)
    kinds: dict[str, Callable[..., Behaviour]] = {
        "reply": Reply,
        "http_error": HttpError,
        "malformed": Malformed,
        "cut_off": CutOff,
        "slow": Slow,
        "scripted": Scripted,
        "raw_stream": RawStream,
        "raw_json": RawJson,
    }
    return kinds[kind](**spec)


# ---------------------------------------------------------------- wire format


def from_openai_messages(raw: Sequence[dict[str, Any]]) -> list[ChatMessage]:
    """Chat-completions request messages back into ChatMessages (for the scripted default)."""
    messages = []
    for item in raw:
        calls = [
            ToolCall(
                id=c.get("id", ""),
                name=c.get("function", {}).get("name", ""),
                arguments=c.get("function", {}).get("arguments", ""),
            )
            for c in item.get("tool_calls") or []
        ]
        messages.append(
            ChatMessage(
                role=item["role"],
                content=item.get("content") or "",
                tool_calls=calls or None,
                tool_call_id=item.get("tool_call_id"),
                name=item.get("name"),
            )
        )
    return messages


def _pieces(value: str, size: int) -> list[str]:
    return [value[i : i + size] for i in range(0, len(value), max(1, size))] or [""]


def _chunk(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL,
        "choices": choices,
        "usage": usage,
    }


def _delta(delta: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
    return [{"index": 0, "delta": delta, "finish_reason": finish}]


def _usage(reply: Reply) -> dict[str, int] | None:
    if reply.usage is None:
        return None
    prompt, completion = reply.usage
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def stream_chunks(reply: Reply) -> list[dict[str, Any]]:
    """The SSE chunks of a reply: text in small pieces, then the tool calls with their name and
    arguments split across chunks and the calls interleaved, then finish_reason and usage."""
    chunks = [_chunk(_delta({"role": "assistant", "content": ""}))]
    if reply.text:
        for piece in _pieces(reply.text, reply.chunk_size):
            chunks.append(_chunk(_delta({"content": piece})))
    heads: list[dict[str, Any]] = []
    for index, (call_id, name, _) in enumerate(reply.tool_calls):
        cut = len(name) // 2 if reply.split_names and len(name) > 1 else len(name)
        heads.append(
            {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": name[:cut], "arguments": ""},
            }
        )
        if cut < len(name):
            heads.append({"index": index, "function": {"name": name[cut:]}})
    for head in heads:
        chunks.append(_chunk(_delta({"tool_calls": [head]})))
    pieces = [_pieces(arguments, reply.chunk_size) for _, _, arguments in reply.tool_calls]
    for step in range(max((len(p) for p in pieces), default=0)):
        for index, parts in enumerate(pieces):  # interleaved: call 0, call 1, call 0, ...
            if step < len(parts):
                fragment = {"index": index, "function": {"arguments": parts[step]}}
                chunks.append(_chunk(_delta({"tool_calls": [fragment]})))
    chunks.append(_chunk(_delta({}, reply.finish)))
    usage = _usage(reply)
    if usage is not None:
        chunks.append(_chunk([], usage))
    return chunks


def completion_json(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in reply.tool_calls
        ]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": reply.finish,
            }
        ],
        "usage": _usage(reply),
    }


def _json_object_text(value: Any) -> bool:
    """Whether `value` is the text of a JSON object, read as strictly as llama.cpp's server."""
    if not isinstance(value, str):
        return False

    def refuse(name: str) -> Any:
        raise ValueError(name)

    try:
        parsed = json.loads(value, parse_constant=refuse)
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError):
        return False
    return isinstance(parsed, dict)


def unacceptable_arguments(body: dict[str, Any]) -> list[Any]:
    """The `arguments` of every assistant tool call in the request that a strict server (one
    that parses earlier calls' arguments to render its chat template) cannot read."""
    bad = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if not _json_object_text(arguments):
                bad.append(arguments)
    return bad


STRICT_REFUSAL = {"error": {"code": 500, "message": "Failed to parse tool call arguments as JSON"}}


def scripted_as_reply(body: dict[str, Any], chunk_size: int) -> Reply:
    messages = from_openai_messages(body.get("messages") or [])
    names = [t["function"]["name"] for t in body.get("tools") or []]
    answer = scripted_reply(messages, names)
    calls = [
        (c.id, c.name, c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments))
        for c in answer.message.tool_calls or []
    ]
    usage = (answer.usage.prompt_tokens, answer.usage.completion_tokens)
    return Reply(text=answer.message.content, tool_calls=calls, chunk_size=chunk_size, usage=usage)


# ---------------------------------------------------------------- the server


class ClientGone(Exception):
    """The client closed the connection while we were answering."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeOpenAIServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def setup(self) -> None:
        super().setup()
        self.server.note("connections")  # one handler per TCP connection (keep-alive reuses it)

    # -- plumbing

    def _send_json(self, status: int, value: Any, headers: dict[str, str] | None = None) -> None:
        data = value.encode() if isinstance(value, str) else json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, item in (headers or {}).items():
            self.send_header(key, item)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        self.server.note("streams_started")

    def _write_chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError) as err:
            raise ClientGone() from err

    def _event(self, value: Any) -> None:
        data = value if isinstance(value, str) else json.dumps(value)
        self._write_chunk(f"data: {data}\n\n".encode())

    def _end_stream(self) -> None:
        self._write_chunk(b"")  # the zero-length chunk ends the body

    def _client_closed(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    def _pause(self, seconds: float) -> None:
        """Sleep, noticing a client that goes away in the meantime."""
        deadline = time.monotonic() + seconds
        while True:
            if self._client_closed():
                raise ClientGone()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(0.02, left))

    # -- requests

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/_fake/requests":
            self._send_json(200, self.server.snapshot())
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") == "/_fake/enqueue":
            specs = json.loads(raw or b"[]")
            self.server.enqueue(*(behaviour_from_json(s) for s in specs))
            self._send_json(200, {"queued": len(specs)})
            return
        route = urllib.parse.urlsplit(self.path)
        if not route.path.rstrip("/").endswith("/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        self.server.note_query(route.query)
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            self._send_json(400, {"error": {"message": "request body is not JSON"}})
            return
        if self.server.strict and unacceptable_arguments(body):
            self.server.reject(body, dict(self.headers.items()))
            self._send_json(500, STRICT_REFUSAL)
            return
        behaviour = self.server.record(body, dict(self.headers.items()))
        try:
            self._answer(body, behaviour)
        except ClientGone:
            self.server.note("disconnects")
            self.close_connection = True

    def _answer(self, body: dict[str, Any], behaviour: Behaviour) -> None:
        streaming = bool(body.get("stream"))
        if isinstance(behaviour, Scripted):
            behaviour = scripted_as_reply(body, behaviour.chunk_size)
        if isinstance(behaviour, HttpError):
            self._send_json(behaviour.status, behaviour.body or {}, behaviour.headers)
        elif isinstance(behaviour, Malformed):
            if streaming:
                self._start_stream()
                self._event(behaviour.body)
                self._end_stream()
            else:
                self._send_json(200, behaviour.body)
        elif isinstance(behaviour, RawStream):
            self._start_stream()
            for item in behaviour.chunks:
                self._event(item)
            if behaviour.done:
                self._event("[DONE]")
            self._end_stream()
        elif isinstance(behaviour, RawJson):
            self._send_json(200, json.dumps(behaviour.body))
        elif isinstance(behaviour, CutOff):
            self._cut_off(behaviour, streaming)
        elif isinstance(behaviour, Slow):
            self._slow(behaviour, streaming)
        elif streaming and not behaviour.force_json:
            self._start_stream()
            for chunk in stream_chunks(behaviour):
                self._event(chunk)
            self._event("[DONE]")
            if behaviour.open_after_done:
                self._pause(behaviour.open_after_done)
            self._end_stream()
        else:
            self._send_json(200, completion_json(behaviour))

    def _cut_off(self, behaviour: CutOff, streaming: bool) -> None:
        if not streaming:  # promise more body than is sent, then hang up
            data = json.dumps(completion_json(text(behaviour.text))).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self._start_stream()
        chunks = stream_chunks(text(behaviour.text))[: behaviour.after_chunks]
        for chunk in chunks:
            self._pause(behaviour.delay)
            self._event(chunk)
        if behaviour.abrupt:
            self.close_connection = True  # no terminating chunk: the body is incomplete
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        else:
            self._end_stream()

    def _slow(self, behaviour: Slow, streaming: bool) -> None:
        if not streaming:
            self._pause(behaviour.chunks * behaviour.delay)
            self._send_json(200, completion_json(text(behaviour.piece * behaviour.chunks)))
            return
        self._start_stream()
        self._event(_chunk(_delta({"role": "assistant", "content": ""})))
        for _ in range(behaviour.chunks):
            self._pause(behaviour.delay)
            self._event(_chunk(_delta({"content": behaviour.piece})))
            self.server.note("slow_chunks_sent")
        if behaviour.then_call is not None:
            for chunk in stream_chunks(tool_calls(behaviour.then_call))[1:]:
                self._event(chunk)  # the call, its finish_reason and usage
        else:
            self._event(_chunk(_delta({}, "stop")))
        self._event("[DONE]")
        self._end_stream()


class FakeOpenAIServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-reply (a cancelled model call, a test's cut-off stream) is
        # expected here: count it quietly instead of printing a traceback.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def __init__(self, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self._lock = threading.Lock()
        self._queue: collections.deque[Behaviour] = collections.deque()
        self.requests: list[dict[str, Any]] = []
        """Every request received, in order (strictly refused ones too)."""
        self.headers: list[dict[str, str]] = []
        self.rejections: list[dict[str, Any]] = []
        self.queries: list[str] = []
        """The query string of every chat-completions request (an endpoint may carry one)."""
        self.strict = True
        self.counters: collections.Counter[str] = collections.Counter()
        self.default: Behaviour = Scripted()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The value for LLM_BASE_URL."""
        return f"{self.url}/v1"

    @property
    def disconnects(self) -> int:
        with self._lock:
            return self.counters["disconnects"]

    @property
    def request_count(self) -> int:
        """Requests received, refused ones included (a retried call counts each attempt)."""
        with self._lock:
            return len(self.requests)

    @property
    def rejected(self) -> int:
        """Requests refused because a tool call's arguments were not a JSON object."""
        with self._lock:
            return len(self.rejections)

    def reject(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        """Record a request refused by the strict check; the queue is left as it is."""
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            self.rejections.append(body)

    def enqueue(self, *behaviours: Behaviour) -> None:
        with self._lock:
            self._queue.extend(behaviours)

    def record(self, body: dict[str, Any], headers: dict[str, str]) -> Behaviour:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            return self._queue.popleft() if self._queue else self.default

    def note_query(self, query: str) -> None:
        with self._lock:
            self.queries.append(query)

    def note(self, counter: str) -> None:
        with self._lock:
            self.counters[counter] += 1

    def count(self, counter: str) -> int:
        with self._lock:
            return self.counters[counter]

    def received_messages(self) -> list[list[ChatMessage]]:
        """The conversation of every request, as ChatMessages (e.g. for the ordering invariant)."""
        with self._lock:
            bodies = list(self.requests)
        return [from_openai_messages(b.get("messages") or []) for b in bodies]

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": list(self.requests),
                "disconnects": self.counters["disconnects"],
                "rejected": len(self.rejections),
                "counters": dict(self.counters),
            }


class FakeOpenAI:
    """Context manager: a FakeOpenAIServer serving from a background thread."""

    def __init__(self, port: int = 0) -> None:
        self.server = FakeOpenAIServer(port)
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self.server

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


@contextlib.contextmanager
def running(*behaviours: Behaviour) -> Iterator[FakeOpenAIServer]:
    """`with running(text("hi")) as fake:` — start a server with behaviours queued."""
    with FakeOpenAI() as server:
        server.enqueue(*behaviours)
        yield server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A fake OpenAI chat-completions server.")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)
    server = FakeOpenAIServer(args.port)

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    print(f"listening on {server.url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
