"""Tool arguments as a person must see them before approving: the parsed JSON that will run, with
every control, escape, bidirectional and other invisible character written as a `\\uXXXX` escape,
so that what is shown is what runs (a right-to-left override cannot reorder a command on screen,
an escape sequence cannot hide part of it).

The text is still valid JSON of the same value, so the `Arguments` field can hold it as it is.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

_HIDDEN_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def _visible_char(char: str) -> str:
    if unicodedata.category(char) in _HIDDEN_CATEGORIES:
        code = ord(char)
        if code > 0xFFFF:  # a JSON escape of a surrogate pair
            code -= 0x10000
            return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
        return f"\\u{code:04x}"
    return char


def visible_json(value: Any) -> str:
    """Compact-ish JSON with the invisible characters escaped (they only occur inside strings)."""
    text = json.dumps(value, ensure_ascii=False, indent=None, separators=(", ", ": "))
    return "".join(_visible_char(c) for c in text)


def arguments_value(arguments: Any) -> Any:
    """What runs: a JSON string is parsed; a string that is not JSON stays the string it is."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def arguments_display(arguments: Any) -> str:
    """A call's arguments as JSON for the page and the `Arguments` field."""
    return visible_json(arguments_value(arguments))


def cut(text: str, limit: int = 500) -> str:
    """In full up to `limit` characters, then cut with `…`."""
    return text if len(text) <= limit else text[:limit] + "…"
