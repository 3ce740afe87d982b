"""Loose intake, strict validation: a signal's or update's raw payload becomes a typed value or a
clear complaint, never a failed workflow task. `decode` reads the payload loosely (any JSON);
the `parse_*` functions validate the decoded value. The workflow turns complaints into `warning`
events (signals) or refusals (updates).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.common import RawValue

from workflows.bounds import ECHO_CHARS, MAX_APPROVER_CHARS, MAX_ARGUMENT_CHARS
from workflows.contract.inputs import tokens_problem
from workflows.contract.rules import ApprovalPolicy
from workflows.model import (
    BudgetGrant,
    CancelRequest,
    ChatMessage,
    ReopenRequest,
    ToolApprovalResponse,
    UserMessageInput,
    describe_validation,
)
from workflows.names import PLAINTEXT_METADATA
from workflows.shown import shorten

MAX_REASON_CHARS = 2_000
MAX_USER_MESSAGE_CHARS = 100_000

T = TypeVar("T")


@dataclass(frozen=True)
class Parsed(Generic[T]):
    value: T | None = None
    error: str | None = None
    note: str | None = None
    """Set when the value was accepted with a change (e.g. a reason cut to size)."""


def describe(err: ValidationError) -> str:
    """A one-line description of what was wrong, for a warning a person can act on."""
    return describe_validation(err, where="payload", echo=True)


def _validate(
    model: type[BaseModel], payload: object, what: str
) -> tuple[BaseModel | None, str | None]:
    if not isinstance(payload, dict):
        return None, f"{what} must be a JSON object, got {type(payload).__name__}"
    try:
        return model.model_validate(payload), None
    except ValidationError as err:
        return None, f"invalid {what}: {describe(err)}"


def parse_approval(payload: object) -> Parsed[ToolApprovalResponse]:
    value, error = _validate(ToolApprovalResponse, payload, "tool approval")
    if error is not None or not isinstance(value, ToolApprovalResponse):
        return Parsed(error=error)
    notes: list[str] = []
    call = shorten(value.call_id, ECHO_CHARS)
    edit = edit_problem(value)
    if edit is not None:
        return Parsed(error=f"invalid tool approval for {call}: {edit}")
    if value.reason is not None and len(value.reason) > MAX_REASON_CHARS:
        cut = len(value.reason) - MAX_REASON_CHARS
        value = value.model_copy(update={"reason": value.reason[:MAX_REASON_CHARS]})
        notes.append(f"reason for {call} cut to {MAX_REASON_CHARS} characters ({cut} dropped)")
    if value.approver is not None and len(value.approver) > MAX_APPROVER_CHARS:
        cut = len(value.approver) - MAX_APPROVER_CHARS
        value = value.model_copy(update={"approver": value.approver[:MAX_APPROVER_CHARS]})
        notes.append(f"approver for {call} cut to {MAX_APPROVER_CHARS} characters ({cut} dropped)")
    return Parsed(value=value, note="; ".join(notes) or None)


def parse_reopen(payload: object) -> Parsed[ReopenRequest]:
    """`reopen_approval` takes `{"call_id": str, "approver"?: str}` (the approver cut to size)."""
    value, error = _validate(ReopenRequest, payload, "reopen request")
    if error is not None or not isinstance(value, ReopenRequest):
        return Parsed(error=error)
    if value.approver is not None and len(value.approver) > MAX_APPROVER_CHARS:
        value = value.model_copy(update={"approver": value.approver[:MAX_APPROVER_CHARS]})
    return Parsed(value=value)


def parse_cancel(payload: object) -> Parsed[CancelRequest]:
    """`cancel` takes no payload, `null`, or `{"reason": str, "immediate": bool}`."""
    if payload is None:
        return Parsed(value=CancelRequest())
    value, error = _validate(CancelRequest, payload, "cancel request")
    if error is not None or not isinstance(value, CancelRequest):
        return Parsed(error=error)
    return Parsed(value=value)


def parse_grant(payload: object) -> Parsed[BudgetGrant]:
    """`grant_budget` takes `{"tokens": N}` or `{"stop": true}`, with who grants."""
    if isinstance(payload, dict) and payload.get("tokens") is not None:
        if (problem := tokens_problem(payload["tokens"])) is not None:
            return Parsed(error=problem)
    value, error = _validate(BudgetGrant, payload, "grant")
    if error is not None or not isinstance(value, BudgetGrant):
        return Parsed(error=error)
    if value.approver is not None and len(value.approver) > MAX_APPROVER_CHARS:
        return Parsed(error=f"invalid grant: approver is longer than {MAX_APPROVER_CHARS}")
    return Parsed(value=value)


def parse_user_message(payload: object) -> Parsed[ChatMessage]:
    """`send_message` takes a ChatMessage with role `user`, or `{"content": str}`."""
    if isinstance(payload, dict) and "role" in payload:
        value, error = _validate(ChatMessage, payload, "message")
        if error is not None or not isinstance(value, ChatMessage):
            return Parsed(error=error)
        if value.role != "user":
            return Parsed(error=f"send_message takes user messages only, got role '{value.role}'")
        if value.tool_calls or value.tool_call_id:
            return Parsed(error="a user message cannot carry tool_calls or tool_call_id")
        message = value
    else:
        short, error = _validate(UserMessageInput, payload, "message")
        if error is not None or not isinstance(short, UserMessageInput):
            return Parsed(error=error)
        message = ChatMessage.user(short.content)
    if not message.content.strip():
        return Parsed(error="message content is empty")
    if len(message.content) > MAX_USER_MESSAGE_CHARS:
        return Parsed(
            error=f"message has {len(message.content)} characters,"
            f" more than {MAX_USER_MESSAGE_CHARS}"
        )
    return Parsed(value=message)


def edit_problem(response: ToolApprovalResponse) -> str | None:
    """Why an answer's edited arguments cannot run, or None. The model checks their shape;
    this bounds their size as a model's arguments are bounded, and refuses what no tool could
    be given as JSON."""
    if response.arguments is None:
        return None
    try:
        size = len(json.dumps(response.arguments, ensure_ascii=False, allow_nan=False))
    except ValueError:
        return "arguments hold NaN or Infinity, which are not JSON"
    except RecursionError:
        return "arguments are nested too deeply"
    if size > MAX_ARGUMENT_CHARS:
        return f"arguments take {size} characters as JSON, more than {MAX_ARGUMENT_CHARS}"
    return None


def parse_approval_policy(payload: object) -> Parsed[ApprovalPolicy]:
    """A run's rules, `{"rules": [...]}` (the `set_approval_policy` update's payload), or a
    one-line reason why they are invalid. Strict: one bad rule refuses the whole policy."""
    value, error = _validate(ApprovalPolicy, payload, "approval policy")
    if error is not None or not isinstance(value, ApprovalPolicy):
        return Parsed(error=error)
    return Parsed(value=value)


# ---- decoding the raw payload ----


def first_line(err: BaseException) -> str:
    """An exception in one short line (never the whole input it may quote)."""
    text = str(err).strip()
    first = text.splitlines()[0] if text else ""
    return shorten(f"{type(err).__name__}: {first}" if first else type(err).__name__, 300)


def decode(
    args: Sequence[RawValue], *, optional: bool, sealed_only: bool = False
) -> tuple[object, str | None]:
    """The one payload of a signal or update, decoded loosely (any JSON), or what was wrong.
    With `sealed_only` (a run started with encryption on), a payload the codec found in
    plaintext is refused: only key holders answer, cancel or write to a run."""
    if not args:
        return None, None if optional else "no payload given"
    if len(args) > 1:
        return None, f"expected one payload, got {len(args)}"
    if sealed_only and is_plaintext(args[0]):
        return None, UNSEALED
    try:
        return workflow.payload_converter().from_payload(args[0].payload), None
    except Exception as err:  # any undecodable payload is bad input, not a bug
        return None, f"payload could not be decoded ({first_line(err)})"


UNSEALED = (
    "the payload was not encrypted with the worker's key (with encryption on, only key holders"
    " may answer, cancel or write to a run)"
)


def is_plaintext(value: RawValue) -> bool:
    """Whether the project's codec, holding keys, found this payload unencrypted."""
    return PLAINTEXT_METADATA in value.payload.metadata
