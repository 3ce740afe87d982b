"""Your own tools (`AGENT_TOOLS=package.module:attribute[,…]`) and the one registry they share
with the built-ins and the MCP servers' tools.

Each attribute is a `Tool`, an iterable of them, or a callable returning either. Everything that
can go wrong here stops the worker before it starts, with one line saying which tool or
attribute is at fault: a name the model would see twice must never reach a run.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable
from typing import Any

from activities.tools.base import Tool, ToolRegistry

TOOL_SPECS_BUDGET_BYTES = 160_000
"""The worker's tool list (names, descriptions, schemas as JSON) is at most this big: a run
records it once and hands it to its next generation beside a conversation of up to 1.4 MB, and
that hand-over must stay under Temporal's 2 MB payload limit."""


def specs_bytes(tools: Iterable[Tool]) -> int:
    return sum(len(json.dumps(t.spec().model_dump(mode="json")).encode()) for t in tools)


class ToolLoadError(ValueError):
    """A tool that cannot be loaded, or two tools with one name: the worker does not start."""


def _describe(value: object) -> str:
    return type(value).__name__


def _tools_from(value: object, spec: str) -> list[Tool]:
    """The tools an attribute stands for: itself, its items, or what calling it returns."""
    if isinstance(value, Tool):
        return [value]
    if callable(value):
        try:
            value = value()
        except Exception as err:
            raise ToolLoadError(
                f"AGENT_TOOLS: calling {spec} failed ({type(err).__name__}: {err})"
            ) from err
        if isinstance(value, Tool):
            return [value]
    if isinstance(value, str | bytes | dict) or not isinstance(value, Iterable):
        raise ToolLoadError(
            f"AGENT_TOOLS: {spec} is a {_describe(value)}, not a Tool, an iterable of Tools or a"
            " callable returning them"
        )
    tools = list(value)
    for item in tools:
        if not isinstance(item, Tool):
            raise ToolLoadError(
                f"AGENT_TOOLS: {spec} holds a {_describe(item)}, not a Tool"
                " (from activities.tools import Tool)"
            )
    return tools


def load_attribute(spec: str) -> list[Tool]:
    """The tools named by one `package.module:attribute`."""
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # ImportError, or the module's own error while importing
        raise ToolLoadError(
            f"AGENT_TOOLS: cannot import {module_name} ({type(err).__name__}: {err})"
        ) from err
    value: Any = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            missing = f"AGENT_TOOLS: {module_name} has no attribute {attribute}"
            raise ToolLoadError(missing) from None
    return _tools_from(value, spec)


class ToolCatalog:
    """The tools a worker offers, each with where it came from, so a clash names both."""

    def __init__(self) -> None:
        self.registry = ToolRegistry()
        self._origins: dict[str, str] = {}

    def add(self, tools: Iterable[Tool], origin: str) -> None:
        self.add_groups([(origin, list(tools))])

    def add_groups(self, groups: Iterable[tuple[str, list[Tool]]]) -> None:
        """Add every group's tools, or none of them when one is refused."""
        seen = dict(self._origins)
        adding: list[Tool] = []
        for origin, tools in groups:
            for tool in tools:
                if not isinstance(tool, Tool):
                    raise ToolLoadError(f"{origin} gave a {_describe(tool)}, not a Tool")
                earlier = seen.get(tool.name)
                if earlier is not None:
                    both = f"both from {origin}" if earlier == origin else f"{earlier} and {origin}"
                    raise ToolLoadError(f"two tools are named '{tool.name}' ({both})")
                seen[tool.name] = origin
                adding.append(tool)
        current = [t for t in (self.registry.get(n) for n in self.registry.names) if t]
        size = specs_bytes([*current, *adding])
        if size > TOOL_SPECS_BUDGET_BYTES:
            raise ToolLoadError(
                f"the tools' names, descriptions and schemas take {size // 1000} KB, more than"
                f" the {TOOL_SPECS_BUDGET_BYTES // 1000} KB a run can carry; offer fewer tools"
            )
        for tool in adding:
            self.registry.register(tool)
        self._origins = seen

    def origin(self, name: str) -> str | None:
        return self._origins.get(name)


def load_tools(specs: Iterable[str]) -> list[tuple[str, list[Tool]]]:
    """Each `AGENT_TOOLS` entry with the tools it gave, in order."""
    return [(spec, load_attribute(spec)) for spec in specs]
