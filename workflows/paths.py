"""Path arguments as rules see them: one spelling for each path.

`.env`, `./.env`, `.env/`, `.env/.` and `.env//` name one file, so a rule about `*.env` must see
them all as `.env`. A path parameter of a tool (its spec's `path_parameters`) is normalised
lexically: no `.` or empty segments, no trailing `/`, and `..` resolved while the path stays
inside the workspace. A relative path that would leave the workspace stays as given (a `deny`
on it can still match, and the tool refuses it anyway); an absolute path stays absolute, with
its segments normalised the same way (the tools accept one that names the workspace, and this
module does not know where that is). The empty path and one holding NUL stay as given: the
tools refuse them.

Symlinks are not followed here (that needs the file system); the worker re-checks its enforced
rules with the path the tool will open (`activities.enforcement`).

Pure; no Temporal import.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from workflows.arguments import arguments_value


def normal_path(raw: str) -> str:
    """`raw` as rules see it (see the module's docstring)."""
    if not raw.strip() or "\x00" in raw:
        return raw
    absolute = raw.startswith("/")
    parts: list[str] = []
    for part in raw.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            elif not absolute:
                return raw  # leaves the workspace: as given
            continue  # `/..` is `/`
        parts.append(part)
    joined = "/".join(parts)
    if absolute:
        return "/" + joined
    return joined or "."


def rule_arguments(arguments: Any, path_parameters: Collection[str]) -> Any:
    """A call's arguments as rules see them: parsed (a JSON string becomes its value), with
    each string argument named in `path_parameters` normalised by `normal_path`. Arguments
    that are not a JSON object are returned parsed and otherwise as they are."""
    value = arguments_value(arguments)
    if not path_parameters or not isinstance(value, dict):
        return value
    return {
        name: normal_path(item) if name in path_parameters and isinstance(item, str) else item
        for name, item in value.items()
    }
