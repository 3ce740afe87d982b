"""Tool arguments: "a JSON string (as models send it) or an already-parsed value", parsed in one
place. Pure; no Temporal import."""

from __future__ import annotations

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
