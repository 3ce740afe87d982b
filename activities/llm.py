"""An OpenAI-compatible chat-completions client on async httpx, usable without Temporal.

    client = OpenAIChatClient(http, base_url="https://api.openai.com/v1", api_key=key,
                              model="gpt-4o-mini")
    response = await client.complete(messages, tool_specs)   # -> LlmResponse
    window = await client.context_window()                    # -> int, asked once
    summary = await client.summarize(messages)                # -> str, no tools

Streaming (SSE) by default, with tool-call deltas assembled by `index`; a server that answers
`application/json` instead of an event stream is read as a non-streaming reply. A reply whose
whole text is a tool call written as text is taken as that call (`activities.text_calls`).
`parallel_tool_calls` goes with the tools. The server is asked once what it is (`GET /props`):
llama.cpp's is sent `return_progress`, so that a long prompt keeps the stream alive with progress
chunks instead of silence, and says its window (`n_ctx`).

Failures become Temporal `ApplicationError`s: retryable for timeouts (a read timeout at most
twice: the third attempt's is final), connection errors, a stream cut off, 429 (with
`next_retry_delay` from `Retry-After`) and 5xx; non-retryable for other 4xx, for bodies that do
not parse and for replies that are not chat completions (`LlmBadResponse`). A 400 that says the
request does not fit in the model's window is `LlmContextExceeded`, with the sizes in its
details (`activities.context_window`). A server that cannot be reached at all (refused, connect
timeout, DNS, TLS) is `ServerUnreachable`, and one that stops in the middle of its reply (the
connection closed, or the stream ended before the reply did) is `ServerDropped`: both retryable,
`BENIGN` (logged without a traceback), with the server's scheme, host and port and the cause, for
`call_llm` to tell the run (`activities.model_retries`). There is no retry loop here: Temporal's
retry policy does that; the caller passes the attempt number.

The API key is sent only in the Authorization header. The key and any credentials in the base
URL (user info, query) are scrubbed from every error text, the URL is only ever shown redacted,
and no error carries the HTTP library's own exception as its cause (Temporal would record the
cause, unscrubbed, in the run's history).
"""

from __future__ import annotations

import asyncio
import email.utils
import errno
import json
import socket
import ssl
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities.bounded_body import ACCEPT_ENCODING, read_bounded
from activities.context_window import (
    CONTEXT_EXCEEDED,
    DEFAULT_CONTEXT_TOKENS,
    ServerProps,
    context_exceeded,
    props_url,
    read_props,
)
from activities.llm_reply import (
    NotAChatCompletion,
    StreamAssembly,
    read_completion,
    required_object,
    strict_json,
)
from activities.redaction import Redactor, redact_logs
from activities.summary_prompt import SUMMARY_MAX_TOKENS, summary_request
from activities.text_calls import read_text_calls
from runtime.modes import TextCallMode
from runtime.url_redaction import redact_url
from workflows.model import ChatMessage, LlmResponse, ToolSpec

ERROR_TEXT_LIMIT = 1_000
MAX_RETRY_AFTER_SECONDS = 600.0
AFTER_DONE_SECONDS = 1.0
"""How long a streamed body may take to end after `[DONE]` before its connection is dropped."""
AFTER_DONE_LINES = 100
EMPTY_ARGUMENTS = "{}"
TIMEOUT_ATTEMPTS = 3
"""A read timeout is retried at most twice: the same prompt on the same slow server mostly times
out again, and each attempt costs the whole timeout."""
PROPS_TIMEOUT_SECONDS = 5.0
"""The longest the one `GET /props` of a client may take (llama.cpp answers it at once)."""
PROPS_BYTES = 1_000_000
"""The most of a `/props` answer read (it carries the chat template)."""
TIMEOUT_SETTING = "LLM_TIMEOUT_SECONDS"


def _no_heartbeat() -> None:
    return None


# ---- Request body ----


