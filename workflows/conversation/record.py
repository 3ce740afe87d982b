"""The conversation: the one owner of a run's messages (`Conversation`), and the plain functions
of its structure: which calls are pending (resume by message reconstruction), call ids unique
within a run, and the ordering invariant. Pure; no Temporal import.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from workflows import bounds
from workflows.contract.tool_results import TRUNCATION_MARKER
from workflows.conversation.parts import Part, Sources, reply_message, with_ids
from workflows.model import AgentState, ChatMessage, Inline, ReplyOf, ResultOf, ToolCall
from workflows.shown import shorten


def too_large_message(
    size: int, limit: int, reply: int | None = None, *, store: bool | None = None
) -> str:
    """`store`: whether the worker has a payload store (None: the run does not know)."""
    what = (
        f"the model's reply of {reply} bytes brings it to {size} bytes"
        if reply
        else f"{size} bytes"
    )
    hint = ""
    if store is False:
        hint = " (set AGENT_PAYLOAD_STORE on every program to keep longer conversations)"
    elif store:
        hint = " (AGENT_MAX_CONVERSATION_MB on the worker sets this budget)"
    return (
        f"Conversation too large: {what}, more than {limit}{hint};"
        " start a new run with a shorter history"
    )


class Conversation:
    """The run's messages (`state.messages`) and the user messages held while calls are pending
    (`state.held_messages`): everything that reads or writes them goes through here, so the
    ordering invariant and the size budget have one keeper."""

    def __init__(self, state: AgentState) -> None:
        self._state = state
        self._sized = (0, 0)
        """(messages measured, their JSON bytes): messages are append-only, except an edit."""
        self._pending: tuple[tuple[int, int], list[ToolCall]] | None = None
        self._edits = 0
        self.sources = Sources()
        """Where each message since the previous model request came from (`LlmRequest.tail`)."""

    @property
    def messages(self) -> list[ChatMessage]:
        return self._state.messages

    @property
    def held(self) -> list[ChatMessage]:
        return self._state.held_messages

    # ---- reading

    def pending(self) -> list[ToolCall]:
        """The calls of the last assistant message with calls that have no tool message yet."""
        key = (len(self.messages), self._edits)
        if self._pending is None or self._pending[0] != key:
            self._pending = (key, pending_calls(self.messages))
        return list(self._pending[1])

    def pending_call(self, call_id: str) -> ToolCall | None:
        return next((c for c in self.pending() if c.id == call_id), None)

    def answered(self, call_id: str) -> bool:
        """Whether the call already has its tool message."""
        return call_id in answered_ids(self.messages)

    def size(self) -> int:
        """The JSON size of the messages, each measured once."""
        count, size = self._sized
        for message in self.messages[count:]:
            size += bounds.json_bytes(message)
        self._sized = (len(self.messages), size)
        return size

    @property
    def budget(self) -> int:
        """The conversation's size budget in bytes: the worker's (with a payload store it is
        larger), else the default."""
        setup = self._state.setup
        return setup.conversation_bytes if setup is not None else bounds.MAX_CONVERSATION_BYTES

    def too_large(self, extra: int = 0, *, reply: int | None = None) -> str | None:
        """Why the conversation (plus `extra` bytes) is over its budget, or None."""
        size = self.size() + extra
        if size <= self.budget:
            return None
        setup = self._state.setup
        store = None if setup is None else setup.payload_store
        return too_large_message(size, self.budget, reply, store=store)

    # ---- writing

    def reply(self, content: str, calls: Sequence[ToolCall], round_: int) -> ChatMessage:
        """The model's reply as the conversation keeps it: every call with an id no other call of
        the run has (renamed deterministically), so an answer is for one call only."""
        prefix = f"call_r{round_}"
        unique = unique_call_ids(calls, prefix, call_ids(self.messages), bounds.MAX_CALL_ID_CHARS)
        return reply_message(content, unique)

    def append(self, message: ChatMessage, source: Part | None = None) -> None:
        """`source`: where the message came from (`ReplyOf` the model's reply); else it is
        carried whole."""
        self.messages.append(message)
        self.sources.added(source or Inline(message=message))

    def append_reply(self, message: ChatMessage, round_: int) -> None:
        """The model's reply of `round_` (built by `reply`)."""
        ids = [call.id for call in message.tool_calls or []]
        self.append(message, ReplyOf(reply_of=round_, ids=ids))

    def append_results(
        self,
        calls: Sequence[ToolCall],
        contents: Sequence[str],
        executed: Collection[str] = (),
    ) -> list[ChatMessage]:
        """One tool message per call, in call order, appended together (the ordering invariant);
        each bounded, and the batch cut to what the budget leaves. `executed`:
        the calls whose content is their `execute_tool` result."""
        limit = bounds.TOOL_CONTENT_CHARS
        texts = [shorten(c, limit, TRUNCATION_MARKER, within=True) for c in contents]
        room = self.budget - self.size() - 200 * len(texts)
        texts = bounds.fit_batch(texts, max(0, room) // 2)
        added = [ChatMessage.tool(call, text) for call, text in zip(calls, texts, strict=True)]
        self.messages.extend(added)
        for call, message, content in zip(calls, added, contents, strict=True):
            same = call.id in executed and message.content == content  # not cut here
            self.sources.added(ResultOf(result_of=call.id) if same else Inline(message=message))
        return added

    def replace_call(self, call: ToolCall) -> None:
        """The pending call of the same id becomes `call` (an edit on approval), so the
        conversation says what ran."""
        self.messages[:] = with_call(self.messages, call)
        self._edits += 1
        self._sized = (0, 0)  # a message changed: measure again
        self.sources.forget()

    def hold(self, message: ChatMessage) -> str | None:
        """Keep a user message until the pending calls are answered; why not, if it would take
        the conversation over its budget."""
        held = sum(bounds.json_bytes(m) for m in self.held)
        size = self.size() + held
        added = bounds.json_bytes(message)
        limit = self.budget
        if size + added > limit:
            return (
                f"a message of {added} bytes would bring the conversation to {size + added}"
                f" bytes, more than {limit}"
            )
        self.held.append(message)
        return None

    def flush_held(self) -> bool:
        """Append the held messages once no call is pending. True when there were some."""
        if not self.held or self.pending():
            return False
        for message in self.held:
            self.append(message)
        self._state.held_messages = []
        return True


def with_call(messages: Sequence[ChatMessage], call: ToolCall) -> list[ChatMessage]:
    """The messages with the last assistant message's call of the same id replaced by `call`.
    Unchanged when no such call is there."""
    out = list(messages)
    for index in range(len(out) - 1, -1, -1):
        message = out[index]
        if message.role != "assistant" or not message.tool_calls:
            continue
        if all(c.id != call.id for c in message.tool_calls):
            return out
        calls = [call if c.id == call.id else c for c in message.tool_calls]
        out[index] = message.model_copy(update={"tool_calls": calls})
        return out
    return out


def last_tool_call_index(messages: Sequence[ChatMessage]) -> int | None:
    """Index of the last assistant message that has tool calls, or None."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "assistant" and message.tool_calls:
            return index
    return None


def pending_calls(messages: Sequence[ChatMessage]) -> list[ToolCall]:
    """The calls of the last assistant message with tool calls that have no tool message yet.

    Only tool messages after that assistant message count: models reuse ids such as `call_0`
    across rounds, and an old answer must not hide a new call.
    """
    index = last_tool_call_index(messages)
    if index is None:
        return []
    answered = {m.tool_call_id for m in messages[index + 1 :] if m.role == "tool"}
    calls = messages[index].tool_calls or []
    return [call for call in calls if call.id not in answered]


def unique_call_ids(
    calls: Iterable[ToolCall],
    prefix: str,
    taken: Collection[str] = (),
    max_id_chars: int | None = None,
) -> list[ToolCall]:
    """Give every call of one reply a distinct, non-empty id that no call in `taken` has.

    Models reuse ids (`call_0` every round) and some send none; an answer must match one call
    only, so a reused id is renamed deterministically (`call_0` → `call_0#2`), an empty one gets
    `{prefix}_{position}`, and one longer than `max_id_chars` is replaced by the generated id.
    """
    seen: set[str] = set(taken)
    given = list(calls)
    ids: list[str] = []
    for position, call in enumerate(given):
        call_id = call.id
        if not call_id or (max_id_chars is not None and len(call_id) > max_id_chars):
            call_id = f"{prefix}_{position}"
        candidate, suffix = call_id, 2
        while candidate in seen:
            candidate, suffix = f"{call_id}#{suffix}", suffix + 1
        seen.add(candidate)
        ids.append(candidate)
    return with_ids(given, ids)


def call_ids(messages: Iterable[ChatMessage]) -> set[str]:
    """Every tool call id the conversation holds."""
    return {call.id for m in messages if m.role == "assistant" for call in m.tool_calls or []}


def answered_ids(messages: Iterable[ChatMessage]) -> set[str]:
    """The ids of the calls that already have their tool message."""
    return {m.tool_call_id for m in messages if m.role == "tool" and m.tool_call_id}


def invariant_violations(
    messages: Sequence[ChatMessage], *, allow_open_tail: bool = True
) -> list[str]:
    """Check the ordering invariant: each assistant message with tool calls is followed directly by
    exactly one tool message per call, in call order.

    With `allow_open_tail`, the last assistant message may still lack some or all of its tool
    messages (its calls are pending, or the run was cancelled before they were answered).
    Returns a description of each violation; empty means the history is well formed.
    """
    problems: list[str] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        if message.role == "tool":
            problems.append(f"message {index - 1}: tool message without a preceding call")
            continue
        if message.role != "assistant" or not message.tool_calls:
            continue
        start = index - 1
        expected = [call.id for call in message.tool_calls]
        got: list[str | None] = []
        while index < len(messages) and messages[index].role == "tool":
            got.append(messages[index].tool_call_id)
            index += 1
        is_tail = index >= len(messages)
        if got == expected:
            continue
        if allow_open_tail and is_tail and got == expected[: len(got)]:
            continue
        problems.append(f"message {start}: calls {expected} answered by tool messages {got}")
    return problems
