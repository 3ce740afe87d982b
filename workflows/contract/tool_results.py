"""The strings the model sees in tool messages, in one place (the workflow writes some, the
activities others): the `{"ok", "error", "data"}` envelope, `Rejected: {reason}` (`User denied`
by default), `Tool '{name}' not found`, `Framework error: …`, the invalid-arguments and
too-many-calls envelopes, and the one truncation marker. Pure; no Temporal import."""

from __future__ import annotations

import json
from typing import Any

DEFAULT_REJECTION_REASON = "User denied"

TRUNCATION_MARKER = "…[truncated {dropped} characters]"


def envelope_error(message: str) -> str:
    """The error envelope, as the JSON text a tool message carries."""
    return json.dumps({"ok": False, "error": message, "data": None}, ensure_ascii=False)


def rejection_message(reason: str | None) -> str:
    return f"Rejected: {reason or DEFAULT_REJECTION_REASON}"


def tool_not_found_message(name: str) -> str:
    return f"Tool '{name}' not found"


def framework_error_message(error: str) -> str:
    return envelope_error(f"Framework error: {error}")


def invalid_arguments_message(error: str) -> str:
    return envelope_error(f"Invalid tool arguments: {error}")


def tool_output_message(output: Any) -> str:
    """A tool's output as the tool message carries it: `json.dumps(output)`."""
    try:
        return json.dumps(output, ensure_ascii=False)
    except (TypeError, ValueError) as err:
        return framework_error_message(f"tool output is not JSON: {err}")


def too_many_calls_message(limit: int) -> str:
    return envelope_error(
        f"Not run: a reply may run at most {limit} tool calls; ask for the rest in a later reply"
    )


def cut_off_message(max_tokens: int | None) -> str:
    """A call whose arguments were cut off at the token limit, in terms the model can act on
    (the conversation it is sent holds `{}` for the cut arguments, not the broken text)."""
    at = f" (max_tokens {max_tokens})" if max_tokens is not None else ""
    return invalid_arguments_message(
        f"your call was cut off at the token limit{at}: make it shorter or split it"
    )
