"""The tail of a model request: the conversation's owner names each message added since the
previous request by where it came from, and the worker rebuilds exactly those messages from the
results it returned (`resolve`), or cannot (then it asks the run)."""

from __future__ import annotations

from workflows.conversation.parts import INLINE_BYTES, Sources, resolve
from workflows.conversation.record import Conversation
from workflows.conversation.tail import EMPTY_DIGEST, extend
from workflows.conversation.window import view_basis
from workflows.model import (
    AgentRunOptions,
    AgentState,
    ChatMessage,
    ContextState,
    Inline,
    ReplyOf,
    ResultOf,
    Tail,
    ToolCall,
)

# The model reuses an id within one reply: the conversation renames the second one.
CALLS = [
    ToolCall(id="call_0", name="read_file", arguments='{"path": "a"}'),
    ToolCall(id="call_0", name="read_file", arguments='{"path": "b"}'),
]


def conversation() -> Conversation:
    state = AgentState(messages=[ChatMessage.user("read a and b")], options=AgentRunOptions())
    return Conversation(state)


def one_round(conv: Conversation) -> list[ToolCall]:
    """The model's reply of round 1 joins; the first call's result is its tool's, the second's a
    failure's (not an `execute_tool` result); then a person's held message."""
    message = conv.reply("Reading.", CALLS, 1)
    conv.append_reply(message, 1)
    calls = message.tool_calls or []
    conv.append_results(calls, ["text of a", "the tool failed"], executed={calls[0].id})
    assert conv.hold(ChatMessage.user("and quickly")) is None
    assert conv.flush_held()
    return calls


def test_each_message_since_the_previous_request_is_named_by_where_it_came_from():
    conv = conversation()
    assert conv.sources.sent(1) is None  # the first request of a generation: no tail
    calls = one_round(conv)
    tail = conv.sources.sent(len(conv.messages))
    assert calls[1].id == "call_0#2"
    assert tail == Tail(
        after=1,
        parts=[
            ReplyOf(reply_of=1, ids=["call_0", "call_0#2"]),
            ResultOf(result_of="call_0"),
            Inline(message=conv.messages[3]),
            Inline(message=ChatMessage.user("and quickly")),
        ],
    )
    # The JSON names them compactly, and reads back to the same parts.
    assert tail.model_dump(mode="json")["parts"][:2] == [
        {"reply_of": 1, "ids": ["call_0", "call_0#2"]},
        {"result_of": "call_0"},
    ]
    assert Tail.model_validate_json(tail.model_dump_json()) == tail
    # What the worker rebuilds from the model's reply (as `call_llm` returned it, ids unrenamed)
    # and the tool's result is exactly what the conversation holds, digest and all.
    added = resolve(
        tail.parts,
        conv.messages[:1],
        replies={1: ChatMessage.assistant("Reading.", CALLS)},
        results={"call_0": "text of a"},
    )
    assert added == conv.messages[1:]
    assert (
        extend(EMPTY_DIGEST, [*conv.messages[:1], *added])[0]
        == (extend(EMPTY_DIGEST, conv.messages)[0])
    )
    assert conv.sources.sent(len(conv.messages)) == Tail(after=len(conv.messages), parts=[])


def test_a_result_the_run_cut_or_did_not_take_from_the_tool_is_carried_whole():
    conv = conversation()
    conv.sources.sent(1)
    message = conv.reply("", CALLS[:1], 1)
    conv.append_reply(message, 1)
    long = "x" * 40_000  # cut by the run's bound on a tool message: not the tool's result
    conv.append_results(message.tool_calls or [], [long], executed={"call_0"})
    assert conv.messages[-1].content != long
    assert conv.sources.sent(len(conv.messages)) is None  # and too large to carry: no tail


