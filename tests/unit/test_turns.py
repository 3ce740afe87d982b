"""Unit tests of the rules of a turn (no server): the repeat limit per turn with a person's no
remembered and counted, and what an empty reply is and when it was already nudged."""

from __future__ import annotations

from datetime import UTC, datetime

from workflows.context import RunContext
from workflows.conversation.record import Conversation
from workflows.gate.approvals import Approvals
from workflows.gate.repeats import (
    MAX_REMEMBERED_REJECTIONS,
    REMEMBERED_REASON_CHARS,
    Repeats,
    call_key,
)
from workflows.model import (
    AgentRunOptions,
    AgentState,
    ApprovalRecord,
    ChatMessage,
    ToolCall,
    ToolSpec,
)
from workflows.run.wording import (
    EMPTY_REPLY_NUDGE,
    empty_reply,
    nothing_returned_warning,
    nudged_already,
    repeat_limit_warning,
    round_limit_warning,
)

SPECS = [ToolSpec(name="run_command", description="", parameters={}, requires_approval=True)]


def echo(call_id: str, words: str = "hi") -> ToolCall:
    return ToolCall(id=call_id, name="run_command", arguments=f'{{"command": "echo {words}"}}')


def state(**options: object) -> AgentState:
    return AgentState(messages=[], options=AgentRunOptions(**options), tool_specs=SPECS)


def approvals(run_state: AgentState) -> Approvals:
    return Approvals(
        RunContext(state=run_state, now=lambda: datetime.now(UTC), run_id="run-1"),
        Conversation(run_state),
    )


def person_no(call_id: str, reason: str | None = None) -> ApprovalRecord:
    return ApprovalRecord(
        call_id=call_id, approved=False, reason=reason, at=datetime.now(UTC), source="person"
    )


# ---- the repeat limit and a person's no


def test_a_person_s_no_is_remembered_for_the_same_call_only():
    repeats = Repeats(state())
    repeats.rejected(echo("a"), "not here")
    again = repeats.refusal(echo("b"))
    assert again is not None and not again.past_limit
    assert again.content.startswith("Rejected: not here (already rejected")
    assert "already rejected this exact call in this turn (not here)" in again.warning
    assert repeats.refusal(echo("c", "other words")) is None


def test_rejections_count_toward_max_repeats():
    run_state = state(max_repeats=2)
    repeats = Repeats(run_state)
    repeats.rejected(echo("a"), None)
    repeats.ran(echo("b"))  # the repeat answered with the remembered no
    last = repeats.refusal(echo("c"))
    assert last is not None and last.past_limit
    assert last.content.startswith("Rejected: User denied (already rejected")
    assert "2 times so far (max_repeats 2)" in last.warning


def test_a_new_turn_forgets_the_counts_and_the_rejections():
    run_state = state(max_repeats=1, keep_alive=True)
    repeats = Repeats(run_state)
    repeats.ran(echo("a", "one"))
    repeats.rejected(echo("b", "two"), "no")
    refused = repeats.refusal(echo("c", "one"))
    assert refused is not None and "already ran 1 times in this turn" in refused.content
    repeats.new_turn()
    assert run_state.call_runs == {} and run_state.turn_rejections == {}
    assert repeats.refusal(echo("d", "one")) is None
    assert repeats.refusal(echo("e", "two")) is None


def test_remembered_rejections_are_bounded():
    run_state = state()
    repeats = Repeats(run_state)
    for i in range(MAX_REMEMBERED_REJECTIONS + 5):
        repeats.rejected(echo(f"c{i}", f"w{i}"), "x" * 5_000)
    assert len(run_state.turn_rejections) == MAX_REMEMBERED_REJECTIONS
    assert call_key(echo("new", "w0")) not in run_state.turn_rejections  # the oldest went first
    longest = max(len(r or "") for r in run_state.turn_rejections.values())
    assert REMEMBERED_REASON_CHARS < longest < REMEMBERED_REASON_CHARS + 40


def test_a_call_rejected_before_never_waits_for_a_person():
    run_state = state()
    rules = approvals(run_state)
    first = echo("a")
    run_state.messages = [ChatMessage.assistant("", [first])]
    run_state.answers["a"] = person_no("a", "not now")
    rules.repeats.count_answers([first])
    assert run_state.call_runs == {call_key(first): 1}
    again = echo("b")
    assert not rules.requires_approval(again)
    refusal = rules.refusal(again, None)
    assert refusal is not None and refusal.startswith("Rejected: not now")
    run_state.answers.clear()
    rules.repeats.count_answers([again])
    assert run_state.call_runs == {call_key(first): 2}
    assert not rules.repeats.past_limit([echo("c")])
    rules.repeats.count_answers([echo("c")])
    assert rules.repeats.past_limit([echo("d")])  # max_repeats 3: the no and two repeats


# ---- empty replies and what the turn's end says


def test_an_empty_reply_has_no_text_and_no_call():
    assert empty_reply(ChatMessage.assistant(""))
    assert empty_reply(ChatMessage.assistant(" \n\t"))
    assert not empty_reply(ChatMessage.assistant("ok"))
    assert not empty_reply(ChatMessage.assistant("", [echo("a")]))
    assert not empty_reply(ChatMessage.user(""))


def test_a_second_empty_reply_is_one_that_follows_the_nudge():
    first = [ChatMessage.user("hi"), ChatMessage.assistant("")]
    assert not nudged_already(first)
    second = [*first, ChatMessage.user(EMPTY_REPLY_NUDGE), ChatMessage.assistant("")]
    assert nudged_already(second)
    person = [*first, ChatMessage.user("hello?"), ChatMessage.assistant("")]
    assert not nudged_already(person)  # a person's message came between: a fresh start


def test_what_a_turn_s_end_says():
    said = [ChatMessage.assistant("still looking")]
    session = round_limit_warning(said, 4, session=True)
    assert session.startswith("this turn stopped at its round limit (max_rounds 4)")
    assert "still looking" in session and session.endswith("waits for the next message")
    assert round_limit_warning(said, 4).startswith("the run stopped at its round limit")
    assert "(max_repeats 3)" in repeat_limit_warning(3)
    assert nothing_returned_warning(session=True).startswith("the model returned nothing")
    assert nothing_returned_warning(session=False).endswith("the run ends")
