"""How the command line shows events, messages and pending calls: a transcript for people, or one
JSON object per line with `--json`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from workflows.model import (
    AgentEvent,
    ApprovalEvent,
    AwaitingApprovalEvent,
    ChatMessage,
    ErrorEvent,
    FinishedEvent,
    TextDeltaEvent,
    ToolCall,
    ToolCallEvent,
    ToolResultEvent,
    WarningEvent,
)

TOOL_RESULT_PREVIEW = 300


def arguments_text(arguments: Any) -> str:
    """Tool arguments as one line: a JSON string as it is, anything else as compact JSON."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def one_line(text: str, limit: int | None = None) -> str:
    flat = text.replace("\r", "").replace("\n", "\\n")
    if limit is not None and len(flat) > limit:
        return flat[:limit] + f"… ({len(flat) - limit} more)"
    return flat


def call_text(call: ToolCall) -> str:
    return f"{call.id} {call.name} {arguments_text(call.arguments)}"


def event_line(event: AgentEvent) -> str:
    """One event as a transcript line, e.g. `[r0] tool_call call_1 run_command {…} (needs
    approval)`, `assistant: …`, `finished: stop`."""
    r = f"[r{event.round}]"
    if isinstance(event, TextDeltaEvent):
        return f"assistant: {event.delta}"
    if isinstance(event, ToolCallEvent):
        note = " (needs approval)" if event.requires_approval else ""
        return f"{r} tool_call {event.call_id} {event.name} {arguments_text(event.arguments)}{note}"
    if isinstance(event, AwaitingApprovalEvent):
        calls = ", ".join(call_text(c) for c in event.pending)
        return f"{r} awaiting_approval {calls}"
    if isinstance(event, ApprovalEvent):
        verdict = "approved" if event.approved else "rejected"
        by = f" by {event.approver}" if event.approver else ""
        why = f": {event.reason}" if event.reason else ""
        return f"{r} approval {event.call_id} {verdict}{by}{why}"
    if isinstance(event, ToolResultEvent):
        content = one_line(event.content, TOOL_RESULT_PREVIEW)
        return f"{r} tool_result {event.call_id} {event.name}: {content}"
    if isinstance(event, WarningEvent):
        return f"{r} warning: {event.message}"
    if isinstance(event, ErrorEvent):
        return f"{r} error: {event.message}"
    if isinstance(event, FinishedEvent):
        return f"finished: {event.finish_reason}"
    return f"{r} {event.type}"  # pragma: no cover - every type is handled above


def event_json(event: AgentEvent) -> str:
    return json.dumps(event.model_dump(mode="json"), ensure_ascii=False)


def message_lines(message: ChatMessage) -> list[str]:
    """A message of the history for people."""
    if message.role == "tool":
        head = f"tool {message.tool_call_id} ({message.name}): "
        return [head + one_line(message.content, TOOL_RESULT_PREVIEW)]
    lines = [f"{message.role}: {message.content}"] if message.content else []
    for call in message.tool_calls or []:
        lines.append(f"{message.role} calls {call_text(call)}")
    return lines or [f"{message.role}:"]


def age(since: datetime | None, now: datetime | None = None) -> str:
    """`3s`, `5m 2s`, `2h 10m`, `3d 4h` since `since`."""
    if since is None:
        return "?"
    now = now or datetime.now(UTC)
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    seconds = max(0, int((now - since).total_seconds()))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"