def test_an_edit_a_large_message_or_a_count_that_does_not_add_up_sends_no_tail():
    conv = conversation()
    conv.sources.sent(1)
    calls = one_round(conv)
    conv.replace_call(calls[0].model_copy(update={"arguments": '{"path": "c"}'}))
    assert conv.sources.sent(len(conv.messages)) is None  # an earlier message changed
    conv.append(ChatMessage.user("x" * INLINE_BYTES))
    assert conv.sources.sent(len(conv.messages)) is None  # more than the inline budget
    conv.append(ChatMessage.user("small"))
    assert conv.sources.sent(len(conv.messages) + 1) is None  # not the messages counted
    sources = Sources()
    sources.sent(3)
    sources.forget()  # a request for the compacted view
    assert sources.sent(3) is None


def test_a_part_the_worker_has_no_result_for_is_not_resolved():
    conv = conversation()
    conv.sources.sent(1)
    one_round(conv)
    tail = conv.sources.sent(len(conv.messages))
    assert tail is not None
    reply = ChatMessage.assistant("Reading.", CALLS)
    before = conv.messages[:1]
    assert resolve(tail.parts, before, {}, {"call_0": "text of a"}) is None
    assert resolve(tail.parts, before, {1: reply}, {}) is None
    fewer = ChatMessage.assistant("Reading.", CALLS[:1])  # not the reply the run took
    assert resolve(tail.parts, before, {1: fewer}, {"call_0": "text of a"}) is None
    # A result for a call the conversation does not hold names no tool message.
    orphan = [ResultOf(result_of="call_9")]
    assert resolve(orphan, conv.messages, {}, {"call_9": "x"}) is None


def test_a_request_for_the_view_carries_a_tail_while_the_view_is_made_the_same_way():
    conv = conversation()
    conv.append(ChatMessage(role="system", content="compacted", name="compaction"))  # a marker
    compacted = ContextState(window=1_000, dropped_until=1, markers=[1])
    conv.sources.sent(2, 1, view_basis(compacted))
    one_round(conv)
    record = len(conv.messages)
    # The view is shorter than the record: it grew by the same messages, so the tail is the
    # record's, after the view's previous length.
    tail = conv.sources.sent(record, 1 + 4, view_basis(compacted))
    assert tail is not None and (tail.after, len(tail.parts)) == (1, 4)
    conv.append(ChatMessage.user("more"))
    again = compacted.model_copy(update={"dropped_until": 4})  # compacted again
    assert conv.sources.sent(record + 1, 6, view_basis(again)) is None
    # A context that changed only in what the provider counted makes the view the same way.
    counted = again.model_copy(update={"prompt_tokens": 900, "prompt_messages": record + 1})
    assert view_basis(counted) == view_basis(again)
    assert view_basis(ContextState(window=1_000)) is None  # nothing compacted: the record


def test_a_generation_begun_with_a_small_conversation_carries_it_in_its_first_request():
    conv = conversation()
    conv.sources.begin(conv.messages)
    first = conv.sources.sent(1)
    assert first is not None
    assert first == Tail(after=0, parts=[Inline(message=conv.messages[0])])
    # A worker holding nothing of the run rebuilds it, digest and all, with no query.
    added = resolve(first.parts, [], {}, {})
    assert added == conv.messages
    assert extend(EMPTY_DIGEST, added)[0] == extend(EMPTY_DIGEST, conv.messages)[0]
    # And the next request names what was added since, as ever.
    one_round(conv)
    tail = conv.sources.sent(len(conv.messages))
    assert tail is not None and tail.after == 1


def test_a_generation_begun_with_a_large_conversation_or_for_the_view_carries_no_tail():
    large = [ChatMessage.user("x" * INLINE_BYTES)]
    sources = Sources()
    sources.begin(large)
    assert sources.sent(1) is None  # past the inline budget: read by query
    conv = conversation()
    conv.sources.begin(conv.messages)
    conv.append(ChatMessage(role="system", content="compacted", name="compaction"))
    compacted = ContextState(window=1_000, dropped_until=1, markers=[1])
    assert conv.sources.sent(2, 1, view_basis(compacted)) is None  # a view made otherwise
