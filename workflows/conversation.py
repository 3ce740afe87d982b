"""The conversation's structure, as plain functions: which calls are pending (resume by message
reconstruction), call ids unique within a run, and the ordering invariant. Pure; no Temporal
import."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from workflows.model import ChatMessage, ToolCall


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
    result: list[ToolCall] = []
    for position, call in enumerate(calls):
        call_id = call.id
        if not call_id or (max_id_chars is not None and len(call_id) > max_id_chars):
            call_id = f"{prefix}_{position}"
        candidate, suffix = call_id, 2
        while candidate in seen:
            candidate, suffix = f"{call_id}#{suffix}", suffix + 1
        seen.add(candidate)
        result.append(call if candidate == call.id else call.model_copy(update={"id": candidate}))
    return result


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