def request_arguments(arguments: Any) -> str:
    """Tool-call arguments as a strict server accepts them in a request: a JSON object text.

    What the model sent goes out as it was when it is one. Anything else (a reply cut off at
    `{"path":`, broken JSON, a bare value) goes out as `{}`: servers that parse the arguments of
    every earlier call (llama.cpp, vLLM) refuse the whole request otherwise, and would refuse
    every retry of it. The run's own history keeps the model's text, and the tool message that
    answered the call already told the model what was wrong with it.
    """
    try:
        value = strict_json(arguments) if isinstance(arguments, str) else arguments
        if not isinstance(value, dict):
            return EMPTY_ARGUMENTS
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")  # a lone surrogate (`"\ud800"`) is not valid JSON text either
    except (ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        return EMPTY_ARGUMENTS
    return arguments if isinstance(arguments, str) else text


def to_openai_message(message: ChatMessage) -> dict[str, Any]:
    """One ChatMessage in the chat-completions request shape."""
    if message.role == "tool":
        return {
            "role": "tool",
            "content": message.content,
            "tool_call_id": message.tool_call_id or "",
        }
    if message.role == "assistant":
        body: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            body["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": request_arguments(call.arguments)},
                }
                for call in message.tool_calls
            ]
            if not message.content:
                body["content"] = None
        return body
    body = {"role": message.role, "content": message.content}
    if message.name:
        body["name"] = message.name
    return body


def to_openai_tool(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    }


def chat_completions_url(base_url: str) -> str:
    """`{base_url}/chat/completions`, with the base URL's query kept as a query (an endpoint
    such as `https://host/v1?api-version=2024-06-01` keeps its parameters)."""
    parts = urllib.parse.urlsplit(base_url)
    path = parts.path.rstrip("/") + "/chat/completions"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


# ---- Errors ----


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """`Retry-After` as seconds: a number, or an HTTP date. None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        reference = datetime.fromtimestamp(now if now is not None else time.time(), UTC)
        seconds = (when - reference).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


def provider_error_text(body: str) -> str:
    """The provider's error message (`{"error": {"message": …}}`), else the body itself."""
    try:
        value = strict_json(body)
    except ValueError:
        return body.strip()
    if isinstance(value, dict):
        error = value.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if isinstance(value.get("message"), str):
            return str(value["message"])
    return body.strip()


class ServerUnreachable(ApplicationError):
    """The model server could not be reached at all (no connection was made): retryable, and
    an expected failure (`BENIGN`: the SDK logs it without a traceback). `server` is its scheme,
    host and port; `reason` is `connection refused`, `timed out`, `DNS: …`, `TLS: …`, …"""

    def __init__(self, message: str, *, server: str, reason: str, type: str) -> None:
        super().__init__(message, type=type, category=ApplicationErrorCategory.BENIGN)
        self.server = server
        self.reason = reason


class ServerDropped(ApplicationError):
    """The model server stopped in the middle of a reply: the connection closed (the server was
    killed or restarted) or the stream ended before the reply did. Retryable, and an expected
    failure (`BENIGN`), like `ServerUnreachable`; `reason` says which."""

    def __init__(self, message: str, *, server: str, reason: str, type: str) -> None:
        super().__init__(message, type=type, category=ApplicationErrorCategory.BENIGN)
        self.server = server
        self.reason = reason


