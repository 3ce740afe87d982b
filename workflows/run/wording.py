"""What the run says to people in its own words: the `error` messages of a cancel and a timeout,
the `warning`s about a reply cut off, a run or a turn stopped at one of its limits or by a model
server out of reach, a model that returned nothing, and the nudge that asks it again. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from workflows.model import CancelRequest, ChatMessage, LlmResponse
from workflows.shown import shorten

CANCELLED_MESSAGE = "Agent run cancelled"
APPROVAL_TIMED_OUT = "Approval timed out"
INTERRUPTED_TOOL = f"Cancelled: {CANCELLED_MESSAGE}; the tool may not have run"
SESSION_WAITS = "the session waits for the next message"
EMPTY_REPLY_NUDGE = (
    "(This note is from the agent, not the user.) Your last reply was empty: no text and no tool"
    " call. Answer the user's last message, or call a tool."
)
"""The user message that asks the model again after an empty reply. It stays in the
conversation: the record says what the model was sent, and the model's view only grows at its
end (a server's prompt cache keeps working)."""


def cancel_message(request: CancelRequest) -> str:
    """`Agent run cancelled`, saying by whom and why when the request says so."""
    by = f" by {request.requested_by}" if request.requested_by else ""
    why = f": {request.reason}" if request.reason else ""
    return f"{CANCELLED_MESSAGE}{by}{why}"


def length_warning(response: LlmResponse) -> str:
    """A reply cut off (`finish_reason: length`): by `max_tokens`, or by a full context window
    (fewer tokens were made than `max_tokens` allowed)."""
    made, limit = response.usage.completion_tokens, response.max_tokens
    if limit is not None and 0 < made < limit:
        why = f"the model's context window is full (it stopped after {made} of max_tokens {limit})"
    elif limit is not None:
        why = f"the model stopped at its token limit (max_tokens {limit})"
    else:
        why = "the model stopped at its token limit"
    return (
        f"{why} (finish_reason 'length'): its reply may be cut off; a call whose arguments"
        " were cut off is answered as invalid without asking anyone"
    )


def round_limit_warning(
    messages: Sequence[ChatMessage], max_rounds: int, *, session: bool = False
) -> str:
    """A run that ends at `max_rounds` says so, with the model's last text; in a session only
    the turn ends, and the session waits for the next message."""
    last = next((m.content for m in reversed(messages) if m.role == "assistant"), "")
    said = f"; the model's last text: {shorten(last, 500)}" if last.strip() else ""
    if session:
        return (
            f"this turn stopped at its round limit (max_rounds {max_rounds}) before the model"
            f" gave a final answer{said}; {SESSION_WAITS}"
        )
    return (
        f"the run stopped at its round limit (max_rounds {max_rounds}) before the model gave a"
        f" final answer{said}"
    )


def outage_warning(problem: str) -> str:
    """A session's turn that ends because the model server stayed out of reach (`problem` names
    it and how long the call tried)."""
    return (
        f"this turn stopped without an answer: {problem}; {SESSION_WAITS}, and the next one"
        " asks the model again"
    )


def repeat_limit_warning(max_repeats: int) -> str:
    """A session's turn that ends because the model asked again for a call past `max_repeats`."""
    return (
        f"this turn stopped at its repeat limit (max_repeats {max_repeats}): the model asked again"
        f" for a call it already made that many times; {SESSION_WAITS}"
    )


def empty_reply(message: ChatMessage) -> bool:
    """A reply that is no answer: no text (blank counts as none) and no tool call."""
    return message.role == "assistant" and not message.tool_calls and not message.content.strip()


def nudged_already(messages: Sequence[ChatMessage]) -> bool:
    """Whether the empty reply at the end of `messages` answers the nudge (a second empty reply
    in a row): read from the conversation, so it holds across continue-as-new."""
    return len(messages) >= 2 and messages[-2] == ChatMessage.user(EMPTY_REPLY_NUDGE)


def nothing_returned_warning(*, session: bool) -> str:
    """A second empty reply in a row: the turn ends (the run, outside a session)."""
    ends = SESSION_WAITS if session else "the run ends"
    return f"the model returned nothing (two empty replies in a row, one after a nudge); {ends}"
