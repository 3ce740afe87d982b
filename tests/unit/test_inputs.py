"""Unit tests of the strict intake of signal/update payloads: no Temporal involved."""

from __future__ import annotations

import pytest

from workflows.intake import (
    MAX_REASON_CHARS,
    MAX_USER_MESSAGE_CHARS,
    parse_approval,
    parse_cancel,
    parse_user_message,
)
from workflows.model import CancelRequest, ChatMessage, ToolApprovalResponse


def test_approval_ok_minimal():
    parsed = parse_approval({"call_id": "call_1", "approved": True})
    assert parsed.error is None and parsed.note is None
    assert parsed.value == ToolApprovalResponse(call_id="call_1", approved=True)


def test_approval_ok_full():
    payload = {"call_id": "c", "approved": False, "reason": "no", "approver": "ann"}
    parsed = parse_approval(payload)
    assert parsed.value is not None
    assert parsed.value.model_dump() == payload


@pytest.mark.parametrize("approved", ["yes", 1, 0, "true", "True", None, [True], {"v": True}, 1.0])
def test_approval_lax_types_are_not_approvals(approved):
    parsed = parse_approval({"call_id": "c", "approved": approved})
    assert parsed.value is None
    assert parsed.error is not None
    assert "approved" in parsed.error


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        (None, "must be a JSON object, got NoneType"),
        ([{"call_id": "c", "approved": True}], "must be a JSON object, got list"),
        ("call_1", "must be a JSON object, got str"),
        (True, "must be a JSON object, got bool"),
        (3, "must be a JSON object, got int"),
        ({}, "call_id"),
        ({"approved": True}, "call_id"),
        ({"call_id": "c"}, "approved"),
        ({"call_id": "", "approved": True}, "call_id"),
        ({"call_id": 1, "approved": True}, "call_id"),
        ({"call_id": "c", "approved": True, "extra": 1}, "extra"),
        ({"call_id": "c", "approved": True, "reason": 5}, "reason"),
        ({"call_id": "c", "approved": True, "approver": ["x"]}, "approver"),
    ],
)
def test_approval_invalid(payload, needle):
    parsed = parse_approval(payload)
    assert parsed.value is None
    assert parsed.error is not None and needle in parsed.error, parsed.error


def test_approval_error_message_is_bounded_and_readable():
    parsed = parse_approval({"call_id": "c", "approved": "x" * 10_000})
    assert parsed.error is not None
    assert len(parsed.error) < 400
    assert parsed.error.startswith("invalid tool approval: approved:")


def test_approval_huge_reason_is_cut_with_note():
    reason = "r" * (MAX_REASON_CHARS + 123)
    parsed = parse_approval({"call_id": "c", "approved": False, "reason": reason})
    assert parsed.value is not None and parsed.error is None
    assert parsed.value.reason == "r" * MAX_REASON_CHARS
    assert parsed.note is not None
    assert "123 dropped" in parsed.note and "c" in parsed.note


def test_approval_reason_at_limit_is_kept():
    reason = "r" * MAX_REASON_CHARS
    parsed = parse_approval({"call_id": "c", "approved": False, "reason": reason})
    assert parsed.value is not None and parsed.value.reason == reason and parsed.note is None


# ---- cancel ----


def test_cancel_none_and_empty():
    assert parse_cancel(None).value == CancelRequest()
    assert parse_cancel({}).value == CancelRequest()


def test_cancel_full():
    parsed = parse_cancel({"reason": "changed my mind", "immediate": True})
    assert parsed.value == CancelRequest(reason="changed my mind", immediate=True)


@pytest.mark.parametrize(
    "payload",
    [
        {"immediate": "yes"},
        {"immediate": 1},
        {"reason": 3},
        {"why": "x"},
        "stop",
        [],
        5,
    ],
)
def test_cancel_invalid(payload):
    parsed = parse_cancel(payload)
    assert parsed.value is None and parsed.error


# ---- send_message ----


def test_user_message_short_form():
    parsed = parse_user_message({"content": "hello"})
    assert parsed.value == ChatMessage.user("hello")


def test_user_message_full_form():
    parsed = parse_user_message({"role": "user", "content": "hello", "name": "ann"})
    assert parsed.value is not None
    assert parsed.value.role == "user" and parsed.value.name == "ann"


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ({"role": "tool", "content": "x", "tool_call_id": "c"}, "role 'tool'"),
        ({"role": "assistant", "content": "x"}, "role 'assistant'"),
        ({"role": "system", "content": "x"}, "role 'system'"),
        ({"role": "user", "content": "x", "tool_call_id": "c"}, "tool_call"),
        ({"role": "user", "content": "x", "tool_calls": [{"id": "a", "name": "b"}]}, "tool_call"),
        ({"role": "robot", "content": "x"}, "role"),
        ({"content": ""}, "empty"),
        ({"content": "   \n"}, "empty"),
        ({"role": "user", "content": ""}, "empty"),
        ({"content": 5}, "content"),
        ({"content": "x", "extra": 1}, "extra"),
        ({}, "content"),
        ("hello", "must be a JSON object"),
        (None, "must be a JSON object"),
        ([{"content": "x"}], "must be a JSON object"),
    ],
)
def test_user_message_invalid(payload, needle):
    parsed = parse_user_message(payload)
    assert parsed.value is None
    assert parsed.error is not None and needle in parsed.error, parsed.error


def test_user_message_too_long():
    parsed = parse_user_message({"content": "x" * (MAX_USER_MESSAGE_CHARS + 1)})
    assert parsed.value is None and parsed.error is not None
    assert str(MAX_USER_MESSAGE_CHARS) in parsed.error
