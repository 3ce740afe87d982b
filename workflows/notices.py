"""What the run says to people in its own words: the `error` messages of a cancel and a timeout,
and the `warning`s about a reply cut off or a run stopped at its round limit. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from workflows.bounds import shown
from workflows.model import CancelRequest, ChatMessage, LlmResponse

CANCELLED_MESSAGE = "Agent run cancelled"
APPROVAL_TIMED_OUT = "Approval timed out"
INTERRUPTED_TOOL = f"Cancelled: {CANCELLED_MESSAGE}; the tool may not have run"


def cancel_message(request: CancelRequest) -> str:
    """`Agent run cancelled`, saying by whom and why when the request says so."""
    by = f" by {request.requested_by}" if request.requested_by else ""
    why = f": {request.reason}" if request.reason else ""
    return f"{CANCELLED_MESSAGE}{by}{why}"


def length_warning(response: LlmResponse, *, say_which_limit: bool) -> str:
    """A reply cut off (`finish_reason: length`): by `max_tokens`, or by a full context window
    (fewer tokens were made than `max_tokens` allowed)."""
    made, limit = response.usage.completion_tokens, response.max_tokens
    if say_which_limit and limit is not None and 0 < made < limit:
        why = f"the model's context window is full (it stopped after {made} of max_tokens {limit})"
    elif say_which_limit and limit is not None:
        why = f"the model stopped at its token limit (max_tokens {limit})"
    else:
        why = "the model stopped at its token limit"
    return (
        f"{why} (finish_reason 'length'): its reply may be cut off; a call whose arguments"
        " were cut off is answered as invalid without asking anyone"
    )


def round_limit_warning(messages: Sequence[ChatMessage], max_rounds: int) -> str:
    """A run that ends at `max_rounds` says so, with the model's last text."""
    last = next((m.content for m in reversed(messages) if m.role == "assistant"), "")
    said = f"; the model's last text: {shown(last, 500)}" if last.strip() else ""
    return (
        f"the run stopped at its round limit (max_rounds {max_rounds}) before the model gave a"
        f" final answer{said}"
    )
