"""The request that asks the model for a summary of some messages (compaction).

The messages go to the model as one transcript in a user message, not as the conversation
itself: calls and results of tools then need no tool definitions and no chat-template support
(the request carries no tools), and the model cannot mistake them for a turn to continue. Each
message is bounded, so one huge tool result cannot fill the summary request's own window; given
the window, the whole transcript is bounded to it too (each message gets its share, and when
there are too many even for that, the middle ones are left out, saying how many).
"""

from __future__ import annotations

from collections.abc import Sequence

from workflows.bounds import arguments_text
from workflows.model import ChatMessage

SUMMARY_MAX_TOKENS = 1_024
"""The longest summary asked for when neither the call nor the worker sets `max_tokens`."""
MESSAGE_CHARS = 4_000
"""The most of one message the transcript shows (its head and its tail)."""
MIN_MESSAGE_CHARS = 200
"""The least of one message the transcript shows, however small the window."""
CHARS_PER_TOKEN = 3
"""The transcript's exchange rate against the window (as the workflow's estimate: never more)."""
REQUEST_TOKENS = 200
"""The request's own tokens besides instructions and transcript (chat template, roles)."""
LINE_CHARS = 60
"""A transcript line's own characters besides the message (its role, a cut's marker)."""

INSTRUCTIONS = (
    "You summarise the earlier part of a conversation between a user and an assistant that uses"
    " tools, so that the assistant can go on with less context. Keep what it needs to continue:"
    " the user's requests and constraints, decisions taken, facts learned from tool results"
    " (names, paths, values, errors), what is done and what is still to do. Write plain text of"
    " at most 250 words. Do not call tools and do not answer the user."
)


def bounded(text: str, limit: int = MESSAGE_CHARS) -> str:
    """`text`, or its head and tail with the number of characters left out between them."""
    if len(text) <= limit:
        return text
    half = max(1, limit // 2)
    left_out = len(text) - 2 * half
    return f"{text[:half]}\n[… {left_out:,} characters left out …]\n{text[-half:]}"


def transcript_line(message: ChatMessage, limit: int = MESSAGE_CHARS) -> str:
    """One message as the transcript shows it."""
    if message.role == "tool":
        name = message.name or message.tool_call_id or ""
        return f"[tool result {name}]\n{bounded(message.content, limit)}"
    calls = message.tool_calls or []
    each = max(1, limit // max(1, len(calls) + bool(message.content)))
    parts = []
    if message.content:
        parts.append(f"[{message.role}]\n{bounded(message.content, each)}")
    for call in calls:
        arguments = bounded(arguments_text(call.arguments), each)
        parts.append(f"[{message.role} calls {call.name}] {arguments}")
    return "\n".join(parts) if parts else f"[{message.role}] (empty)"


def summary_request(
    messages: Sequence[ChatMessage],
    *,
    window_tokens: int | None = None,
    reply_tokens: int = SUMMARY_MAX_TOKENS,
) -> list[ChatMessage]:
    """The conversation sent to ask for the summary: the instructions and the transcript (which,
    given the model's window, leaves room in it for the instructions and the reply)."""
    lines = transcript(messages, window_tokens, reply_tokens)
    return [
        ChatMessage.system(INSTRUCTIONS),
        ChatMessage.user(
            f"Summarise these {len(messages)} messages of the conversation:\n\n"
            + "\n\n".join(lines)
        ),
    ]


def transcript(
    messages: Sequence[ChatMessage], window_tokens: int | None, reply_tokens: int
) -> list[str]:
    """Each message as a transcript line, all of them within the window's room."""
    if window_tokens is None or not messages:
        return [transcript_line(m) for m in messages]
    room = (window_tokens - reply_tokens - REQUEST_TOKENS) * CHARS_PER_TOKEN - len(INSTRUCTIONS)
    share = room // len(messages) - LINE_CHARS
    if share >= MIN_MESSAGE_CHARS:
        return [transcript_line(m, min(MESSAGE_CHARS, share)) for m in messages]
    fit = max(2, room // (MIN_MESSAGE_CHARS + LINE_CHARS))
    if fit >= len(messages):
        return [transcript_line(m, MIN_MESSAGE_CHARS) for m in messages]
    head, tail = messages[: fit // 2], messages[len(messages) - (fit - fit // 2) :]
    left_out = len(messages) - len(head) - len(tail)
    return [
        *(transcript_line(m, MIN_MESSAGE_CHARS) for m in head),
        f"[… {left_out} messages left out to fit the model's context window …]",
        *(transcript_line(m, MIN_MESSAGE_CHARS) for m in tail),
    ]
