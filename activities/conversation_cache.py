"""The conversations this worker process last sent to the model, by run: a `call_llm` activity
asks the run only for the messages after the prefix it holds (`conversation_tail`), and the run
confirms that prefix by its digest or answers the whole conversation. Bounded in runs and bytes;
losing an entry (another process, a restart, an eviction) only costs a whole fetch."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from workflows.conversation_tail import EMPTY_DIGEST, ConversationTail, extend
from workflows.model import ChatMessage

MAX_RUNS = 256
MAX_BYTES = 64 * 1024 * 1024

Key = tuple[str, str, bool]
"""(workflow id, run id, whether the model's view rather than the record)."""


@dataclass(frozen=True)
class Held:
    """A conversation and its digest, computed here from these very messages."""

    messages: list[ChatMessage]
    digest: str = EMPTY_DIGEST
    size: int = 0


NOTHING = Held(messages=[])


class ConversationCache:
    """Least recently used first out, past `max_runs` entries or `max_bytes` of messages."""

    def __init__(self, max_runs: int = MAX_RUNS, max_bytes: int = MAX_BYTES) -> None:
        self._max_runs = max_runs
        self._max_bytes = max_bytes
        self._held: OrderedDict[Key, Held] = OrderedDict()
        self._bytes = 0
        self.reused = 0
        """Fetches that read only what followed a prefix held here."""
        self.whole = 0
        """Fetches of a whole conversation (nothing held, or not the run's prefix)."""

    def __len__(self) -> int:
        return len(self._held)

    @property
    def bytes(self) -> int:
        return self._bytes

    def get(self, key: Key) -> Held:
        held = self._held.get(key)
        if held is None:
            return NOTHING
        self._held.move_to_end(key)
        return held

    def drop(self, key: Key) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            self._bytes -= held.size

    def keys(self) -> list[Key]:
        return list(self._held)

    def put(self, key: Key, held: Held) -> None:
        self.drop(key)
        if held.size > self._max_bytes:
            return
        self._held[key] = held
        self._bytes += held.size
        while len(self._held) > self._max_runs or self._bytes > self._max_bytes:
            _, oldest = self._held.popitem(last=False)
            self._bytes -= oldest.size


def joined(held: Held, tail: ConversationTail) -> Held | None:
    """The conversation `tail` completes: after `held`'s messages when the run confirmed them
    (`start` is their count), else `tail` alone (`start` 0). None when the digest computed here
    is not the run's (the answer does not fit what is held: fetch the whole conversation)."""
    if tail.start == 0:
        prefix = NOTHING
    elif tail.start == len(held.messages):
        prefix = held
    else:
        return None
    digest, size = extend(prefix.digest, tail.messages)
    if digest != tail.digest:
        return None
    return Held([*prefix.messages, *tail.messages], digest, prefix.size + size)
