"""What a tool is, and the registry the worker holds."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from workflows.model import ToolSpec


class ToolError(Exception):
    """A tool's expected failure: becomes `{"ok": false, "error": str(err), "data": null}`.

    Any other exception a tool raises becomes the `Framework error: …` envelope.
    """


class Refused(Exception):
    """The worker's enforced rules refuse a call as it opened its path: `str(err)` is the whole
    result the model gets (`Rejected: {reason}`), and the tool did nothing."""


ToolFunction = Callable[[dict[str, Any]], Awaitable[Any]]
"""Takes the parsed arguments (a JSON object) and returns the result's `data`."""

OpenedCheck = Callable[[str, str], None]
"""Called by a tool with a path parameter's name and the workspace-relative path of what it
has just opened for it, before it reads, lists or removes anything; raises `Refused` to stop
the call. The worker's enforced rules are checked this way against the file actually opened,
so a link flipped between a check and the open changes nothing."""

ToolFunctionChecked = Callable[[dict[str, Any], OpenedCheck], Awaitable[Any]]
"""A tool's function that reports what it opens to an `OpenedCheck`."""

PathResolver = Callable[[str], str]
"""Takes a path argument's value and returns the workspace-relative path the tool would open
for it; raises ToolError when the tool would refuse the path."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: ToolFunction = field(repr=False)
    requires_approval: bool = False
    safe_to_retry: bool = True
    timeout_seconds: float | None = None
    """How long one call may run before Temporal gives up on it; None: 5 minutes."""
    path_parameters: tuple[str, ...] = ()
    """Parameters that name a path in the workspace (rules see them normalised)."""
    opened_path: PathResolver | None = field(default=None, repr=False)
    """The workspace-relative path this tool opens for the value of one of its path
    parameters (symlinks followed as the tool follows them); the worker re-checks its
    enforced rules with it. None: rules see only the path as written."""
    path_root: str | None = None
    """The workspace folder its path parameters are in (rules see an absolute path inside it as
    workspace-relative)."""
    run_checked: ToolFunctionChecked | None = field(default=None, repr=False)
    """`run`, reporting each path it opens to a check before using it (the worker's enforced
    rules, checked against what was opened). None: the tool opens no workspace path."""

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            requires_approval=self.requires_approval,
            safe_to_retry=self.safe_to_retry,
            timeout_seconds=self.timeout_seconds,
            path_parameters=list(self.path_parameters),
            path_root=self.path_root,
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
