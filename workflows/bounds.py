"""Size bounds that keep every payload the workflow writes under Temporal's 2 MB limit.

Pure functions (no Temporal import): the workflow applies them at intake (signals, model
replies, tool batches) and when it writes its result, so no input, however large or numerous,
can make a workflow task fail with `PayloadsTooLarge`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from workflows.model import ChatMessage, ToolCall
from workflows.shown import shorten

MAX_CONVERSATION_BYTES = 1_400_000
"""The model is never sent more than this, and the messages (with held ones) never exceed it by
more than one bounded step. It also bounds the continue-as-new hand-over (the messages, plus at
most ~200 KB of carried events and ~128 KB of stream state) and the result."""
HANDOVER_BUDGET_BYTES = 1_500_000
"""The whole input of a continue-as-new takes at most this much as JSON (without a payload
store): the carried events, stream and audit are cut to fit it, else the run ends `error`."""
RESULT_BUDGET_BYTES = 1_800_000
"""The workflow's result never exceeds this (a safety net: the conversation bound keeps it
smaller already)."""
TOOL_CONTENT_CHARS = 16_000
"""A tool message carries at most this many characters (the tools bound their output too)."""
MAX_CALL_ID_CHARS = 128
"""A model's call id longer than this is replaced by a generated one."""
MAX_APPROVER_CHARS = 200
"""An answer's `approver` is cut to this."""
MAX_ARGUMENT_CHARS = 100_000
"""A tool call whose arguments are longer than this is answered as invalid, not run."""
MAX_CALLS_PER_REPLY = 64
"""At most this many calls of one reply run; the others are answered with an error."""
MAX_PARALLEL_TOOLS = 16
"""At most this many tool activities of one batch run at once."""
ECHO_CHARS = 80
"""Input echoed back in a warning is cut to this (a preview, never the whole input)."""
EVENT_ARGUMENTS_CHARS = 2_000
"""Tool arguments in an event are at most this long as JSON text (`messages` has them all)."""
MIN_TOOL_SHARE_CHARS = 200
"""When a batch's results do not fit the conversation budget, each keeps at least this much."""
NEAR_LIMIT = "…[cut {more} characters: the conversation is near its size limit]"
"""What a batch's result cut to fit the conversation says (the model reads it)."""


def json_bytes(message: ChatMessage) -> int:
    """A message's size as the JSON that carries it."""
    return len(message.model_dump_json().encode())


def arguments_text(arguments: Any) -> str:
    """Tool arguments as JSON text: a string as it is, anything else as compact JSON."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def event_arguments(arguments: Any) -> Any:
    """Arguments as an event carries them: unchanged when small, else a preview of their text."""
    text = arguments_text(arguments)
    if len(text) <= EVENT_ARGUMENTS_CHARS:
        return arguments
    return shorten(text, EVENT_ARGUMENTS_CHARS)


def event_call(call: ToolCall) -> ToolCall:
    """A call as an event (`awaiting_approval`) carries it: arguments bounded."""
    bounded = event_arguments(call.arguments)
    return call if bounded is call.arguments else call.model_copy(update={"arguments": bounded})


def fit_batch(contents: Sequence[str], room_chars: int) -> list[str]:
    """Cut a batch's tool results so that together they take at most `room_chars` characters
    (each keeps at least MIN_TOOL_SHARE_CHARS), saying in each cut result what was dropped.

    The results of a batch are appended together (the ordering invariant needs all of them), so
    this is how a batch stays within the conversation budget.
    """
    total = sum(len(c) for c in contents)
    if total <= room_chars or not contents:
        return list(contents)
    share = max(MIN_TOOL_SHARE_CHARS, room_chars // len(contents))
    return [shorten(content, share, NEAR_LIMIT, within=True) for content in contents]


def fit_messages(messages: Sequence[ChatMessage], budget: int) -> tuple[list[ChatMessage], int]:
    """The messages with the longest contents cut until their JSON fits `budget` bytes.

    Returns the messages and how many were cut. Tool calls and ids stay as they are, so the
    ordering invariant still holds on the result.
    """
    sizes = [json_bytes(m) for m in messages]
    total = sum(sizes)
    if total <= budget:
        return list(messages), 0
    result = list(messages)
    cut = 0
    for index in sorted(range(len(result)), key=lambda i: -len(result[i].content)):
        if total <= budget:
            break
        message = result[index]
        if len(message.content) <= MIN_TOOL_SHARE_CHARS:
            break
        excess = total - budget
        # Bytes, not characters: leave room for the marker's non-ASCII ellipsis.
        keep = max(MIN_TOOL_SHARE_CHARS, len(message.content) - excess - 8)
        content = shorten(message.content, keep, NEAR_LIMIT, within=True)
        shorter = message.model_copy(update={"content": content})
        total += json_bytes(shorter) - sizes[index]
        sizes[index] = json_bytes(shorter)
        result[index] = shorter
        cut += 1
    return result, cut
