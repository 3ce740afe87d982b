"""An OpenAI-compatible chat-completions client on async httpx (SPEC §7), usable without Temporal.

    client = OpenAIChatClient(http, base_url="https://api.openai.com/v1", api_key=key,
                              model="gpt-4o-mini")
    response = await client.complete(messages, tool_specs)   # -> LlmResponse

Streaming (SSE) by default, with tool-call deltas assembled by `index`; a server that answers
`application/json` instead of an event stream is read as a non-streaming reply. Failures become
Temporal `ApplicationError`s: retryable for timeouts, connection errors, a stream cut off,
429 (with `next_retry_delay` from `Retry-After`) and 5xx; non-retryable for other 4xx and for
bodies that do not parse. There is no retry loop here: Temporal's retry policy does that.
The API key is sent only in the Authorization header and is scrubbed from every error text.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from temporalio.exceptions import ApplicationError

from workflows.model import ChatMessage, LlmResponse, ToolCall, ToolSpec, Usage

ERROR_TEXT_LIMIT = 1_000
MAX_RETRY_AFTER_SECONDS = 600.0
AFTER_DONE_SECONDS = 1.0
"""How long a streamed body may take to end after `[DONE]` before its connection is dropped."""
AFTER_DONE_LINES = 100


def _no_heartbeat() -> None:
    return None


# ---- Request body ----


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


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
                    "function": {"name": call.name, "arguments": _arguments_text(call.arguments)},
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
        value = json.loads(body)
    except (json.JSONDecodeError, ValueError):
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


# ---- Streaming assembly ----


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Assembly:
    """The assistant message as it arrives in stream chunks."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    usage: Usage | None = None
    finished: bool = False
    on_text: Callable[[str], None] | None = None
    """Called with each piece of text as it arrives (the live stream)."""

    def add_chunk(self, chunk: dict[str, Any]) -> None:
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = _usage(usage)
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str):
                self.text.append(content)
                if content and self.on_text is not None:
                    self.on_text(content)
            for position, fragment in enumerate(delta.get("tool_calls") or []):
                index = fragment.get("index", position)
                partial = self.calls.setdefault(int(index), _PartialCall())
                if fragment.get("id"):
                    partial.id = str(fragment["id"])
                function = fragment.get("function") or {}
                if function.get("name"):
                    partial.name += str(function["name"])
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    partial.arguments.append(arguments)
                elif arguments is not None:
                    partial.arguments.append(json.dumps(arguments))
            if choice.get("finish_reason"):
                self.finished = True

    def response(self) -> LlmResponse:
        calls = [
            ToolCall(id=p.id, name=p.name, arguments="".join(p.arguments))
            for _, p in sorted(self.calls.items())
        ]
        return LlmResponse(
            message=ChatMessage.assistant("".join(self.text), calls),
            usage=self.usage or Usage(),
        )


def _usage(value: dict[str, Any]) -> Usage:
    def number(key: str) -> int:
        raw = value.get(key)
        return raw if isinstance(raw, int) else 0

    return Usage(
        prompt_tokens=number("prompt_tokens"), completion_tokens=number("completion_tokens")
    )


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
    ) -> None:
        self._http = http
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key
        self._model = model
        self._stream = stream
        self._heartbeat = heartbeat
        self._timeout = timeout or httpx.Timeout(120.0, connect=15.0)

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIChatClient(url={self._url!r}, model={self._model!r}, stream={self._stream})"

    def request_body(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        model: str | None = None,
        temperature: float | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model or self._model,
            "messages": [to_openai_message(m) for m in messages],
        }
        if tools:
            body["tools"] = [to_openai_tool(t) for t in tools]
        if temperature is not None:
            body["temperature"] = temperature
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
        on_text: Callable[[str], None] | None = None,
    ) -> LlmResponse:
        """One chat completion. `on_text` (optional) gets the reply's text piece by piece as it
        streams in; it must not raise or block. The returned message is the only result."""
        body = self.request_body(messages, tools, model=model, temperature=temperature)
        headers = {"Accept": "text/event-stream" if self._stream else "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            async with self._http.stream(
                "POST", self._url, json=body, headers=headers, timeout=self._timeout
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
                f"LLM request timed out ({type(err).__name__}) at {self._url}",
                type="LlmTimeout",
            ) from err
        except httpx.DecodingError as err:
            raise ApplicationError(
                f"LLM reply could not be decoded ({self._scrub(str(err))})",
                type="LlmBadResponse",
                non_retryable=True,
            ) from err
        except httpx.RequestError as err:
            raise ApplicationError(
                f"LLM connection failed ({type(err).__name__}: {self._scrub(str(err))})"
                f" at {self._url}",
                type="LlmConnectionError",
            ) from err

    # -- helpers

    def _scrub(self, text: str) -> str:
        if self._api_key and self._api_key in text:
            text = text.replace(self._api_key, "[redacted]")
        return text

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

    def _parse_json_reply(self, raw: str, status: int, content_type: str) -> LlmResponse:
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            raise self._unparseable(
                f"reply (HTTP {status}, {content_type or 'no content type'})", raw
            ) from None
        if not isinstance(value, dict):
            raise self._unparseable(f"reply (HTTP {status})", raw)
        if "error" in value and not value.get("choices"):
            detail = self._scrub(provider_error_text(raw))[:ERROR_TEXT_LIMIT]
            raise ApplicationError(
                f"LLM provider answered HTTP {status} with an error: {detail}",
                type="LlmProviderError",
            )
        try:
            message = value["choices"][0]["message"]
            calls = [
                ToolCall(
                    id=str(call.get("id") or ""),
                    name=str(call["function"]["name"]),
                    arguments=_arguments_text(call["function"].get("arguments") or ""),
                )
                for call in message.get("tool_calls") or []
            ]
            content = message.get("content") or ""
            if not isinstance(content, str):
                raise TypeError("content is not a string")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise self._unparseable("reply (no choices[0].message)", raw) from None
        usage = value.get("usage")
        return LlmResponse(
            message=ChatMessage.assistant(content, calls),
            usage=_usage(usage) if isinstance(usage, dict) else Usage(),
        )

    async def _read_stream(
        self, response: httpx.Response, on_text: Callable[[str], None] | None = None
    ) -> LlmResponse:
        assembly = _Assembly(on_text=on_text)
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
                chunk = json.loads(data)
            except json.JSONDecodeError:
                raise self._unparseable("stream chunk", data) from None
            if not isinstance(chunk, dict):
                raise self._unparseable("stream chunk", data)
            if chunk.get("error"):
                detail = self._scrub(provider_error_text(data))[:ERROR_TEXT_LIMIT]
                raise ApplicationError(
                    f"LLM provider reported an error mid-stream: {detail}",
                    type="LlmStreamError",
                )
            assembly.add_chunk(chunk)
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
