"""What a person reads, the same in the terminal, on the web and in a notification: every
character that does not show as itself written as an escape, tool arguments as the value that
will run, and long text cut with a marker that says so.

Pure (no I/O, nothing runs at import): the workflow, the activities, the starter and the web app
all import it. One rule for every place a person reads: controls (C0, DEL, C1, ESC), formatting
characters (zero-width, bidirectional embeddings, overrides and isolates, the byte order mark),
lone surrogates, private-use and unassigned code points, and line and paragraph separators are
written as JSON escapes (`\\n`, `\\r`, `\\t`, `\\u001b`, `\\u202e`; outside the basic plane as a
surrogate pair, `\\udb80\\udc00`). Each of them can make a terminal or a page show something
other than what the text says. JSON escapes keep tool arguments valid JSON of the same value,
so the web's `Arguments` field can hold the text as it is shown.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from workflows.contract.arguments import parse_arguments

HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
MULTILINE = "\n\t"
"""What `visible(text, keep=MULTILINE)` leaves as it is: model text keeps its lines and tabs."""
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def hidden(char: str) -> bool:
    """Whether `char` does not show as itself."""
    return unicodedata.category(char) in HIDDEN_CATEGORIES


def escape(char: str) -> str:
    """`char` as a JSON escape."""
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def visible(text: str, keep: str = "") -> str:
    """`text` with every hidden character written as an escape, except those in `keep`; the
    rest is left as it is. Everything a person reads that came from a model, a tool or another
    person goes through here."""
    if not any(hidden(c) and c not in keep for c in text):
        return text
    return "".join(escape(c) if hidden(c) and c not in keep else c for c in text)


def text_block(text: str) -> str:
    """Model or user text for people: its lines and tabs kept (CRLF read as a line break),
    every other hidden character escaped."""
    return visible(text.replace("\r\n", "\n"), keep=MULTILINE)


MORE = "…[{more} more characters]"
"""The marker of text in events and warnings (`{more}`: the characters past the limit)."""
COUNTED = "… ({more:,} more characters)"
"""The marker of text on a person's screen, the count with thousands separators."""
ELLIPSIS = "…"


def shorten(text: str, limit: int, marker: str = MORE, *, within: bool = False) -> str:
    """`text` in full up to `limit` characters, else cut and followed by `marker`.

    `marker` is a format string: `{more}` is the number of characters past `limit`, `{dropped}`
    the number actually left out, `{total}` the length of `text`. By default the marker follows
    the first `limit` characters; with `within=True` the result, marker included, is at most
    `limit` characters long (the text kept shrinks until the marker with its count fits)."""
    if len(text) <= limit:
        return text
    keep = limit
    while True:
        tail = marker.format(more=len(text) - limit, dropped=len(text) - keep, total=len(text))
        if not within:
            return text[:keep] + tail
        fits = max(0, limit - len(tail))
        if fits >= keep:
            return text[:keep] + tail
        keep = fits  # keep only decreases, so this ends


def one_line(text: str, limit: int | None = None) -> str:
    """`text` on one line (line breaks and every other hidden character escaped), cut after
    `limit` characters."""
    flat = visible(text)
    return flat if limit is None else shorten(flat, limit, COUNTED)


def arguments_display(arguments: Any) -> str:
    """Tool arguments as the value the tool will be given: parsed once
    (`workflows.contract.arguments`), as JSON on one line (`{"path": "logs"}`), non-ASCII as it is
    and hidden characters escaped. Arguments that are not valid JSON are shown as the string they
    are, quoted and escaped, after `(invalid JSON)`."""
    parsed = parse_arguments(arguments)
    if not parsed.ok:
        return "(invalid JSON) " + visible(json.dumps(str(arguments), ensure_ascii=False))
    return visible_json(parsed.value)


def visible_json(value: Any) -> str:
    """`value` as JSON on one line with `, ` and `: ` between items, hidden characters escaped
    (json itself escapes the C0 controls)."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    except (ValueError, RecursionError):
        text = json.dumps(str(value), ensure_ascii=False)
    return visible(text)
