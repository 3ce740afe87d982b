"""The request that asks the model for a summary of some messages (compaction).

The messages go to the model as one transcript in a user message, not as the conversation
itself: calls and results of tools then need no tool definitions and no chat-template support
(the request carries no tools), and the model cannot mistake them for a turn to continue. Each
message is bounded, so one huge tool result cannot fill the summary request's own window.
"""

from __future__ import annotations

from collections.abc import Sequence

from workflows.bounds import arguments_text
from workflows.model import ChatMessage

SUMMARY_MAX_TOKENS = 1_024
"""The longest summary asked for when neither the call nor the worker sets `max_tokens`."""
MESSAGE_CHARS = 4_000
"""The most of one message the transcript shows (its head and its tail)."""

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


def transcript_line(message: ChatMessage) -> str:
    """One message as the transcript shows it."""
    if message.role == "tool":
        name = message.name or message.tool_call_id or ""
        return f"[tool result {name}]\n{bounded(message.content)}"
    parts = []
    if message.content:
        parts.append(f"[{message.role}]\n{bounded(message.content)}")
    for call in message.tool_calls or []:
        arguments = bounded(arguments_text(call.arguments))
        parts.append(f"[{message.role} calls {call.name}] {arguments}")
    return "\n".join(parts) if parts else f"[{message.role}] (empty)"


def summary_request(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The conversation sent to ask for the summary: the instructions and the transcript."""
    transcript = "\n\n".join(transcript_line(m) for m in messages)
    return [
        ChatMessage.system(INSTRUCTIONS),
        ChatMessage.user(
            f"Summarise these {len(messages)} messages of the conversation:\n\n{transcript}"
        ),
    ]
