"""What the model server says about its limits: its window (llama.cpp's `GET /props`), and the
HTTP 400 it answers when a request does not fit in it.

A request too long for the model's window is refused the same way every time it is sent, so it
is no passing fault: it becomes its own non-retryable error, `LlmContextExceeded`, whose
`details[0]` is `{"context_tokens": N | None, "request_tokens": M | None}` (the window and the
request size the provider named), for the workflow to compact the conversation and call again.
Recognised: OpenAI's `context_length_exceeded`, llama.cpp's `exceed_context_size_error` (with
`n_prompt_tokens` and `n_ctx` in the body, "exceeds the available context size" in the message,
also wrapped in a string by Ollama), and vLLM's "This model's maximum context length is N tokens.
However, you requested M tokens (…)".
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from activities.llm_reply import strict_json

DEFAULT_CONTEXT_TOKENS = 128_000
"""The window assumed when neither `LLM_CONTEXT_TOKENS` nor the server says."""
CONTEXT_EXCEEDED = "LlmContextExceeded"
"""The `ApplicationError.type` of a request the provider said is too long for the window."""

_WINDOW_PATTERNS = (
    re.compile(r"maximum context length is (\d[\d,]*) tokens", re.IGNORECASE),
    re.compile(r"available context size \((\d[\d,]*) tokens\)", re.IGNORECASE),
    re.compile(r"context (?:window|length) of (\d[\d,]*) tokens", re.IGNORECASE),
)
_REQUEST_PATTERNS = (
    re.compile(r"request \((\d[\d,]*) tokens\) exceeds", re.IGNORECASE),
    re.compile(r"you requested (\d[\d,]*) tokens", re.IGNORECASE),
    re.compile(r"(?:messages|prompt) resulted in (\d[\d,]*) tokens", re.IGNORECASE),
    re.compile(r"request has (\d[\d,]*) (?:input )?tokens", re.IGNORECASE),
)
_MESSAGE_MARKS = (
    "exceeds the available context size",
    "maximum context length",
    "context_length_exceeded",
    "exceed_context_size_error",
)
_CODES = {"context_length_exceeded", "exceed_context_size_error"}


# ---- The server's own figure ----


@dataclass(frozen=True)
class ServerProps:
    """What `GET {server}/props` told: whether the server is llama.cpp's (which takes
    `return_progress`), and its window per request (`n_ctx`), when it said."""

    llama_cpp: bool = False
    n_ctx: int | None = None


def props_url(base_url: str) -> str:
    """`/props` at the server's root: the base URL without its `/v1` (query kept)."""
    parts = urllib.parse.urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path + "/props", parts.query, ""))


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def read_props(status: int, body: str) -> ServerProps:
    """The answer to `GET /props`. Anything but a llama.cpp answer (a 404, HTML, other JSON)
    reads as "not llama.cpp, no window said"."""
    if status != 200:
        return ServerProps()
    try:
        value = strict_json(body)
    except ValueError:
        return ServerProps()
    if not isinstance(value, dict):
        return ServerProps()
    settings = value.get("default_generation_settings")
    if not isinstance(settings, dict):
        return ServerProps()
    # Current versions give the per-slot window under default_generation_settings; some older
    # ones at the top level.
    n_ctx = _count(settings.get("n_ctx")) or _count(value.get("n_ctx"))
    return ServerProps(llama_cpp=True, n_ctx=n_ctx)


# ---- The provider says it is too long ----


@dataclass(frozen=True)
class ContextExceeded:
    """A provider's "the request does not fit": the sizes it named (None where it named none)."""

    context_tokens: int | None = None
    request_tokens: int | None = None

    def details(self) -> dict[str, int | None]:
        return {"context_tokens": self.context_tokens, "request_tokens": self.request_tokens}


def _error_object(body: str) -> tuple[dict[str, Any], str]:
    """The error object of a provider's body and its message (Ollama wraps llama.cpp's whole
    body in a string: that string is read too)."""
    try:
        value = strict_json(body)
    except ValueError:
        return {}, body
    for _ in range(2):
        if not isinstance(value, dict):
            return {}, body
        error = value.get("error")
        if isinstance(error, str):
            try:
                value = strict_json(error)
                continue
            except ValueError:
                return {}, error
        if isinstance(error, dict):
            value = error
        message = value.get("message")
        return value, message if isinstance(message, str) else body
    return {}, body


def _first(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            return int(match.group(1).replace(",", ""))
    return None


def context_exceeded(body: str) -> ContextExceeded | None:
    """What the provider's error body says about the window, when it says the request does not
    fit in it; None for any other error."""
    error, message = _error_object(body)
    named = {value for value in (error.get("code"), error.get("type")) if isinstance(value, str)}
    lowered = message.lower()
    if not named & _CODES and not any(mark in lowered for mark in _MESSAGE_MARKS):
        return None
    return ContextExceeded(
        context_tokens=_count(error.get("n_ctx")) or _first(_WINDOW_PATTERNS, message),
        request_tokens=_count(error.get("n_prompt_tokens")) or _first(_REQUEST_PATTERNS, message),
    )
