"""Tool arguments: "a JSON string (as models send it) or an already-parsed value", parsed in one
place. Pure; no Temporal import."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParsedArguments:
    ok: bool
    value: Any = None
    error: str = ""


def parse_arguments(arguments: Any) -> ParsedArguments:
    """Normalise tool arguments: a JSON string is parsed, a parsed value is taken as it is.

    Unlike the design this loop comes from (which executed with `null` on bad JSON), a string
    that is not valid JSON is an error the model is told about. An empty string means "no
    arguments".
    """
    if isinstance(arguments, str):
        if not arguments.strip():
            return ParsedArguments(ok=True, value={})
        try:
            return ParsedArguments(ok=True, value=json.loads(arguments))
        except json.JSONDecodeError as err:
            return ParsedArguments(ok=False, error=f"{err.msg} at position {err.pos}")
        except RecursionError:  # ~1,000 levels deep: no tool takes that, and it must not wedge
            return ParsedArguments(ok=False, error="nested too deeply")
    return ParsedArguments(ok=True, value=arguments)


def arguments_value(arguments: Any) -> Any:
    """The value that runs: a JSON string parsed (an empty one is `{}`), a parsed value as it
    is. A string that is not JSON stays the string it is (no tool runs it; rules and people see
    it as text)."""
    if not isinstance(arguments, str):
        return arguments
    if not arguments.strip():
        return {}
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):
        return arguments


def arguments_json(arguments: Any) -> str:
    """The one text form of a call's arguments: the compact JSON of `arguments_value`, with
    non-ASCII characters as they are (`é`, not `\\u00e9`). What rules match a non-string value
    against, what events and people are shown, and what `arguments_sha256` is taken of."""
    try:
        return json.dumps(
            arguments_value(arguments), ensure_ascii=False, separators=(",", ":"), default=str
        )
    except (ValueError, RecursionError):
        return json.dumps(str(arguments), ensure_ascii=False)


def arguments_digest(arguments: Any) -> str:
    """`arguments_sha256` of an answer: the hex SHA-256 of `arguments_json` (UTF-8). A person's
    client sends it with the answer, so the answer is refused when the call changed since it
    was shown."""
    text = arguments_json(arguments)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
