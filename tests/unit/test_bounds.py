"""Unit tests of the size bounds (no server)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workflows import bounds
from workflows.conversation.record import invariant_violations, unique_call_ids
from workflows.model import ChatMessage, ToolCall
from workflows.shown import shorten


def test_shown_cuts_and_says_so():
    assert shorten("abc", bounds.ECHO_CHARS) == "abc"
    cut = shorten("x" * 1_000, bounds.ECHO_CHARS)
    assert cut.startswith("x" * bounds.ECHO_CHARS) and "920 more characters" in cut


@given(st.lists(st.integers(min_value=0, max_value=20_000), min_size=1, max_size=80))
def test_fit_batch_fits_the_room(sizes):
    contents = ["y" * n for n in sizes]
    room = 100_000
    fitted = bounds.fit_batch(contents, room)
    share = max(bounds.MIN_TOOL_SHARE_CHARS, room // len(contents))
    assert len(fitted) == len(contents)
    assert all(len(f) <= max(len(c), share) for f, c in zip(fitted, contents, strict=True))
    if sum(sizes) > room:
        assert sum(len(f) for f in fitted) <= max(room, share * len(contents))


def test_fit_messages_keeps_the_shape():
    calls = [ToolCall(id="a", name="t", arguments="{}")]
    messages = [
        ChatMessage.user("u" * 600_000),
        ChatMessage.assistant("", calls),
        ChatMessage.tool(calls[0], "r" * 900_000),
        ChatMessage.user("small"),
    ]
    fitted, cut = bounds.fit_messages(messages, 1_000_000)
    assert cut >= 1
    assert sum(bounds.json_bytes(m) for m in fitted) <= 1_000_000
    assert [m.role for m in fitted] == [m.role for m in messages]
    assert invariant_violations(fitted) == []
    assert fitted[-1].content == "small"


def test_event_arguments_are_bounded():
    small = {"path": "."}
    assert bounds.event_arguments(small) is small
    big = bounds.event_arguments({"command": "x" * 10_000})
    assert isinstance(big, str) and len(big) < bounds.EVENT_ARGUMENTS_CHARS + 100


def test_unique_call_ids_across_the_run():
    taken = {"call_0", "call_r0_0"}
    batch = [
        ToolCall(id="call_0", name="t"),
        ToolCall(id="", name="t"),
        ToolCall(id="call_0", name="t"),
        ToolCall(id="i" * 500, name="t"),
    ]
    ids = [c.id for c in unique_call_ids(batch, "call_r0", taken, bounds.MAX_CALL_ID_CHARS)]
    assert ids == ["call_0#2", "call_r0_1", "call_0#3", "call_r0_3"]
