"""The conversation's types: a message, a tool call, token usage, and the literals every
other part of the contract names (roles, phases, finish reasons, who decided)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    field_validator,
)

Role = Literal["system", "user", "assistant", "tool"]


FinishReason = Literal["stop", "max_rounds", "cancelled", "error", "budget"]


Phase = Literal[
    "running",
    "awaiting_approval",
    "approval_expired",
    "awaiting_answer",
    "waiting_for_message",
    "finished",
    "budget_exhausted",
    "waiting_for_sub_agents",
]


PERSON_PHASES: tuple[Phase, ...] = ("awaiting_approval", "approval_expired", "awaiting_answer")
"""The phases in which a run waits for a person (the inbox lists it)."""


ApprovalTimeoutPolicy = Literal["cancel", "reject", "expire"]


ApprovalSource = Literal["person", "policy", "timeout", "seed"]


AnswerValue = (
    Annotated[str, Field(max_length=4_000)]
    | Annotated[list[Annotated[str, Field(max_length=4_000)]], Field(max_length=50)]
)
"""A person's answer to a question: one text, or (for a `multiple` question) a list of options."""


SIGNED_FIELDS = ("groups", "signed_at", "signature", "approvers", "signed_by", "reasons")
"""What a signed answer (and a call's approvers) add to a record and an `approval` event: left
out when unset, so an unsigned answer reads as before."""


def without_none(data: Any, keys: tuple[str, ...]) -> Any:
    """A dumped model without these keys where they are None."""
    if isinstance(data, dict):
        for key in keys:
            if data.get(key) is None:
                data.pop(key, None)
    return data


class ToolCall(BaseModel):
    """One tool call as the model asked for it.

    `arguments` is a JSON string (as LLMs send it) or an already-parsed JSON value.
    """

    id: str
    name: str
    arguments: Any = "{}"
    from_text: bool = Field(default=False, exclude_if=lambda value: not value)
    """True when the model wrote the call as text in its reply and the worker read it as a call
    (`LLM_TEXT_TOOL_CALLS`); left out of the JSON when false."""


class ChatMessage(BaseModel):
    """One message of the conversation, in the OpenAI chat shape."""

    role: Role
    content: str = ""
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        # OpenAI sends `"content": null` on assistant messages that only call tools.
        return "" if value is None else value

    @classmethod
    def system(cls, content: str) -> ChatMessage:
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str) -> ChatMessage:
        return cls(role="user", content=content)

    @classmethod
    def assistant(cls, content: str, tool_calls: list[ToolCall] | None = None) -> ChatMessage:
        return cls(role="assistant", content=content, tool_calls=tool_calls or None)

    @classmethod
    def tool(cls, call: ToolCall, content: str) -> ChatMessage:
        return cls(role="tool", content=content, name=call.name, tool_call_id=call.id)


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total(self) -> int:
        """Every token the provider counted: what a run's token budget spends."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


def describe_validation(err: ValidationError, *, where: str = "input", echo: bool = False) -> str:
    """What was wrong, in one line a person can act on: at most five problems, each with where it
    is; with `echo`, a short preview of the value that was wrong (never for a workflow input,
    which may be huge or private)."""
    parts = []
    for item in err.errors()[:5]:
        place = ".".join(str(p) for p in item["loc"]) or where
        message = item["msg"]
        if "recursion limit" in message:
            message = f"nested too deeply ({message})"
        if echo:
            shown = repr(item.get("input"))
            message += f" (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
        parts.append(f"{place}: {message}")
    more = len(err.errors()) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
