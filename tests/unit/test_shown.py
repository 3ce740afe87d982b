"""The one owner of what people read: hidden characters made visible and long text cut, each
cut saying so, with the exact markers the workflow has always written (recorded histories hold
them)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workflows.bounds import NEAR_LIMIT
from workflows.contract.tool_results import TRUNCATION_MARKER
from workflows.conversation.window import CONTEXT_CUT
from workflows.shown import COUNTED, ELLIPSIS, MORE, arguments_display, shorten, visible


def test_short_text_is_left_as_it_is() -> None:
    for marker in (MORE, COUNTED, ELLIPSIS, TRUNCATION_MARKER):
        assert shorten("abc", 3, marker) == "abc"
        assert shorten("abc", 3, marker, within=True) == "abc"
    assert shorten("", 0, TRUNCATION_MARKER, within=True) == ""


def test_the_event_marker_follows_the_limit() -> None:
    assert shorten("abcdefgh", 3) == "abc…[5 more characters]"
    assert shorten("x" * 2_500, 2_000) == "x" * 2_000 + "…[500 more characters]"


def test_the_screen_marker_counts_with_separators() -> None:
    assert shorten("y" * 1_234_567, 2, COUNTED) == "yy… (1,234,565 more characters)"
    assert shorten("abcdef", 4, ELLIPSIS) == "abcd…"


def test_within_the_limit_an_ellipsis_takes_the_last_place() -> None:
    assert shorten("abcdef", 4, ELLIPSIS, within=True) == "abc…"


def test_a_counted_marker_within_the_limit_counts_what_it_left_out() -> None:
    out = shorten("z" * 1_000, 100, TRUNCATION_MARKER, within=True)
    assert len(out) <= 100
    kept = out.index("…")
    assert out[kept:] == f"…[truncated {1_000 - kept} characters]"


def test_more_counts_past_the_limit_even_within_it() -> None:
    """The conversation's own cut says how far past the limit the text went (what it has always
    written into the model's messages)."""
    text = "w" * 5_000
    out = shorten(text, 1_000, NEAR_LIMIT, within=True)
    marker = "…[cut 4000 characters: the conversation is near its size limit]"
    assert out == text[: 1_000 - len(marker)] + marker
    tight = "…[cut 4990 characters: the conversation is near its size limit]"
    assert shorten(text, 10, NEAR_LIMIT, within=True) == tight  # nothing left but the marker


def test_total_names_the_whole_length() -> None:
    assert shorten("p" * 300, 5, "…[{total} characters]") == "ppppp…[300 characters]"


def test_the_context_window_marker() -> None:
    assert shorten("abcdef", 2, CONTEXT_CUT) == (
        "ab…[cut to fit the model's context window: 4 more characters]"
    )


@given(st.text(max_size=300), st.integers(min_value=0, max_value=300))
def test_within_never_exceeds_the_limit(text: str, limit: int) -> None:
    for marker in (TRUNCATION_MARKER, ELLIPSIS):
        out = shorten(text, limit, marker, within=True)
        assert len(out) <= max(limit, len(marker.format(more=0, dropped=len(text), total=0)))
        assert text.startswith(out.split("…")[0]) or out == text


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("rm \ue000x\u0378 \x1b[2J", "rm \\ue000x\\u0378 \\u001b[2J"),
        ("a\u202eb\u200bc\ufeff", "a\\u202eb\\u200bc\\ufeff"),
        ("line\nnext\ttab\r", "line\\nnext\\ttab\\r"),
        ("\U000f0000", "\\udb80\\udc00"),
        ("héllo ✓ 日本", "héllo ✓ 日本"),
    ],
)
def test_hidden_characters_are_written_as_json_escapes(raw: str, shown: str) -> None:
    assert visible(raw) == shown


def test_arguments_read_as_the_value_that_runs() -> None:
    assert arguments_display('{"path":"a\\u202eb"}') == '{"path": "a\\u202eb"}'
    assert arguments_display("{not json") == '(invalid JSON) "{not json"'


def _old_preview(text: str, limit: int) -> str:
    """The event and warning cut as the workflow wrote it before it had one owner."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"…[{len(text) - limit} more characters]"


def _old_near_limit(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = f"…[cut {len(text) - limit} characters: the conversation is near its size limit]"
    return text[: max(0, limit - len(marker))] + marker


def _old_bound_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = limit
    while True:
        marker = TRUNCATION_MARKER.format(dropped=len(text) - keep)
        fits = max(0, limit - len(marker))
        if fits >= keep:
            return text[:keep] + marker
        keep = fits


@given(st.text(max_size=400), st.integers(min_value=1, max_value=400))
def test_the_workflow_writes_what_it_wrote_before(text: str, limit: int) -> None:
    """Byte for byte the old helpers' output: recorded histories must replay."""
    assert shorten(text, limit) == _old_preview(text, limit)
    assert shorten(text, limit, NEAR_LIMIT, within=True) == _old_near_limit(text, limit)
    assert shorten(text, limit, TRUNCATION_MARKER, within=True) == _old_bound_text(text, limit)
    assert shorten(text, limit, ELLIPSIS, within=True) == (
        text if len(text) <= limit else text[: limit - 1] + "…"
    )
