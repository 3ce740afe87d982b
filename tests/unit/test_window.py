"""The context window's pure rules: the view, the estimate and each compaction step."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workflows.conversation import window
from workflows.conversation.record import invariant_violations
from workflows.model import ChatMessage, ContextState, ToolCall


def round_of(i: int, size: int = 900) -> list[ChatMessage]:
    call = ToolCall(id=f"c{i}", name="read_file", arguments=f'{{"path": "f{i}"}}')
    return [ChatMessage.assistant(f"reading {i}", [call]), ChatMessage.tool(call, "y" * size)]


def session(rounds: int, size: int = 900) -> list[ChatMessage]:
    messages = [ChatMessage.system("be brief"), ChatMessage.user("read them")]
    for i in range(rounds):
        messages += round_of(i, size)
    return messages


def test_the_view_keeps_the_head_and_is_the_record_until_compacted():
    messages = session(3)
    assert window.head_end(messages) == 2
    assert window.model_view(messages, ContextState(window=1000)) == messages


def test_old_results_become_placeholders_never_splitting_a_round():
    messages = session(5)
    ctx, dropped = window.drop_old_results(messages, ContextState(window=1000), keep_rounds=2)
    assert dropped == 3
    view = window.model_view(messages, ctx)
    assert invariant_violations(view) == []
    contents = [m.content for m in view if m.role == "tool"]
    assert contents[:3] == ["[read_file output dropped to save context: 900 bytes]"] * 3
    assert contents[3:] == ["y" * 900] * 2


def test_the_estimate_never_trusts_a_provider_count_below_the_bytes():
    messages = session(4)
    by_bytes = window.estimate(messages, ContextState(window=10_000, reserve=0), 0)
    low = ContextState(window=10_000, reserve=0, prompt_tokens=5, prompt_messages=len(messages))
    high = low.model_copy(update={"prompt_tokens": 50_000})
    assert window.estimate(messages, low, 0) == by_bytes
    assert window.estimate(messages, high, 0) == 50_000


def test_a_summary_replaces_the_oldest_turns_and_its_marker_is_never_sent():
    messages = session(6)
    ctx = ContextState(window=1000)
    span = window.summary_range(messages, ctx, keep_rounds=1)
    assert span is not None and (span.first, span.last) == (2, 12) and span.count == 10
    marker = len(messages)
    messages.append(window.marker_message(span.first, span.last, "they read five files"))
    ctx = window.with_summary(ctx, "they read five files", span.last, marker)
    view = window.model_view(messages, ctx)
    assert [m.role for m in view] == ["system", "user", "user", "assistant", "tool"]
    assert view[2].content == window.USER_SUMMARY_PREFIX + "they read five files"
    # A second summary covers the first marker too; the marker is still never sent.
    messages += round_of(6) + round_of(7)
    again = window.summary_range(messages, ctx, keep_rounds=1)
    assert again is not None and again.skip == [marker]
    ctx = window.with_summary(ctx, "and two more", again.last, len(messages))
    messages.append(window.marker_message(again.first, again.last, "and two more"))
    assert not any(window.is_marker(m) for m in window.model_view(messages, ctx))
    assert ctx.markers == [len(messages) - 1]  # bounded: the old marker is summarised


@settings(max_examples=40, deadline=None)
@given(size=st.integers(1_000, 40_000), tokens=st.integers(1_500, 8_000))
def test_cutting_results_makes_the_view_fit(size, tokens):
    messages = session(1, size)
    ctx = ContextState(window=tokens, reserve=200)
    target = 0.8 * tokens
    cut, _ = window.cut_to_fit(messages, ctx, 0, target)
    view = window.model_view(messages, cut)
    if window.estimate(messages, cut, 0) > target:
        # Only when the results are at their floor already.
        assert all(len(m.content) <= window.MIN_CUT_CHARS + 100 for m in view if m.role == "tool")
    assert len(view) == len(messages)


def test_a_provider_that_says_too_long_lowers_the_window_and_the_reserve():
    ctx = ContextState(window=128_000, reserve=1_024)
    lower = window.lowered(ctx, 6_000, 7, window=2_048, prompt_tokens=6_196)
    assert (lower.window, lower.reserve, lower.too_long) == (2_048, 1_024, 1)
    assert (lower.prompt_tokens, lower.prompt_messages) == (6_196, 7)
    guessed = window.lowered(lower, 4_000, 7, window=None, prompt_tokens=None)
    assert guessed.window == 2_048 and guessed.too_long == 2  # never raised by a guess
    assert window.learn(guessed, 300, 9).too_long == 0


def test_a_summary_reaches_into_the_last_rounds_only_when_nothing_else_makes_room():
    # One round, then five long user messages (sent while a call waited): the last rounds hold
    # everything, so the summary must take the older of those messages, and no more than needed.
    messages = session(1, 50) + [ChatMessage.user(f"{i}" * 3_000) for i in range(5)]
    ctx = ContextState(window=100_000)
    plain = window.summary_range(messages, ctx, keep_rounds=3)
    assert plain is None  # the usual rule finds nothing to summarise

    def fits_last(kept: int):
        return lambda span: span is not None and len(messages) - span.last <= kept

    span = window.summary_range(messages, ctx, keep_rounds=3, fits=fits_last(2))
    assert span is not None and (span.first, span.last) == (2, len(messages) - 2)
    assert span.count == 5  # the round (call and result together) and three user messages
    # However little fits, the last turn stays in the view.
    never = window.summary_range(messages, ctx, keep_rounds=3, fits=lambda _s: False)
    assert never is not None and never.last == len(messages) - 1


def test_a_summary_never_ends_between_a_call_and_its_results():
    messages = session(3, 50)
    ends = window.summary_ends(messages, 2)
    assert all(messages[i].role != "tool" for i in ends)
    never = window.summary_range(messages, ContextState(window=1_000), 3, fits=lambda _s: False)
    assert never is not None and messages[never.last].role == "assistant"  # the last round whole
    assert never.last == len(messages) - 2


def test_the_last_rounds_are_not_summarised_when_cutting_a_result_makes_room():
    # Two rounds, the first with a result too big: the usual rule finds nothing to summarise and
    # cutting the result is enough, so the view keeps both rounds (a small model follows the
    # example of a call it can see).
    messages = [*session(1, 12_000), ChatMessage.assistant("done"), ChatMessage.user("next?")]
    ctx = ContextState(window=2_048, reserve=256)
    asked: list[window.SummaryRange | None] = []

    def fits(span: window.SummaryRange | None) -> bool:
        asked.append(span)
        trial, _ = window.cut_to_fit(messages, ctx, 0, 0.8 * 2_048)
        return span is None and not window.over(messages, trial, 0, 0.8)

    assert window.summary_range(messages, ctx, keep_rounds=3, fits=fits) is None
    assert asked == [None]
