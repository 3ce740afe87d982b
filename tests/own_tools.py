"""Tools of "your own" for the tests: loaded with AGENT_TOOLS=tests.own_tools:…"""

from __future__ import annotations

from typing import Any

from activities.tools import Tool, ToolError


async def _shout(args: dict[str, Any]) -> dict[str, Any]:
    text = args.get("text")
    if not isinstance(text, str):
        raise ToolError("shout needs a 'text' string")
    return {"shouted": text.upper() + "!"}


async def _count_words(args: dict[str, Any]) -> int:
    return len(str(args.get("text", "")).split())


TEXT_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
}

SHOUT = Tool(
    name="shout",
    description="Say the text in capitals.",
    parameters=TEXT_PARAMETERS,
    run=_shout,
)
"""A single Tool."""


def more_tools() -> list[Tool]:
    """A callable returning tools."""
    return [
        Tool(
            name="count_words",
            description="Count the words of a text.",
            parameters=TEXT_PARAMETERS,
            run=_count_words,
        )
    ]


CLASHING = [Tool(name="read_file", description="A second read_file.", parameters={}, run=_shout)]
"""An iterable whose tool takes a built-in tool's name."""

NOT_A_TOOL = {"name": "shout"}
"""A value of the wrong kind."""
