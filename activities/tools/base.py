"""What a tool is, the registry the worker holds, and the workspace confinement every built-in
tool goes through."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workflows.model import ToolSpec


class ToolError(Exception):
    """A tool's expected failure: becomes `{"ok": false, "error": str(err), "data": null}`.

    Any other exception a tool raises becomes the `Framework error: …` envelope.
    """


ToolFunction = Callable[[dict[str, Any]], Awaitable[Any]]
"""Takes the parsed arguments (a JSON object) and returns the result's `data`."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: ToolFunction = field(repr=False)
    requires_approval: bool = False
    safe_to_retry: bool = True

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            requires_approval=self.requires_approval,
            safe_to_retry=self.safe_to_retry,
        )


class ToolRegistry:
    """The worker's tools by name, in registration order."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool '{tool.name}' is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def specs(self) -> list[ToolSpec]:
        return [tool.spec() for tool in self._tools.values()]

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)


# ---- Arguments ----


def string_argument(args: dict[str, Any], key: str, default: str | None = None) -> str:
    value = args.get(key, default)
    if value is None:
        raise ToolError(f"missing required argument '{key}'")
    if not isinstance(value, str):
        raise ToolError(f"argument '{key}' must be a string, got {type(value).__name__}")
    return value


# ---- Workspace confinement ----


@dataclass(frozen=True)
class Workspace:
    """A folder the tools are confined to. Every path goes through `locate`."""

    root: Path

    @classmethod
    def at(cls, path: Path) -> Workspace:
        return cls(path.expanduser().resolve())

    def _inside(self, path: Path) -> bool:
        return path == self.root or self.root in path.parents

    def locate(self, raw: str) -> Path:
        """The path `raw` names inside the workspace, without following its last component.

        Refused (ToolError): an empty path, a NUL byte, a path that leaves the workspace through
        `..` or as an absolute path elsewhere, and a path whose symlinks lead out of it.
        """
        if not raw.strip():
            raise ToolError("path must not be empty")
        if "\x00" in raw:
            raise ToolError("path must not contain NUL characters")
        candidate = Path(raw).expanduser()
        joined = candidate if candidate.is_absolute() else self.root / candidate
        lexical = Path(os.path.normpath(joined))
        if lexical == self.root:
            return self.root
        try:
            # The folder it lives in, with every symlink followed; then the entry itself.
            parent = lexical.parent.resolve()
            located = parent / lexical.name
            target = located.resolve()
        except (OSError, RuntimeError) as err:
            raise ToolError(f"path '{raw}' cannot be resolved: {err}") from err
        if not self._inside(parent) or not self._inside(located) or not self._inside(target):
            raise ToolError(f"path '{raw}' is outside the workspace; refused")
        return located

    def relative(self, path: Path) -> str:
        if path == self.root:
            return "."
        return path.relative_to(self.root).as_posix()
