"""The worker's tools: the registry, and the built-in file-manager tools."""

from activities.tools.base import Tool, ToolError, ToolFunction, ToolRegistry
from activities.tools.builtin import build_default_registry
from activities.tools.fs import Workspace

__all__ = [
    "Tool",
    "ToolError",
    "ToolFunction",
    "ToolRegistry",
    "Workspace",
    "build_default_registry",
]
