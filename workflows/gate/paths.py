"""Path arguments as rules see them: one spelling for each path.

`.env`, `./.env`, `.env/`, `.env/.` and `.env//` name one file, so a rule about `*.env` must see
them all as `.env`. A path parameter of a tool (its spec's `path_parameters`) is normalised
lexically: no `.` or empty segments, no trailing `/`, and `..` resolved while the path stays
inside the workspace. A relative path that would leave the workspace stays as given (a `deny`
on it can still match, and the tool refuses it anyway). An absolute path inside the workspace
is made workspace-relative when the tool's spec says where the workspace is (`path_root`): the
tools accept one, and a rule about `secrets/*` must see `/srv/ws/secrets/a` as `secrets/a`. Any
other absolute path stays absolute, with its segments normalised the same way. The empty path
and one holding NUL stay as given: the tools refuse them.

Symlinks are not followed here (that needs the file system); the worker re-checks its enforced
rules with the path the tool opens (`activities.enforcement`).

Pure; no Temporal import.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from workflows.contract.arguments import arguments_value


def normal_path(raw: str, root: str | None = None) -> str:
    """`raw` as rules see it (see the module's docstring); `root`: the workspace folder, an
    absolute normal path."""
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
        return inside(root, "/" + joined)
    return joined or "."


def inside(root: str | None, absolute: str) -> str:
    """A normal absolute path as a workspace-relative one when it is inside `root` (`.` for the
    root itself), else as it is."""
    if not root or not root.startswith("/"):
        return absolute
    base = root.rstrip("/")
    if absolute == (base or "/"):
        return "."
    if absolute.startswith(base + "/"):
        return absolute[len(base) + 1 :]
    return absolute


def rule_arguments(
    arguments: Any, path_parameters: Collection[str], root: str | None = None
) -> Any:
    """A call's arguments as rules see them: parsed (a JSON string becomes its value), with
    each string argument named in `path_parameters` normalised by `normal_path`. Arguments
    that are not a JSON object are returned parsed and otherwise as they are."""
    value = arguments_value(arguments)
    if not path_parameters or not isinstance(value, dict):
        return value
    return {
        name: normal_path(item, root) if name in path_parameters and isinstance(item, str) else item
        for name, item in value.items()
    }
