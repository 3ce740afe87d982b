"""The model's view over the rounds of a session (`window.compact` and `window.model_view`,
pure): a request that fits is sent as it is, a compaction makes room down to `compact_to` of
the window, between two compactions each request only adds to the end of the previous one (so
a server's prompt cache keeps working), and a summary reaches the model as a user message."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from temporalio.exceptions import ApplicationError

from workflows.conversation import window
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    ChatMessage,
    ContextState,
    ToolCall,
)

WINDOW = 3_000
RULES = window.Thresholds(at=0.8, to=0.5, keep_rounds=2)


def round_of(i: int, size: int, saying: str = "") -> list[ChatMessage]:
    call = ToolCall(id=f"c{i}", name="read_file", arguments=f'{{"path": "f{i}"}}')
    return [ChatMessage.assistant(saying, [call]), ChatMessage.tool(call, f"{i}" * size)]


def head() -> list[ChatMessage]:
    return [ChatMessage.system("be brief"), ChatMessage.user("read them")]


@dataclass
class Session:
    """A session's record and context, compacted before every request as the run does."""

    rules: window.Thresholds = RULES
    messages: list[ChatMessage] = field(default_factory=head)
    ctx: ContextState = field(default_factory=lambda: ContextState(window=WINDOW, reserve=100))
    sent: list[list[ChatMessage]] = field(default_factory=list)
    compactions: list[window.Compacted] = field(default_factory=list)
    asked: list[window.SummaryRange] = field(default_factory=list)

    async def _summarise(self, span: window.SummaryRange, _ctx: ContextState) -> str:
        self.asked.append(span)
        return f"they read files {span.first}-{span.last - 1}"

    def request(self) -> list[ChatMessage]:
        """Compact if needed, then the view the model is sent."""
        done = asyncio.run(window.compact(self.messages, self.ctx, 0, self.rules, self._summarise))
        if done is not None:
            if done.marker is not None:
                self.messages.append(done.marker)
            self.ctx = done.ctx
            if done.changed:
                self.compactions.append(done)
        view = window.model_view(self.messages, self.ctx)
        self.sent.append(view)
        return view

    def estimate(self) -> int:
        return window.estimate(self.messages, self.ctx, 0)


def test_a_request_that_fits_is_sent_uncut_newest_file_included():
    session = Session(rules=window.Thresholds(at=0.8, to=0.5, keep_rounds=3))
    for i in range(3):
        session.messages += round_of(i, 300)
    session.messages += round_of(3, 6_000)  # the newest file: past compact_at, within the window
    assert RULES.at * WINDOW < session.estimate() <= WINDOW
    view = session.request()
    assert view[-1] == session.messages[-1]  # sent whole
    assert all("cut to fit" not in m.content for m in view)
    assert session.asked == []  # nothing worth summarising, nothing in the last rounds


def test_a_compaction_brings_the_view_down_to_compact_to():
    # Each round says a lot: dropping the old results is not enough to make room.
    session = Session()
    for i in range(20):
        session.messages += round_of(i, 200, "thinking " * 30)
        session.request()
        if session.compactions:
            break
    [compaction] = session.compactions
    assert compaction.summarised and compaction.dropped
    assert compaction.after <= RULES.to * WINDOW < RULES.at * WINDOW < compaction.before
    assert window.estimate(session.messages, session.ctx, 0) == compaction.after


def test_between_two_compactions_each_request_extends_the_previous_one():
    session = Session()
    for i in range(30):
        session.messages += round_of(i, 200, "thinking " * 30)
        session.request()
    assert 1 <= len(session.compactions) <= 4  # not at every round
    changed = 0
    for previous, current in zip(session.sent, session.sent[1:], strict=False):
        if current[: len(previous)] != previous:
            changed += 1
    assert changed == len(session.compactions)


def test_a_big_file_read_once_is_not_cut_again_and_again():
    # Rounds 2.. are small: the request grows slowly past compact_at but stays in the window,
    # so nothing changes until the big round leaves the last rounds and its result is dropped.
    session = Session(rules=window.Thresholds(at=0.8, to=0.5, keep_rounds=4))
    session.messages += round_of(0, 6_500)
    views = [session.request()]
    for i in range(1, 12):
        session.messages += round_of(i, 20)
        views.append(session.request())
    assert views[0][-1].content == "0" * 6_500
    [compaction] = session.compactions
    assert compaction.dropped == 1 and compaction.cut == 0
    assert compaction.after <= RULES.to * WINDOW
    breaks = [n for n in range(1, len(views)) if views[n][: len(views[n - 1])] != views[n - 1]]
    assert len(breaks) == 1


def test_the_summary_reaches_the_model_as_a_user_message_saying_so():
    session = Session()
    for i in range(12):
        session.messages += round_of(i, 200, "thinking " * 30)
        view = session.request()
    assert session.asked, "nothing was summarised"
    summaries = [m for m in view if "they read files" in m.content]
    assert len(summaries) == 1
    [summary] = summaries
    assert summary.role == "user"
    assert summary.content.startswith(window.USER_SUMMARY_PREFIX)
    assert "summary of the earlier conversation" in summary.content
    assert [m for m in view if m.role == "system"] == [session.messages[0]]
    assert window.model_view(session.messages, session.ctx) == view  # the view is derivable


def test_compact_to_must_be_a_share_of_the_window():
    assert AgentRunOptions().compact_to == 0.5
    for bad in (0, 1, 1.5, -0.2):
        with pytest.raises(ApplicationError) as refused:
            AgentRunInput.model_validate(
                {"messages": [{"role": "user", "content": "hi"}], "options": {"compact_to": bad}}
            )
        assert "options.compact_to" in str(refused.value)
