"""Reading a chat-completions reply, streamed chunk by chunk or whole, field by field.

Every field the client uses is checked for the shape the protocol gives it before it is used, so a
reply that is well-formed JSON but not a chat completion (`"choices": 5`, a tool call that is a
string, a usage count that is text) is one `NotAChatCompletion` naming the field: never an
AttributeError or TypeError deep inside, which would be taken for a passing fault and retried,
the provider paid each time. Fields the client does not use are not looked at.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workflows.model import ChatMessage, LlmResponse, ToolCall, Usage


class NotAChatCompletion(ValueError):
    """A reply that parses as JSON but does not have the shape of a chat completion."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def strict_json(text: str) -> Any:
    """JSON as a strict server reads it: no `NaN`/`Infinity`; a ValueError for anything that is
    not JSON, including nesting too deep to read."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


# ---- Shapes ----


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    return "null" if value is None else type(value).__name__


def _wrong(where: str, value: Any, expected: str) -> NotAChatCompletion:
    return NotAChatCompletion(f"{where} is {_kind(value)}, not {expected}")


def required_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _wrong(where, value, "an object")
    return value


def _object(value: Any, where: str) -> dict[str, Any]:
    """An optional object: absent or null reads as empty."""
    return {} if value is None else required_object(value, where)


def _array(value: Any, where: str) -> list[Any]:
    """An optional array: absent or null reads as empty."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _wrong(where, value, "an array")
    return value


def _string(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _wrong(where, value, "a string")


def _count(value: Any, where: str) -> int | None:
    """An optional non-negative integer (a token count, an index)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _wrong(where, value, "a non-negative integer")
    return value


def _arguments(value: Any, where: str) -> str | None:
    """Tool-call arguments: a JSON text as the protocol has it, or an object some servers send
    already parsed (kept as its JSON text)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    raise _wrong(where, value, "a string")


MAX_CALL_TOKENS = 1_000_000_000
"""More tokens than any model takes or writes in one call: a usage count past it is not one."""


def read_usage(value: Any) -> Usage | None:
    """`usage`: None when absent or null."""
    if value is None:
        return None
    usage = required_object(value, "usage")
    return Usage(
        prompt_tokens=_count(usage.get("prompt_tokens"), "usage.prompt_tokens") or 0,
        completion_tokens=_count(usage.get("completion_tokens"), "usage.completion_tokens") or 0,
    )


def implausible_usage(usage: Usage) -> str | None:
    """Why a reported usage is no model's (a count past `MAX_CALL_TOKENS`), or None. Such a
    reply is malformed, not a failure to retry: its text and calls stand, its usage does not."""
    largest = max(usage.prompt_tokens, usage.completion_tokens)
    if largest <= MAX_CALL_TOKENS:
        return None
    return (
        f"the model server reported {largest:,} tokens for one call, more than any model takes"
        f" ({MAX_CALL_TOKENS:,}): its usage is ignored as malformed"
    )


def usage_of(value: Any) -> tuple[Usage | None, str | None]:
    """A reply's usage as the run may count it (None: absent, or malformed), and the warning
    for a malformed one."""
    usage = read_usage(value)
    if usage is None:
        return None, None
    if (problem := implausible_usage(usage)) is not None:
        return None, problem
    return usage, None


# ---- A whole reply ----


def read_completion(value: Any) -> LlmResponse:
    """A non-streamed reply (`chat.completion`): the first choice's message, usage and
    finish_reason."""
    reply = required_object(value, "the reply")
    choices = _array(reply.get("choices"), "choices")
    if not choices:
        raise NotAChatCompletion("no choices[0].message")
    choice = required_object(choices[0], "choices[0]")
    message = required_object(choice.get("message"), "choices[0].message")
    content = _string(message.get("content"), "choices[0].message.content") or ""
    calls = []
    for position, raw in enumerate(_array(message.get("tool_calls"), "message.tool_calls")):
        where = f"message.tool_calls[{position}]"
        call = required_object(raw, where)
        function = required_object(call.get("function"), f"{where}.function")
        name = _string(function.get("name"), f"{where}.function.name")
        if not name:
            raise NotAChatCompletion(f"{where}.function has no name")
        calls.append(
            ToolCall(
                id=_string(call.get("id"), f"{where}.id") or "",
                name=name,
                arguments=_arguments(function.get("arguments"), f"{where}.function.arguments")
                or "",
            )
        )
    usage, problem = usage_of(reply.get("usage"))
    return LlmResponse(
        message=ChatMessage.assistant(content, calls),
        usage=usage or Usage(),
        usage_reported=usage is not None,
        finish_reason=_string(choice.get("finish_reason"), "choices[0].finish_reason"),
        warnings=[problem] if problem else [],
    )


# ---- A streamed reply ----


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAssembly:
    """The assistant message as it arrives in stream chunks (`chat.completion.chunk`), tool
    calls assembled by `index`."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    usage: Usage | None = None
    usage_problem: str | None = None
    """Why a usage the stream reported was ignored (a count no model could make)."""
    finish_reason: str | None = None
    """The last non-null `finish_reason` of choice 0."""
    on_text: Callable[[str], None] | None = None
    """Called with each piece of text as it arrives (the live stream)."""

    @property
    def finished(self) -> bool:
        return bool(self.finish_reason)

    def add_chunk(self, value: Any) -> None:
        chunk = required_object(value, "the stream chunk")
        usage, problem = usage_of(chunk.get("usage"))
        if usage is not None:
            self.usage = usage
        elif problem is not None:
            self.usage_problem = problem
        for position, raw in enumerate(_array(chunk.get("choices"), "choices")):
            where = f"choices[{position}]"
            choice = required_object(raw, where)
            if (_count(choice.get("index"), f"{where}.index") or 0) != 0:
                continue
            self._add_delta(_object(choice.get("delta"), f"{where}.delta"), f"{where}.delta")
            finish = _string(choice.get("finish_reason"), f"{where}.finish_reason")
            if finish:
                self.finish_reason = finish

    def _add_delta(self, delta: dict[str, Any], where: str) -> None:
        content = _string(delta.get("content"), f"{where}.content")
        if content:
            self.text.append(content)
            if self.on_text is not None:
                self.on_text(content)
        for position, raw in enumerate(_array(delta.get("tool_calls"), f"{where}.tool_calls")):
            at = f"{where}.tool_calls[{position}]"
            fragment = required_object(raw, at)
            index = _count(fragment.get("index"), f"{at}.index")
            partial = self.calls.setdefault(position if index is None else index, _PartialCall())
            call_id = _string(fragment.get("id"), f"{at}.id")
            if call_id:
                partial.id = call_id
            function = _object(fragment.get("function"), f"{at}.function")
            name = _string(function.get("name"), f"{at}.function.name")
            if name:
                partial.name += name
            arguments = _arguments(function.get("arguments"), f"{at}.function.arguments")
            if arguments is not None:
                partial.arguments.append(arguments)

    def response(self) -> LlmResponse:
        calls = [
            ToolCall(id=p.id, name=p.name, arguments="".join(p.arguments))
            for _, p in sorted(self.calls.items())
        ]
        return LlmResponse(
            message=ChatMessage.assistant("".join(self.text), calls),
            usage=self.usage or Usage(),
            usage_reported=self.usage is not None,
            finish_reason=self.finish_reason,
            warnings=[self.usage_problem] if self.usage_problem and self.usage is None else [],
        )
