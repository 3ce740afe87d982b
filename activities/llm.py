"""An OpenAI-compatible chat-completions client on async httpx, usable without Temporal.

    client = OpenAIChatClient(http, base_url="https://api.openai.com/v1", api_key=key,
                              model="gpt-4o-mini")
    response = await client.complete(messages, tool_specs)   # -> LlmResponse

Streaming (SSE) by default, with tool-call deltas assembled by `index`; a server that answers
`application/json` instead of an event stream is read as a non-streaming reply. Failures become
Temporal `ApplicationError`s: retryable for timeouts, connection errors, a stream cut off,
429 (with `next_retry_delay` from `Retry-After`) and 5xx; non-retryable for other 4xx, for
bodies that do not parse and for replies that are not chat completions (`LlmBadResponse`).
There is no retry loop here: Temporal's retry policy does that.

The API key is sent only in the Authorization header. The key and any credentials in the base
URL (user info, query) are scrubbed from every error text, the URL is only ever shown redacted,
and no error carries the HTTP library's own exception as its cause (Temporal would record the
cause, unscrubbed, in the run's history).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from temporalio.exceptions import ApplicationError

from activities.llm_reply import (
    NotAChatCompletion,
    StreamAssembly,
    read_completion,
    required_object,
    strict_json,
)
from activities.redaction import Redactor, redact_logs, redact_url
from workflows.model import ChatMessage, LlmResponse, ToolSpec

ERROR_TEXT_LIMIT = 1_000
MAX_RETRY_AFTER_SECONDS = 600.0
AFTER_DONE_SECONDS = 1.0
"""How long a streamed body may take to end after `[DONE]` before its connection is dropped."""
AFTER_DONE_LINES = 100
EMPTY_ARGUMENTS = "{}"


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
    ) -> None:
        self._http = http
        self._url = chat_completions_url(base_url)
        self._shown_url = redact_url(self._url)
        self._redactor = Redactor(api_key, base_url, self._url)
        self._api_key = api_key
        self._model = model
        self._stream = stream
        self._heartbeat = heartbeat
        self._timeout = timeout or httpx.Timeout(120.0, connect=15.0)
        self._max_tokens = max_tokens
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
    ) -> dict[str, Any]:
        """The request. `max_tokens` (a run's own limit) wins over the client's default; with
        neither, none is sent and the server's own limit applies."""
        body: dict[str, Any] = {
            "model": model or self._model,
            "messages": [to_openai_message(m) for m in messages],
        }
        if tools:
            body["tools"] = [to_openai_tool(t) for t in tools]
        if temperature is not None:
            body["temperature"] = temperature
        limit = max_tokens if max_tokens is not None else self._max_tokens
        if limit is not None:
            body["max_tokens"] = limit
        if self._stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        *,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> LlmResponse:
        """One chat completion. `on_text` (optional) gets the reply's text piece by piece as it
        streams in; it must not raise or block. The returned message is the only result."""
        body = self.request_body(
            messages, tools, model=model, temperature=temperature, max_tokens=max_tokens
        )
        payload = self._encode(body)
        headers = {
            "Accept": "text/event-stream" if self._stream else "application/json",
            "Content-Type": "application/json",
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        # Every error below is raised `from None`: the HTTP library's exception quotes what it
        # was sending (a header with the key, the URL) and must not travel as the cause.
        try:
            async with self._http.stream(
                "POST", self._url, content=payload, headers=headers, timeout=self._timeout
            ) as response:
                self._heartbeat()
                if response.status_code >= 400:
                    raw = await self._read_bounded(response)
                    raise self._http_error(response, raw)
                content_type = response.headers.get("content-type", "").lower()
                if "text/event-stream" in content_type:
                    return await self._read_stream(response, on_text)
                raw = (await response.aread()).decode("utf-8", errors="replace")
                reply = self._parse_json_reply(raw, response.status_code, content_type)
                if on_text is not None and reply.message.content:
                    on_text(reply.message.content)
                return reply
        except httpx.TimeoutException as err:
            raise ApplicationError(
                f"LLM request timed out ({type(err).__name__}) at {self._shown_url}",
                type="LlmTimeout",
            ) from None
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
        except httpx.RequestError as err:
            raise ApplicationError(
                f"LLM connection failed ({type(err).__name__}: {self._scrub(str(err))})"
                f" at {self._shown_url}",
                type="LlmConnectionError",
            ) from None

    # -- helpers

    def _scrub(self, text: str) -> str:
        return self._redactor.scrub(text)

    def _config_error(self, detail: str) -> ApplicationError:
        return ApplicationError(
            f"LLM request could not be sent ({detail}) to {self._shown_url}: check LLM_BASE_URL"
            " and LLM_API_KEY",
            type="LlmConfigError",
            non_retryable=True,
        )

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
    async def _read_bounded(response: httpx.Response) -> str:
        data = bytearray()
        async for chunk in response.aiter_bytes():
            data.extend(chunk)
            if len(data) > 64 * 1024:
                break
        return data.decode("utf-8", errors="replace")

    def _http_error(self, response: httpx.Response, raw: str) -> ApplicationError:
        status = response.status_code
        detail = self._scrub(provider_error_text(raw))[:ERROR_TEXT_LIMIT] or response.reason_phrase
        message = f"LLM provider answered HTTP {status}: {detail}"
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
            raise ApplicationError(
                "LLM stream was cut off before it finished (no finish_reason, no [DONE])",
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
    except TimeoutError:
        return
