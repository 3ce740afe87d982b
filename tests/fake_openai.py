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

It behaves as one of three real servers (`flavour`): `openai` (the default: a request field
OpenAI does not know, such as llama.cpp's `return_progress`, or `parallel_tool_calls` without
tools, is answered 400 with OpenAI's body; `GET /props` is 404; parallel calls unless
`parallel_tool_calls` is false), `llama.cpp` (any field taken; `GET /props` answers llama.cpp's
shape with `n_ctx`; one call per reply unless `parallel_tool_calls` is true; a `Stall` sends
prompt-progress chunks to a streamed request that asked for `return_progress`) or `vllm`. Given
a window (`context_tokens`), it counts tokens as bytes/3 of the request's messages and tools,
answers a request that does not fit with that flavour's own 400 body (llama.cpp's
`exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`, OpenAI's
`context_length_exceeded`, vLLM's "maximum context length"), stops a reply that would overflow
the window (or `max_tokens`) at `length`, and reports the counted tokens in `usage`. Requests
refused with a 400 are in `requests` and their bodies in `refusals`.

Behaviours: `text`, `tool_calls` (several calls stream in parallel, interleaved), `Reply(...,
force_json=True)` (answers JSON to a streaming request: the client's fallback), `Reply(...,
finish_reason="length")` or `cut_short(...)` (a reply stopped at the token limit), `RawStream`
and `RawJson` (exactly these chunks or this body, e.g. a shape that is no chat completion),
`rate_limited`,
`server_error`, `unauthorized`, `HttpError(status, body, headers)`, `HugeError(status, mib,
gzip)` (an error body of hundreds of MiB), `Malformed`, `CutOff`
(stream cut off midway; `abrupt=False` ends the body cleanly but without `[DONE]`), `Slow`
(N chunks with a delay: use it to test cancellation, then wait for `fake.disconnects`), `Stall`
(silence, or llama.cpp's progress chunks, then another behaviour: a slow prompt), `Scripted`
(the default).

As a subprocess (e.g. for a worker started as its own process):

    python -m tests.fake_openai --port 8765 [--flavour llama.cpp] [--context-tokens 2048]
    # prints "listening on http://127.0.0.1:8765"; serves until SIGTERM / Ctrl-C
    LLM_BASE_URL=http://127.0.0.1:8765/v1 python worker.py

Any path ending in `/chat/completions` is served (so the base URL may or may not end in `/v1`).
Over HTTP, `POST /_fake/enqueue` with a JSON list of behaviours (`{"kind": "text", "text":
"hi"}`, kinds: text, tool_calls, reply, http_error, huge_error, malformed, cut_off, slow, scripted,
raw_stream, raw_json, stall with its `then` as another such object) queues them, and
`GET /_fake/requests` returns `{"requests": [...], "disconnects": N, "rejected": N,
"counters": {...}}`.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import itertools
import json
import select
import signal
import socket
import sys
import threading
import time
import urllib.parse
import zlib
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
    chunk_delay: float = 0.0
    """Seconds between streamed chunks (a reply generated at a person's reading pace)."""

    @property
    def finish(self) -> str:
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")


def text(
    content: str, chunk_size: int = 3, finish_reason: str | None = None, chunk_delay: float = 0.0
) -> Reply:
    return Reply(
        text=content, chunk_size=chunk_size, finish_reason=finish_reason, chunk_delay=chunk_delay
    )


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
class HugeError:
    """An error status with a body of `mib` MiB, written piece by piece from a generator (the
    server holds one piece at a time), as a hostile or broken server would; `gzip`: the body
    goes compressed (`Content-Encoding: gzip`), a few hundred KiB that inflate to all of it.
    How much of it went out before the client hung up is counted in `huge_bytes_sent`."""

    status: int = 500
    mib: int = 200
    gzip: bool = False


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


@dataclass
class Stall:
    """Silence for `seconds` (a slow server reading a long prompt), then `then`. A llama.cpp
    server (`flavour = "llama.cpp"`) asked for `return_progress` on a streamed request instead
    starts the stream at once and sends a prompt-progress chunk every `progress_every` seconds
    while it stalls, as llama.cpp does."""

    seconds: float = 1.0
    then: Any = None
    """The behaviour that follows (default: the scripted assistant)."""
    progress_every: float = 0.2


Behaviour = (
    Reply
    | HttpError
    | HugeError
    | Malformed
    | CutOff
    | Slow
    | Scripted
    | RawStream
    | RawJson
    | Stall
)


def behaviour_from_json(spec: dict[str, Any]) -> Behaviour:
    """The HTTP control endpoint's form of a behaviour: `{"kind": ..., **fields}`."""
    spec = dict(spec)
    kind = spec.pop("kind")
    if kind == "text":
        return text(spec.pop("text"), **spec)
    if kind == "tool_calls":
        calls = [tuple(c) for c in spec.pop("calls")]
        return tool_calls(*calls, **spec)
    if kind == "stall":
        then = spec.pop("then", None)
        return Stall(then=behaviour_from_json(then) if then else None, **spec)
    kinds: dict[str, Callable[..., Behaviour]] = {
        "reply": Reply,
        "http_error": HttpError,
        "huge_error": HugeError,
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

FLAVOURS = ("openai", "llama.cpp", "vllm")
OPENAI_FIELDS = frozenset(
    {
        "model", "messages", "tools", "tool_choice", "parallel_tool_calls", "temperature",
        "top_p", "n", "stream", "stream_options", "stop", "max_tokens", "max_completion_tokens",
        "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs",
        "user", "seed", "response_format", "service_tier", "store", "metadata", "modalities",
        "audio", "prediction", "reasoning_effort", "web_search_options", "functions",
        "function_call", "verbosity", "prompt_cache_key", "safety_identifier",
    }
)  # fmt: skip
"""The request fields OpenAI's chat completions take: any other is refused with a 400."""


def openai_refusal(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's 400 body for a request it refuses before reading the conversation: a field it
    does not know (`return_progress`, …), or `parallel_tool_calls` without tools."""
    for name in body:
        if name not in OPENAI_FIELDS:
            return {
                "error": {
                    "message": f"Unrecognized request argument supplied: {name}",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": None,
                }
            }
    if "parallel_tool_calls" in body and not body.get("tools"):
        return {
            "error": {
                "message": "Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only"
                " allowed when 'tools' are specified.",
                "type": "invalid_request_error",
                "param": "parallel_tool_calls",
                "code": None,
            }
        }
    return None


def count_tokens(text: str) -> int:
    """The fake's tokenizer: one token per 3 bytes of UTF-8 (at least 1)."""
    return max(1, len(text.encode("utf-8")) // 3)


def prompt_tokens(body: dict[str, Any]) -> int:
    """A request's prompt size as the fake counts it (and reports in `usage.prompt_tokens`): its
    messages and tools as JSON."""
    counted = json.dumps(body.get("messages") or [], ensure_ascii=False)
    if body.get("tools"):
        counted += json.dumps(body["tools"], ensure_ascii=False)
    return count_tokens(counted)


def context_refusal(
    flavour: str, prompt: int, window: int, completion: int | None
) -> dict[str, Any]:
    """The provider's own 400 body for a request that does not fit in its window."""
    if flavour == "llama.cpp":
        return {
            "error": {
                "code": 400,
                "message": f"request ({prompt} tokens) exceeds the available context size"
                f" ({window} tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt,
                "n_ctx": window,
            }
        }
    head = f"This model's maximum context length is {window} tokens. However, "
    if completion is not None:
        message = (
            f"{head}you requested {prompt + completion} tokens ({prompt} in the messages,"
            f" {completion} in the completion). Please reduce the length of the messages or"
            " completion."
        )
    elif flavour == "vllm":
        message = (
            f"{head}you requested {prompt} tokens in the messages, Please reduce the length of"
            " the messages."
        )
    else:
        message = (
            f"{head}your messages resulted in {prompt} tokens. Please reduce the length of the"
            " messages."
        )
    if flavour == "vllm":
        return {
            "object": "error",
            "message": message,
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def llama_cpp_props(n_ctx: int) -> dict[str, Any]:
    """What llama.cpp's `GET /props` answers (the fields a client reads, and a few more)."""
    return {
        "default_generation_settings": {
            "id": 0,
            "id_task": -1,
            "n_ctx": n_ctx,
            "speculative": False,
            "is_processing": False,
            "params": {"n_predict": -1, "temperature": 0.8, "top_k": 40, "top_p": 0.95},
        },
        "total_slots": 1,
        "model_path": "/models/fake-model.gguf",
        "chat_template": "{{ messages }}",
        "modalities": {"vision": False, "audio": False},
        "build_info": "b0-fake",
        "bos_token": "",
        "eos_token": "<|im_end|>",
    }


def progress_chunk(total: int, processed: int, started: float) -> dict[str, Any]:
    """llama.cpp's prompt-progress chunk (`return_progress`): an empty delta and the counts."""
    chunk = _chunk(_delta({"role": "assistant", "content": None}))
    chunk["system_fingerprint"] = "b0-fake"
    chunk["prompt_progress"] = {
        "total": total,
        "cache": 0,
        "processed": processed,
        "time_ms": int((time.monotonic() - started) * 1000),
    }
    return chunk


def fitted(reply: Reply, prompt: int, window: int | None, max_tokens: int | None) -> Reply:
    """The reply as a server with this window and limit generates it: cut where the tokens run
    out (`finish_reason: "length"`), with the usage it counted."""
    budget = None if max_tokens is None else max_tokens
    if window is not None:
        budget = window - prompt if budget is None else min(budget, window - prompt)
    pieces = [reply.text, *(arguments for _, _, arguments in reply.tool_calls)]
    used = sum(count_tokens(piece) for piece in pieces if piece)
    if budget is None or used <= budget:
        return dataclasses.replace(reply, usage=(prompt, used))
    left = max(0, budget) * 3  # bytes, roughly characters, the budget still allows
    text = reply.text[:left]
    left -= len(text)
    calls = []
    for call_id, name, arguments in reply.tool_calls:
        if left <= 0:
            break
        calls.append((call_id, name, arguments[:left]))
        left -= len(arguments)
    return dataclasses.replace(
        reply, text=text, tool_calls=calls, finish_reason="length", usage=(prompt, max(0, budget))
    )


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
        self.server.opened(self.connection)

    def finish(self) -> None:
        self.server.closed(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

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
        route = urllib.parse.urlsplit(self.path).path.rstrip("/")
        if route == "/_fake/requests":
            self._send_json(200, self.server.snapshot())
        elif route == "/props":
            self.server.note("props_requests")
            try:
                self._pause(self.server.props_delay)
            except ClientGone:
                self.close_connection = True
                return
            props = self.server.props_answer()
            if props is None:
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            else:
                self._send_json(200, props)
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
        refusal = self.server.refusal(body)
        if refusal is not None:
            self.server.refuse(body, dict(self.headers.items()), refusal)
            self._send_json(400, refusal)
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
        if isinstance(behaviour, Reply):
            behaviour = self.server.as_generated(body, behaviour)
        if isinstance(behaviour, Stall):
            self._stall(body, behaviour, streaming)
        elif isinstance(behaviour, HttpError):
            self._send_json(behaviour.status, behaviour.body or {}, behaviour.headers)
        elif isinstance(behaviour, HugeError):
            self._huge_error(behaviour)
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
                if behaviour.chunk_delay:
                    self._pause(behaviour.chunk_delay)
                self._event(chunk)
            self._event("[DONE]")
            if behaviour.open_after_done:
                self._pause(behaviour.open_after_done)
            self._end_stream()
        else:
            self._send_json(200, completion_json(behaviour))

    def _stall(self, body: dict[str, Any], behaviour: Stall, streaming: bool) -> None:
        then = behaviour.then if behaviour.then is not None else Scripted()
        progress = (
            streaming
            and self.server.flavour == "llama.cpp"
            and body.get("return_progress") is True
            and behaviour.progress_every > 0
        )
        if not progress:
            self._pause(behaviour.seconds)  # not a byte: the client's read timeout runs
            self._answer(body, then)
            return
        self._start_stream()
        total = prompt_tokens(body)
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < behaviour.seconds:
            processed = min(total, int(total * elapsed / behaviour.seconds))
            self._event(progress_chunk(total, processed, started))
            self.server.note("progress_chunks_sent")
            self._pause(min(behaviour.progress_every, behaviour.seconds - elapsed))
        self._event(progress_chunk(total, total, started))
        if isinstance(then, Scripted):
            then = scripted_as_reply(body, then.chunk_size)
        if not isinstance(then, Reply):
            raise TypeError("a llama.cpp stall with progress is followed by a reply")
        for chunk in stream_chunks(self.server.as_generated(body, then)):
            self._event(chunk)
        self._event("[DONE]")
        self._end_stream()

    def _huge_error(self, behaviour: HugeError) -> None:
        self.send_response(behaviour.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        if behaviour.gzip:
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        self.close_connection = True
        for piece in _huge_pieces(behaviour):
            self._write_chunk(piece)  # ClientGone once the client hung up
            self.server.note("huge_bytes_sent", len(piece))
        self._end_stream()

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


def _huge_pieces(behaviour: HugeError) -> Iterator[bytes]:
    """The body of a `HugeError`, piece by piece: an error object whose message never ends."""
    line = b"\x1b[31m" + b"x" * 1000 + b"\n"
    pieces = itertools.chain(
        [b'{"error": {"message": "boom '],
        itertools.repeat(line * 64, behaviour.mib * 16),
    )
    if not behaviour.gzip:
        yield from pieces
        return
    packer = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    for piece in pieces:
        packed = packer.compress(piece)
        if packed:
            yield packed
    yield packer.flush()


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
        self.flavour = "openai"
        """Which server it behaves as: `openai` (refuses fields it does not know, `/props` is
        404, parallel calls by default), `llama.cpp` (takes any field, answers `/props`, one
        call per reply unless `parallel_tool_calls` is true, progress chunks on request) or
        `vllm`. The context-exceeded 400 is each one's own body."""
        self.context_tokens: int | None = None
        """The model's window: a request whose prompt (see `prompt_tokens`) does not fit is
        refused with the flavour's 400; a reply that would overflow it stops at `length`. Set,
        the usage reports the counted tokens."""
        self.props: dict[str, Any] | None = None
        """What `GET /props` answers for a llama.cpp flavour (None: llama.cpp's own shape)."""
        self.props_delay = 0.0
        """Seconds `GET /props` takes to answer (a server that is slow to say what it is)."""
        self.refusals: list[dict[str, Any]] = []
        """The 400 bodies sent for requests refused before their conversation was read."""
        self._connections: set[socket.socket] = set()
        """The clients' open connections (keep-alive holds one between requests)."""

    def opened(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.add(connection)

    def closed(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.discard(connection)

    def drop_connections(self) -> None:
        """Close every open connection, as a server that stops does: a client's next request on
        a kept-alive connection fails instead of being answered after the server stopped."""
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

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

    def props_answer(self) -> dict[str, Any] | None:
        """The `/props` answer: llama.cpp's (with the window), or None (a 404) for others."""
        if self.flavour != "llama.cpp":
            return None
        return (
            self.props if self.props is not None else llama_cpp_props(self.context_tokens or 4096)
        )

    def refusal(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The 400 body this server answers `body` with before generating anything, if any."""
        if self.flavour == "openai":
            refused = openai_refusal(body)
            if refused is not None:
                return refused
        window = self.context_tokens
        if window is None:
            return None
        prompt = prompt_tokens(body)
        limit = body.get("max_tokens")
        completion = limit if isinstance(limit, int) and self.flavour != "llama.cpp" else None
        if self.flavour == "llama.cpp" or completion is None:
            fits = prompt < window if self.flavour == "llama.cpp" else prompt <= window
        else:
            fits = prompt + completion <= window
        return None if fits else context_refusal(self.flavour, prompt, window, completion)

    def refuse(self, body: dict[str, Any], headers: dict[str, str], answer: dict[str, Any]) -> None:
        """Record a request refused with a 400; the queue is left as it is."""
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            self.refusals.append(answer)

    def as_generated(self, body: dict[str, Any], reply: Reply) -> Reply:
        """A reply as this server would send it for `body`: one call only unless parallel calls
        were asked for (llama.cpp's default) or are the default (OpenAI's); within the window."""
        parallel = body.get("parallel_tool_calls", self.flavour != "llama.cpp")
        if len(reply.tool_calls) > 1 and parallel is not True:
            reply = dataclasses.replace(reply, tool_calls=list(reply.tool_calls[:1]))
            self.note("parallel_calls_held_back")
        if self.context_tokens is None:
            return reply
        limit = body.get("max_tokens")
        return fitted(
            reply,
            prompt_tokens(body),
            self.context_tokens,
            limit if isinstance(limit, int) else None,
        )

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

    def note(self, counter: str, amount: int = 1) -> None:
        with self._lock:
            self.counters[counter] += amount

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
        self.server.drop_connections()  # taken down: nothing answers on this port any more
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
    parser.add_argument("--flavour", choices=FLAVOURS, default="openai", help="which server")
    parser.add_argument("--context-tokens", type=int, default=None, help="the model's window")
    args = parser.parse_args(argv)
    server = FakeOpenAIServer(args.port)
    server.flavour = args.flavour
    server.context_tokens = args.context_tokens

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
