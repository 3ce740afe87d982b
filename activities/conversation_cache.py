"""The conversations this worker process last sent to the model, by run: a `call_llm` activity
asks the run only for the messages after the prefix it holds (`conversation_tail`), and the run
confirms that prefix by its digest or answers the whole conversation. Next to a run's
conversation, the `call_llm` and `execute_tool` results this process returned for it since:
with them a request's tail (`LlmRequest.tail`) rebuilds the new conversation without a query.
Bounded in runs and bytes; losing an entry (another process, a restart, an eviction) only costs
a fetch."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from workflows.conversation.tail import EMPTY_DIGEST, ConversationTail, extend
from workflows.model import ChatMessage

MAX_RUNS = 256
MAX_BYTES = 64 * 1024 * 1024

Key = tuple[str, str, bool]
"""(workflow id, run id, whether the model's view rather than the record)."""

Run = tuple[str, str]
"""(workflow id, run id)."""


@dataclass(frozen=True)
class Held:
    """A conversation and its digest, computed here from these very messages."""

    messages: list[ChatMessage]
    digest: str = EMPTY_DIGEST
    size: int = 0


NOTHING = Held(messages=[])


@dataclass
class Results:
    """What this process returned for a run since its last model call: the model's replies by
    round, the tools' results by call id."""

    replies: dict[int, ChatMessage] = field(default_factory=dict)
    tools: dict[str, str] = field(default_factory=dict)
    size: int = 0


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
        self.unqueried = 0
        """Conversations rebuilt from a request's tail and this process's results: no query."""
        self._results: dict[Run, Results] = {}

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
        """Forget the conversation, and the run's results once nothing of it is held."""
        self._remove(key)
        run = (key[0], key[1])
        if (*run, False) not in self._held and (*run, True) not in self._held:
            self._forget(run)

    def _remove(self, key: Key) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            self._bytes -= held.size

    def _forget(self, run: Run) -> None:
        results = self._results.pop(run, None)
        if results is not None:
            self._bytes -= results.size

    def keys(self) -> list[Key]:
        return list(self._held)

    def put(self, key: Key, held: Held) -> None:
        self._remove(key)
        if held.size > self._max_bytes:
            self.drop(key)
            return
        self._held[key] = held
        self._bytes += held.size
        self._shrink()

    # ---- the results returned since a run's last model call (kept while its record is held)

    def reply(self, run: Run, round_: int, message: ChatMessage) -> None:
        """The model's reply of round `round_` (the message `call_llm` returned)."""
        if (results := self._of(run)) is not None:
            results.replies[round_] = message
            self._grew(results, len(message.model_dump_json()))

    def result(self, run: Run, call_id: str, content: str) -> None:
        """The result `execute_tool` returned for call `call_id`."""
        if (results := self._of(run)) is not None:
            results.tools[call_id] = content
            self._grew(results, len(content.encode()) + len(call_id))

    def take(self, run: Run) -> Results:
        """The run's results, forgotten here (a model call uses them once)."""
        results = self._results.get(run) or Results()
        self._forget(run)
        return results

    def _of(self, run: Run) -> Results | None:
        if (*run, False) not in self._held and (*run, True) not in self._held:
            return None  # nothing to rebuild on
        return self._results.setdefault(run, Results())

    def _grew(self, results: Results, size: int) -> None:
        results.size += size
        self._bytes += size
        self._shrink()

    def _shrink(self) -> None:
        """Drop the least recently used conversations (and their runs' results) until within
        the bounds."""
        while self._held and (len(self._held) > self._max_runs or self._bytes > self._max_bytes):
            oldest = next(iter(self._held))
            self.drop(oldest)


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
