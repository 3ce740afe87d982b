"""Globs of `allow` rules: shell safety by position.

In an `allow` pattern, `*`, `?` and `[...]` never match a shell metacharacter (a newline, a
carriage return, NUL, `;` `&` `|` `` ` `` `$` `>` `<` `(` `)` `\\` `'` `"`); such a character
matches only where the pattern holds it literally, one for one. So `git log * | head*` allows
one pipe to `head` and no second one, and `echo *` allows no expansion, quoting or redirection
of any kind, whatever the shell that runs the command makes of them.

Otherwise the globs are `fnmatch` globs (case-sensitive): the translation below follows
`fnmatch.translate` step by step, with the wildcards narrowed. Like it, a run of fixed text
between two stars is matched atomically at its earliest place, so no pattern backtracks
exponentially. That stays exact with narrowed stars: a fixed run that holds a metacharacter can
occur at most once where a narrowed star may reach, and one that holds none can be crossed by
the next star.

Pure; nothing runs at import but the definitions.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

SHELL_METACHARACTERS = "\n\r\x00;&|`$><()\\'\""
"""What a shell chains, substitutes, expands, quotes or redirects with: in an `allow` pattern,
only a literal one matches one of these."""

_UNSAFE_CLASS = "".join(re.escape(c) for c in SHELL_METACHARACTERS)
_SAFE_CHAR = f"[^{_UNSAFE_CLASS}]"
"""What `?` (and each character of `*`) matches in an `allow` pattern."""
_NOT_UNSAFE = f"(?![{_UNSAFE_CLASS}])"
"""Put before a `[...]` class: the class never admits a metacharacter."""

_STAR = object()

Matcher = Callable[[str], "re.Match[str] | None"]


def _class_regex(pattern: str, i: int, j: int) -> str:
    """The regex of the class `pattern[i-1:j+1]` (`[` at i-1, `]` at j), as fnmatch makes it."""
    stuff = pattern[i:j]
    if "-" not in stuff:
        stuff = stuff.replace("\\", r"\\")
    else:
        chunks = []
        k = i + 2 if pattern[i] == "!" else i + 1
        while True:
            k = pattern.find("-", k, j)
            if k < 0:
                break
            chunks.append(pattern[i:k])
            i = k + 1
            k = k + 3
        chunk = pattern[i:j]
        if chunk:
            chunks.append(chunk)
        else:
            chunks[-1] += "-"
        for k in range(len(chunks) - 1, 0, -1):  # empty ranges are invalid in a regex
            if chunks[k - 1][-1] > chunks[k][0]:
                chunks[k - 1] = chunks[k - 1][:-1] + chunks[k][1:]
                del chunks[k]
        stuff = "-".join(s.replace("\\", r"\\").replace("-", r"\-") for s in chunks)
    stuff = re.sub(r"([&~|])", r"\\\1", stuff)
    if not stuff:
        return "(?!)"  # an empty class matches nothing
    if stuff == "!":
        return _SAFE_CHAR  # `[!]`: any character
    if stuff[0] == "!":
        stuff = "^" + stuff[1:]
    elif stuff[0] in ("^", "["):
        stuff = "\\" + stuff
    return f"{_NOT_UNSAFE}[{stuff}]"


def _pieces(pattern: str) -> list[object]:
    """The pattern as regex pieces, with `_STAR` for each run of `*`."""
    out: list[object] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if not out or out[-1] is not _STAR:
                out.append(_STAR)
        elif c == "?":
            out.append(_SAFE_CHAR)
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append("\\[")  # no closing `]`: a literal `[`
            else:
                out.append(_class_regex(pattern, i, j))
                i = j + 1
        else:
            out.append(re.escape(c))
    return out


def shell_safe_regex(pattern: str) -> str:
    """The regex (whole-string, to use with `match`) of an `allow` glob."""
    pieces = _pieces(pattern)
    out: list[str] = []
    i, n = 0, len(pieces)
    while i < n and pieces[i] is not _STAR:
        out.append(str(pieces[i]))
        i += 1
    while i < n:
        i += 1  # a star
        fixed: list[str] = []
        while i < n and pieces[i] is not _STAR:
            fixed.append(str(pieces[i]))
            i += 1
        text = "".join(fixed)
        if i == n:
            out.append(f"{_SAFE_CHAR}*{text}")
        else:
            out.append(f"(?>{_SAFE_CHAR}*?{text})")
    return "(?s:" + "".join(out) + r")\Z"


@functools.lru_cache(maxsize=4096)
def shell_safe_glob(pattern: str) -> Matcher:
    """The compiled matcher of an `allow` glob (compiled once per worker process)."""
    return re.compile(shell_safe_regex(pattern)).match


def shell_safe_match(pattern: str, value: str) -> bool:
    """Whether `value` matches the `allow` glob `pattern`, shell safety by position."""
    return shell_safe_glob(pattern)(value) is not None
