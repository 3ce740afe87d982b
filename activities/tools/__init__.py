"""The worker's tools: the registry, and the built-in file-manager tools (SPEC §7)."""

from activities.tools.base import Tool, ToolError, ToolFunction, ToolRegistry, Workspace
from activities.tools.builtin import build_default_registry

__all__ = [
    "Tool",
    "ToolError",
    "ToolFunction",
    "ToolRegistry",
    "Workspace",
    "build_default_registry",
]
