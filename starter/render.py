"""How the command line shows events, messages and pending calls: a transcript for people, or one
JSON object per line with `--json`."""

from __future__ import annotations

import json
import unicodedata
from datetime import UTC, datetime
from typing import Any

from workflows.arguments import parse_arguments
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
from workflows.rules import PolicyEntry

TOOL_RESULT_PREVIEW = 300

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_HIDDEN_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}
"""Controls (C0, DEL, C1, ESC), formatting characters (zero-width, bidirectional embeddings,
overrides and isolates, the byte order mark), lone surrogates and line/paragraph separators:
none of them shows as itself, and each can make a terminal or a page show something other
than what the text says."""
MULTILINE = "\n\t"
"""What `visible(text, keep=MULTILINE)` leaves as it is: model text keeps its lines and tabs."""


def _escape(char: str) -> str:
    code = ord(char)
    if char in _ESCAPES:
        return _ESCAPES[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _hidden(char: str) -> bool:
    return unicodedata.category(char) in _HIDDEN_CATEGORIES


def visible(text: str, keep: str = "") -> str:
    """`text` with every character that does not show as itself written as an escape (`\\r`,
    `\\x1b`, `\\u202e`, …), except those in `keep`; the rest is left as it is. Everything a
    person reads that came from a model, a tool or another person goes through here."""
    if not any(_hidden(c) and c not in keep for c in text):
        return text
    return "".join(_escape(c) if _hidden(c) and c not in keep else c for c in text)


def arguments_display(arguments: Any) -> str:
    """Tool arguments as the value the tool will be given: the parsed JSON, on one line, with
    hidden characters made visible. Arguments that are not valid JSON are shown as the string
    they are, quoted and escaped, after `(invalid JSON)`."""
    parsed = parse_arguments(arguments)
    if not parsed.ok:
        return "(invalid JSON) " + visible(json.dumps(str(arguments), ensure_ascii=False))
    return visible(json.dumps(parsed.value, ensure_ascii=False, default=str))


def one_line(text: str, limit: int | None = None) -> str:
    """`text` on one line (line breaks and every other hidden character escaped), cut after
    `limit` characters."""
    flat = visible(text)
    if limit is not None and len(flat) > limit:
        return flat[:limit] + f"… ({len(flat) - limit:,} more characters)"
    return flat


def text_block(text: str) -> str:
    """Model or user text for people: its lines and tabs kept (CRLF read as a line break),
    every other hidden character escaped."""
    return visible(text.replace("\r\n", "\n"), keep=MULTILINE)


def call_text(call: ToolCall) -> str:
    return f"{visible(call.id)} {visible(call.name)} {arguments_display(call.arguments)}"


def event_line(event: AgentEvent) -> str:
    """One event as a transcript line, e.g. `[r0] tool_call call_1 run_command {…} (needs
    approval)`, `assistant: …`, `finished: stop`."""
    r = f"[r{event.round}]"
    if isinstance(event, TextDeltaEvent):
        return f"assistant: {text_block(event.delta)}"
    if isinstance(event, ToolCallEvent):
        note = " (needs approval)" if event.requires_approval else ""
        call = (
            f"{visible(event.call_id)} {visible(event.name)} {arguments_display(event.arguments)}"
        )
        return f"{r} tool_call {call}{note}"
    if isinstance(event, AwaitingApprovalEvent):
        calls = ", ".join(call_text(c) for c in event.pending)
        return f"{r} awaiting_approval {calls}"
    if isinstance(event, ApprovalEvent):
        verdict = "approved" if event.approved else "rejected"
        by = f" by {visible(event.approver)}" if event.approver else ""
        if event.source == "policy":
            by = f" by policy rule {event.rule}"
        elif event.source == "timeout":
            by = " by the approval timeout"
        why = f": {visible(event.reason)}" if event.reason else ""
        edited = ""
        if event.arguments is not None:
            edited = f" with arguments {arguments_display(event.arguments)}"
            edited += f" (the model's: {arguments_display(event.original_arguments)})"
        return f"{r} approval {visible(event.call_id)} {verdict}{by}{why}{edited}"
    if isinstance(event, ToolResultEvent):
        content = one_line(event.content, TOOL_RESULT_PREVIEW)
        return f"{r} tool_result {visible(event.call_id)} {visible(event.name)}: {content}"
    if isinstance(event, WarningEvent):
        return f"{r} warning: {visible(event.message)}"
    if isinstance(event, ErrorEvent):
        return f"{r} error: {visible(event.message)}"
    if isinstance(event, FinishedEvent):
        return f"finished: {event.finish_reason}"
    return f"{r} {event.type}"  # pragma: no cover - every type is handled above


def rule_line(rule: PolicyEntry) -> str:
    """One effective rule, e.g. `run  allow run_command when command=git status*`."""
    when = ""
    if rule.when:
        when = " when " + ", ".join(f"{visible(k)}={visible(v)}" for k, v in rule.when.items())
    why = f" ({visible(rule.reason)})" if rule.reason else ""
    return f"{rule.origin:<8} {rule.decision:<5} {visible(rule.tool)}{when}{why}"


def event_json(event: AgentEvent) -> str:
    return json.dumps(event.model_dump(mode="json"), ensure_ascii=False)


def message_lines(message: ChatMessage) -> list[str]:
    """A message of the history for people."""
    if message.role == "tool":
        head = f"tool {visible(message.tool_call_id or '')} ({visible(message.name or '')}): "
        return [head + one_line(message.content, TOOL_RESULT_PREVIEW)]
    lines = [f"{message.role}: {text_block(message.content)}"] if message.content else []
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
