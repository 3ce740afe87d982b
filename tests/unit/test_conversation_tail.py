"""The conversation in parts: the workflow's prefix digests (what `conversation_tail` answers)
and the worker's bounded cache of what it last fetched, joined only when the digests agree."""

from __future__ import annotations

from activities.conversation_cache import NOTHING, ConversationCache, Held, joined
from workflows.conversation.record import with_call
from workflows.conversation.tail import EMPTY_DIGEST, PrefixDigests, extend
from workflows.model import ChatMessage, ToolCall

CALL = ToolCall(id="c1", name="read_file", arguments='{"path": "a"}')
MESSAGES = [
    ChatMessage.system("be brief"),
    ChatMessage.user("read a"),
    ChatMessage.assistant("", [CALL]),
    ChatMessage.tool(CALL, "text of a"),
]


def held(messages: list[ChatMessage]) -> Held:
    digest, size = extend(EMPTY_DIGEST, messages)
    return Held(list(messages), digest, size)


def test_the_digest_is_a_chain_over_the_messages():
    whole, _ = extend(EMPTY_DIGEST, MESSAGES)
    first, _ = extend(EMPTY_DIGEST, MESSAGES[:2])
    assert extend(first, MESSAGES[2:])[0] == whole
    assert extend(EMPTY_DIGEST, MESSAGES[1:])[0] != whole
    other = [*MESSAGES[:3], ChatMessage.tool(CALL, "text of b")]
    assert extend(EMPTY_DIGEST, other)[0] != whole


def test_the_workflows_digests_follow_every_change_even_one_made_in_place():
    digests = PrefixDigests()
    messages = [m.model_copy(deep=True) for m in MESSAGES]
    assert digests.of(messages) == [extend(EMPTY_DIGEST, messages[:i])[0] for i in range(5)]
    messages.append(ChatMessage.user("more"))
    assert digests.of(messages)[-1] == extend(EMPTY_DIGEST, messages)[0]
    edited = with_call(messages, CALL.model_copy(update={"arguments": '{"path": "b"}'}))
    assert digests.of(edited)[-1] == extend(EMPTY_DIGEST, edited)[0]
    edited[1].content = "read b"  # in place: the copy kept is not fooled
    assert digests.of(edited)[2] == extend(EMPTY_DIGEST, edited[:2])[0]


def test_the_tail_is_what_follows_a_confirmed_prefix_and_else_everything():
    digests = PrefixDigests()
    mine = held(MESSAGES[:2])
    tail = digests.tail(MESSAGES, 2, mine.digest)
    assert (tail.start, tail.messages) == (2, MESSAGES[2:])
    assert joined(mine, tail) == held(MESSAGES)
    wrong = held([MESSAGES[0], ChatMessage.user("read b")])
    tail = digests.tail(MESSAGES, 2, wrong.digest)
    assert (tail.start, tail.messages) == (0, MESSAGES)
    assert joined(wrong, tail) == held(MESSAGES)
    assert digests.tail(MESSAGES, 9, mine.digest).start == 0  # more than the run has
    assert digests.tail(MESSAGES, 0, EMPTY_DIGEST).messages == MESSAGES


def test_a_tail_that_does_not_fit_what_is_held_is_not_joined():
    digests = PrefixDigests()
    tail = digests.tail(MESSAGES, 2, held(MESSAGES[:2]).digest)
    assert joined(held(MESSAGES[:3]), tail) is None  # start is not what is held
    assert joined(NOTHING, tail) is None
    forged = tail.model_copy(update={"messages": [ChatMessage.user("x"), *tail.messages[1:]]})
    assert joined(held(MESSAGES[:2]), forged) is None  # the digest computed here disagrees


def test_the_cache_is_bounded_in_runs_and_bytes_least_recently_used_first_out():
    one = held(MESSAGES)
    cache = ConversationCache(max_runs=2, max_bytes=3 * one.size)
    cache.put(("a", "r", False), one)
    cache.put(("b", "r", False), one)
    assert cache.get(("a", "r", False)) == one  # now the most recent
    cache.put(("c", "r", False), one)
    assert len(cache) == 2 and cache.get(("b", "r", False)) is NOTHING
    assert cache.bytes == 2 * one.size
    big = held(MESSAGES * 3)
    cache.put(("d", "r", True), big)  # 3 sizes: the others make room
    assert len(cache) == 1 and cache.bytes == big.size
    cache.put(("e", "r", True), held(MESSAGES * 4))  # larger than the whole cache: not kept
    assert cache.get(("e", "r", True)) is NOTHING and cache.bytes == big.size
    cache.drop(("d", "r", True))
    assert len(cache) == 0 and cache.bytes == 0


def test_a_runs_results_are_kept_while_its_conversation_is_and_counted_in_its_bytes():
    one = held(MESSAGES)
    cache = ConversationCache(max_runs=2, max_bytes=3 * one.size)
    cache.result(("a", "r"), "c1", "text")  # nothing held for the run: nothing to rebuild on
    assert cache.take(("a", "r")).tools == {} and cache.bytes == 0
    cache.put(("a", "r", True), one)
    cache.result(("a", "r"), "c1", "text of a")
    cache.reply(("a", "r"), 2, ChatMessage.assistant("done"))
    assert cache.bytes > one.size
    cache.put(("a", "r", True), held(MESSAGES[:3]))  # the next conversation: results kept
    taken = cache.take(("a", "r"))  # once, by the next model call
    assert taken.tools == {"c1": "text of a"} and list(taken.replies) == [2]
    assert cache.take(("a", "r")).tools == {} and cache.bytes == held(MESSAGES[:3]).size
    cache.result(("a", "r"), "c2", "x")
    cache.put(("b", "r", False), one)
    cache.put(("c", "r", False), one)  # run a is evicted, and its results with it
    assert cache.get(("a", "r", True)) is NOTHING
    assert cache.take(("a", "r")).tools == {} and cache.bytes == 2 * one.size
    cache.result(("b", "r"), "big", "x" * (3 * one.size))  # past the bytes: the oldest go
    assert cache.bytes <= 3 * one.size
