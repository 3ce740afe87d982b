"""The words of the settings that are modes, where every program can read them: the settings
(`runtime.settings`) check a value against them, and the activities act on it."""

from __future__ import annotations

from typing import Literal

SandboxMode = Literal["auto", "required", "off"]
"""`AGENT_SANDBOX`: how `run_command` and the MCP stdio servers are isolated."""
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "required", "off")

TextCallMode = Literal["parse", "warn", "off", "bare"]
"""`LLM_TEXT_TOOL_CALLS`: what a reply whose whole text is a tool call becomes."""
TEXT_CALL_MODES: tuple[TextCallMode, ...] = ("parse", "warn", "off", "bare")

NotifyFormat = Literal["json", "slack"]
"""`AGENT_NOTIFY_FORMAT`: the body a notification is sent as."""
NOTIFY_FORMATS: tuple[NotifyFormat, ...] = ("json", "slack")