def server_origin(url: str) -> str:
    """`scheme://host:port` of a URL (the default port spelt out), without credentials, path or
    query: what may be shown of a model server anywhere."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return f"{parts.scheme}://{host}:{port}"


def unreachable_cause(err: BaseException) -> str:
    """Why a connection could not be made, in a few words, from the chain of errors under the
    HTTP library's (the OS's own error is at its bottom)."""
    seen: BaseException | None = err
    for _ in range(10):
        if seen is None:
            break
        if isinstance(seen, ssl.SSLError):
            return f"TLS: {seen.reason or type(seen).__name__}"
        if isinstance(seen, socket.gaierror):
            return f"DNS: {seen.strerror or 'name not resolved'}"
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, OSError) and seen.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return "no route to the host"
        seen = seen.__cause__ or seen.__context__
    text = str(err).lower()
    for needle, cause in _CAUSE_WORDS:
        if needle in text:
            return cause
    if isinstance(err, httpx.ConnectTimeout):
        return "timed out"
    return f"connection failed ({type(err).__name__})"


_CAUSE_WORDS = (
    ("refused", "connection refused"),
    ("name or service not known", "DNS: name not resolved"),
    ("name resolution", "DNS: name not resolved"),
    ("nodename nor servname", "DNS: name not resolved"),
    ("ssl", "TLS: handshake failed"),
    ("certificate", "TLS: certificate not accepted"),
    ("timed out", "timed out"),
)


def _is_retryable_status(status: int) -> bool:
    return status in (408, 409, 425, 429) or status >= 500


# ---- The client ----


class OpenAIChatClient:
    """Chat completions against one OpenAI-compatible endpoint, through a shared httpx client."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        base_url: str,
        api_key: str | None,
        model: str,
        *,
        stream: bool = True,
        heartbeat: Callable[[], None] = _no_heartbeat,
        timeout: httpx.Timeout | None = None,
        max_tokens: int | None = None,
        text_tool_calls: TextCallMode = "parse",
        parallel_tool_calls: bool = True,
        context_tokens: int | None = None,
        summary_model: str | None = None,
    ) -> None:
        self._http = http
        self._url = chat_completions_url(base_url)
        self._props_url = props_url(base_url)
        self._shown_url = redact_url(self._url)
        self._redactor = Redactor(api_key, base_url, self._url, self._props_url)
        self._api_key = api_key
        self._model = model
        self._stream = stream
        self._heartbeat = heartbeat
        self._timeout = timeout or httpx.Timeout(120.0, connect=15.0)
        self._max_tokens = max_tokens
        self._text_tool_calls: TextCallMode = text_tool_calls
        self._parallel_tool_calls = parallel_tool_calls
        self._context_tokens = context_tokens
        self._summary_model = summary_model
        self._props: ServerProps | None = None
        self._props_lock = asyncio.Lock()
        redact_logs(self._redactor)

    def __repr__(self) -> str:  # never show the key or the URL's credentials
        return (
            f"OpenAIChatClient(url={self._shown_url!r}, model={self._model!r},"
            f" stream={self._stream})"
        )

    def request_body(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        progress: bool = False,
    ) -> dict[str, Any]:
        """The request. `max_tokens` (a run's own limit) wins over the client's default; with
        neither, none is sent and the server's own limit applies. `parallel_tool_calls` goes
        only with tools (OpenAI refuses it without); `progress` asks a llama.cpp server for
        prompt-progress chunks (only one known to take it: a strict server refuses the field)."""
        body: dict[str, Any] = {
            "model": model or self._model,
            "messages": [to_openai_message(m) for m in messages],
        }
        if tools:
            body["tools"] = [to_openai_tool(t) for t in tools]
            body["parallel_tool_calls"] = self._parallel_tool_calls
        if temperature is not None:
            body["temperature"] = temperature
        limit = self.max_tokens_for(max_tokens)
        if limit is not None:
            body["max_tokens"] = limit
        if self._stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
            if progress:
                body["return_progress"] = True
        return body

    def max_tokens_for(self, max_tokens: int | None) -> int | None:
        """The `max_tokens` a request carries: the call's, else the client's, else none."""
        return max_tokens if max_tokens is not None else self._max_tokens

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        *,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        on_text: Callable[[str], None] | None = None,
        attempt: int = 1,
    ) -> LlmResponse:
        """One chat completion. `on_text` (optional) gets the reply's text piece by piece as it
        streams in; it must not raise or block. The returned message is the only result.
        `attempt` (1, 2, …: Temporal's attempt number) makes the last allowed read timeout final.
        """
        reply = await self._exchange(
            messages,
            tools,
            model=model,
            temperature=temperature,
            max_tokens=max_tokens,
            on_text=on_text,
            attempt=attempt,
        )
        return self._with_text_calls(reply, [t.name for t in tools])

    async def summarize(
        self,
        messages: Sequence[ChatMessage],
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        window: int | None = None,
        attempt: int = 1,
    ) -> str:
        """A summary of `messages` in the model's words, asked with no tools (for compaction),
        in a request that fits `window` tokens when given.
        The model: `summary_model` (LLM_SUMMARY_MODEL), else `model` (the run's), else the
        client's. An empty summary is an error (`LlmEmptySummary`): it must not replace
        anything."""
        limit = self.max_tokens_for(max_tokens) or SUMMARY_MAX_TOKENS
        reply = await self._exchange(
            summary_request(messages, window_tokens=window, reply_tokens=limit),
            (),
            model=self._summary_model or model,
            temperature=None,
            max_tokens=limit,
            on_text=None,
            attempt=attempt,
        )
        text = reply.message.content.strip()
        if not text:
            raise ApplicationError(
                f"LLM summary came back empty (finish_reason {reply.finish_reason!r})",
                type="LlmEmptySummary",
            )
        return text

    async def context_window(self) -> int:
        """The model's window in tokens: `context_tokens` (LLM_CONTEXT_TOKENS) when set, else
        what the server says (llama.cpp's `/props`, asked once), else 128,000. A server that
        cannot be reached is a retryable `LlmConnectionError` (nothing is cached then)."""
        if self._context_tokens is not None:
            return self._context_tokens
        props = await self.server_props()
        if props is None:
            raise ApplicationError(
                f"LLM server could not be reached to read its context window at"
                f" {redact_url(self._props_url)}",
                type="LlmConnectionError",
            )
        return props.n_ctx or DEFAULT_CONTEXT_TOKENS

    async def server_props(self) -> ServerProps | None:
        """What the server says about itself (`GET /props`), asked once per client; None when
        it could not be reached (asked again next time). Never raises."""
        if self._props is not None:
            return self._props
        async with self._props_lock:
            if self._props is None:
                self._props = await self._ask_props()
        return self._props

    async def _ask_props(self) -> ServerProps | None:
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        timeout = httpx.Timeout(PROPS_TIMEOUT_SECONDS)
        try:
            async with asyncio.timeout(PROPS_TIMEOUT_SECONDS):
                async with self._http.stream(
                    "GET", self._props_url, headers=headers, timeout=timeout
                ) as response:
                    raw = await self._read_bounded(response, PROPS_BYTES)
        except (TimeoutError, httpx.ReadTimeout):
            # It answers, but not as llama.cpp does (at once): not asked again.
            return ServerProps()
        except (httpx.HTTPError, httpx.InvalidURL, UnicodeEncodeError, ValueError):
            return None  # unreachable, or a request that cannot be sent: the chat call will say
        return read_props(response.status_code, raw)

    async def _exchange(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        model: str | None,
        temperature: float | None,
        max_tokens: int | None,
        on_text: Callable[[str], None] | None,
        attempt: int,
    ) -> LlmResponse:
        """One request and its reply, read; every failure an ApplicationError."""
        props = await self.server_props() if self._stream else None
        body = self.request_body(
            messages,
            tools,
            model=model,
            temperature=temperature,
            max_tokens=max_tokens,
            progress=props is not None and props.llama_cpp,
        )
        payload = self._encode(body)
        headers = {
            "Accept": "text/event-stream" if self._stream else "application/json",
            "Accept-Encoding": ACCEPT_ENCODING,  # what an error body can be inflated from, bounded
            "Content-Type": "application/json",
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        # Every error below is raised `from None`: the HTTP library's exception quotes what it
        # was sending (a header with the key, the URL) and must not travel as the cause.
        replying = False
        try:
            async with self._http.stream(
                "POST", self._url, content=payload, headers=headers, timeout=self._timeout
            ) as response:
                replying = True
                self._heartbeat()
                if response.status_code >= 400:
                    raw = await read_bounded(response)  # at most 64 KiB, cut before anything
                    raise self._http_error(response, raw)
                content_type = response.headers.get("content-type", "").lower()
                if "text/event-stream" in content_type:
                    reply = await self._read_stream(response, on_text)
                else:
                    raw = (await response.aread()).decode("utf-8", errors="replace")
                    reply = self._parse_json_reply(raw, response.status_code, content_type)
                    if on_text is not None and reply.message.content:
                        on_text(reply.message.content)
        except (httpx.ConnectTimeout, httpx.ConnectError) as err:
            raise self._unreachable(err) from None
        except httpx.PoolTimeout as err:
            raise ApplicationError(
                f"LLM server did not accept a connection within {self._timeout.connect or 0:g} s"
                f" ({type(err).__name__}) at {self._shown_url}",
                type="LlmTimeout",
            ) from None
        except httpx.TimeoutException:
            raise self._timeout_error(attempt) from None
        except httpx.DecodingError as err:
            raise ApplicationError(
                f"LLM reply could not be decoded ({self._scrub(str(err))})",
                type="LlmBadResponse",
                non_retryable=True,
            ) from None
        except (httpx.LocalProtocolError, httpx.UnsupportedProtocol, httpx.InvalidURL) as err:
            # What we would send is not valid HTTP: the same request can never succeed.
            raise self._config_error(f"{type(err).__name__}: {self._scrub(str(err))}") from None
        except UnicodeEncodeError:
            raise self._config_error("LLM_API_KEY is not ASCII text") from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as err:
            # A connection made, then closed under the request: the server went away.
            raise self._dropped(err, replying) from None
        except httpx.RequestError as err:
            raise ApplicationError(
                f"LLM connection failed ({type(err).__name__}: {self._scrub(str(err))})"
                f" at {self._shown_url}",
                type="LlmConnectionError",
            ) from None
        return reply.model_copy(update={"max_tokens": body.get("max_tokens")})

    def _with_text_calls(self, reply: LlmResponse, offered: list[str]) -> LlmResponse:
        """The reply with the tool calls its text holds taken as calls (LLM_TEXT_TOOL_CALLS)."""
        if reply.message.tool_calls:
            return reply
        found = read_text_calls(reply.message.content, offered, self._text_tool_calls)
        if not found.calls and not found.warnings:
            return reply
        update: dict[str, Any] = {"warnings": [*reply.warnings, *found.warnings]}
        if found.calls:
            update["message"] = ChatMessage.assistant(found.content, found.calls)
            update["calls_from_text"] = True
        return reply.model_copy(update=update)

    # -- helpers

    def _scrub(self, text: str) -> str:
        return self._redactor.scrub(text)

    def _unreachable(self, err: httpx.ConnectTimeout | httpx.ConnectError) -> ServerUnreachable:
        """No connection to the server at all: its origin and why, for people and the log."""
        cause = unreachable_cause(err)
        server = server_origin(self._url)
        timed_out = isinstance(err, httpx.ConnectTimeout)
        if timed_out:
            cause = f"{cause} after {self._timeout.connect or 0:g} s"
        return ServerUnreachable(
            f"LLM server {server} cannot be reached ({cause}): {type(err).__name__} at"
            f" {self._shown_url}",
            server=server,
            reason=cause,
            type="LlmTimeout" if timed_out else "LlmConnectionError",
        )

    def _dropped(self, err: httpx.TransportError, replying: bool) -> ServerDropped:
        """The server closed the connection: in the middle of its reply (`replying`), or before
        it replied at all."""
        when = "in the middle of its reply" if replying else "before it replied"
        return ServerDropped(
            f"LLM server {server_origin(self._url)} closed the connection {when}"
            f" ({type(err).__name__}) at {self._shown_url}",
            server=server_origin(self._url),
            reason=f"closed the connection {when}",
            type="LlmConnectionError",
        )

    def _config_error(self, detail: str) -> ApplicationError:
        return ApplicationError(
            f"LLM request could not be sent ({detail}) to {self._shown_url}: check LLM_BASE_URL"
            " and LLM_API_KEY",
            type="LlmConfigError",
            non_retryable=True,
        )

    def _timeout_error(self, attempt: int) -> ApplicationError:
        seconds = self._timeout.read or 0
        final = attempt >= TIMEOUT_ATTEMPTS
        message = (
            f"LLM request timed out after {seconds:g} s without a byte from the server"
            f" ({TIMEOUT_SETTING}) at {self._shown_url}"
        )
        if final:
            message += f"; not tried again: {attempt} attempts timed out"
        return ApplicationError(message, type="LlmTimeout", non_retryable=final)

    def _encode(self, body: dict[str, Any]) -> bytes:
        try:
            return json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except ValueError as err:  # NaN, or text that is not Unicode (a lone surrogate)
            raise ApplicationError(
                f"LLM request could not be encoded as JSON ({type(err).__name__})",
                type="LlmBadRequest",
                non_retryable=True,
            ) from None

    @staticmethod
    async def _read_bounded(response: httpx.Response, limit: int = 64 * 1024) -> str:
        data = bytearray()
        async for chunk in response.aiter_bytes():
            data.extend(chunk)
            if len(data) > limit:
                break
        return data.decode("utf-8", errors="replace")

    def _http_error(self, response: httpx.Response, raw: str) -> ApplicationError:
        status = response.status_code
        detail = self._scrub(provider_error_text(raw))[:ERROR_TEXT_LIMIT] or response.reason_phrase
        message = f"LLM provider answered HTTP {status}: {detail}"
        exceeded = context_exceeded(raw) if status == 400 else None
        if exceeded is not None:
            return ApplicationError(
                f"{message} (the request does not fit in the model's context window)",
                exceeded.details(),
                type=CONTEXT_EXCEEDED,
                non_retryable=True,
            )
        if not _is_retryable_status(status):
            return ApplicationError(message, type=f"LlmHttp{status}", non_retryable=True)
        delay = None
        if status in (429, 503):
            seconds = retry_after_seconds(response.headers.get("retry-after"))
            if seconds is not None:
                delay = timedelta(seconds=seconds)
        return ApplicationError(message, type=f"LlmHttp{status}", next_retry_delay=delay)

    def _unparseable(self, what: str, raw: str) -> ApplicationError:
        snippet = self._scrub(raw.strip())[:200]
        return ApplicationError(
            f"LLM provider sent an unparseable {what}: {snippet!r}",
            type="LlmBadResponse",
            non_retryable=True,
        )

    def _wrong_shape(self, what: str, problem: NotAChatCompletion, raw: str) -> ApplicationError:
        snippet = self._scrub(raw.strip())[:200]
        return ApplicationError(
            f"LLM provider sent an unparseable {what} ({problem}): {snippet!r} is JSON, but not"
            " a chat completion",
            type="LlmBadResponse",
            non_retryable=True,
        )

    def _parse_json_reply(self, raw: str, status: int, content_type: str) -> LlmResponse:
        try:
            value = strict_json(raw)
        except ValueError:
            raise self._unparseable(
                f"reply (HTTP {status}, {content_type or 'no content type'})", raw
            ) from None
        if isinstance(value, dict) and "error" in value and not value.get("choices"):
            detail = self._scrub(provider_error_text(raw))[:ERROR_TEXT_LIMIT]
            raise ApplicationError(
                f"LLM provider answered HTTP {status} with an error: {detail}",
                type="LlmProviderError",
            )
        try:
            return read_completion(value)
        except NotAChatCompletion as problem:
            raise self._wrong_shape("reply", problem, raw) from None

    async def _read_stream(
        self, response: httpx.Response, on_text: Callable[[str], None] | None = None
    ) -> LlmResponse:
        assembly = StreamAssembly(on_text=on_text)
        done = False
        lines = response.aiter_lines()
        async for line in lines:
            self._heartbeat()
            if not line.startswith("data:"):
                continue  # comments (": keep-alive"), `event:` and `id:` lines, blank separators
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            try:
                chunk = strict_json(data)
            except ValueError:
                raise self._unparseable("stream chunk", data) from None
            try:
                if required_object(chunk, "the stream chunk").get("error"):
                    detail = self._scrub(provider_error_text(data))[:ERROR_TEXT_LIMIT]
                    exceeded = context_exceeded(data)
                    if exceeded is not None:
                        raise ApplicationError(
                            f"LLM provider reported an error mid-stream: {detail} (the request"
                            " does not fit in the model's context window)",
                            exceeded.details(),
                            type=CONTEXT_EXCEEDED,
                            non_retryable=True,
                        )
                    raise ApplicationError(
                        f"LLM provider reported an error mid-stream: {detail}",
                        type="LlmStreamError",
                    )
                assembly.add_chunk(chunk)
            except NotAChatCompletion as problem:
                raise self._wrong_shape("stream chunk", problem, data) from None
        if done:
            await _read_to_the_end(lines)
        elif not assembly.finished:
            raise ServerDropped(
                "LLM stream was cut off before it finished (no finish_reason, no [DONE])",
                server=server_origin(self._url),
                reason="ended its reply before it finished (no finish_reason, no [DONE])",
                type="LlmStreamCutOff",
            )
        return assembly.response()


async def _read_to_the_end(lines: AsyncIterator[str]) -> None:
    """Read what follows `[DONE]`: normally only the end of the body. A body read to its end lets
    httpx return the connection to its pool; one left unread makes it close the connection, so
    every round would pay a new TCP (and TLS) handshake. A server that keeps sending, or keeps
    the body open, only loses its connection: the reply is already complete."""
    try:
        async with asyncio.timeout(AFTER_DONE_SECONDS):
            extra = 0
            async for _ in lines:
                extra += 1
                if extra > AFTER_DONE_LINES:
                    return
    except (TimeoutError, httpx.TransportError):  # a server gone after `[DONE]`: replied whole
        return
