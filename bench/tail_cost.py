"""`python -m bench.tail_cost`: what one model call's read of the conversation costs in
conversion, the whole conversation (the `messages` query's answer, encoded and decoded) against
the `conversation_tail` query's (the request, the run's digest check, the two new messages, the
worker's check), for conversations of a few sizes. In-process, no server: the payload converter
only, the best of 7 batches of 20 (the machine is shared)."""

from __future__ import annotations

import time
from collections.abc import Callable

from temporalio.contrib.pydantic import pydantic_data_converter

from activities.conversation_cache import Held, joined
from workflows.conversation.tail import (
    EMPTY_DIGEST,
    ConversationTail,
    PrefixDigests,
    TailRequest,
    extend,
)
from workflows.model import ChatMessage, ToolCall

CONVERTER = pydantic_data_converter.payload_converter
SIZES = ((10, 200), (100, 2_000), (300, 5_000))
"""(rounds, bytes of each tool result)."""


def conversation(rounds: int, size: int) -> list[ChatMessage]:
    messages = [ChatMessage.user("go")]
    for i in range(rounds):
        call = ToolCall(id=f"c{i}", name="read_file", arguments='{"path": "a"}')
        messages += [ChatMessage.assistant("x" * 50, [call]), ChatMessage.tool(call, "y" * size)]
    return messages


def best_ms(work: Callable[[], object]) -> float:
    times = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(20):
            work()
        times.append((time.perf_counter() - start) / 20 * 1000)
    return min(times)


def whole(messages: list[ChatMessage]) -> object:
    """The `messages` query's answer, encoded by the run's worker and decoded by the activity."""
    return CONVERTER.from_payloads(CONVERTER.to_payloads([messages]), [list[ChatMessage]])


def tail(messages: list[ChatMessage], held: Held, digests: PrefixDigests) -> object:
    """The `conversation_tail` query: its request, the run's answer, the worker's check."""
    ask = TailRequest(after=len(held.messages), digest=held.digest)
    [asked] = CONVERTER.from_payloads(CONVERTER.to_payloads([ask]), [TailRequest])
    answer = digests.tail(messages, asked.after, asked.digest)
    [got] = CONVERTER.from_payloads(CONVERTER.to_payloads([answer]), [ConversationTail])
    assert joined(held, got) is not None
    return got


def main() -> None:
    for rounds, size in SIZES:
        messages = conversation(rounds, size)
        prefix = messages[:-2]
        held = Held(prefix, *extend(EMPTY_DIGEST, prefix))
        digests = PrefixDigests()
        digests.of(prefix)
        kib = len(CONVERTER.to_payloads([messages])[0].data) / 1024
        old = best_ms(lambda: whole(messages))  # noqa: B023 - called within this iteration
        new = best_ms(lambda: tail(messages, held, digests))  # noqa: B023
        print(f"{rounds} rounds x {size} B ({kib:.0f} KiB): whole {old:.2f} ms, tail {new:.2f} ms")


if __name__ == "__main__":
    main()
