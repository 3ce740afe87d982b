"""Resume by message reconstruction, as plain functions.

No Temporal import here: the workflow calls these, and tests call them directly. The strings
are part of what the model sees (`Rejected: {reason}`, `User denied`, `Tool '{name}' not found`,
`Framework error: …`, the `{"ok", "error", "data"}` envelope) and are part of what the model sees.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from workflows.model import ChatMessage, ToolCall

DEFAULT_REJECTION_REASON = "User denied"
TRUNCATION_MARKER = "…[truncated {dropped} characters]"


class Answer(Protocol):
    """Anything with the shape of an approval answer (a response or a recorded answer)."""

    @property
    def approved(self) -> bool: ...

    @property
    def reason(self) -> str | None: ...


# ---- The strings the model sees ----


def envelope_error(message: str) -> str:
    """The error envelope, as the JSON text a tool message carries."""
    return json.dumps({"ok": False, "error": message, "data": None}, ensure_ascii=False)


def rejection_message(reason: str | None) -> str:
    return f"Rejected: {reason or DEFAULT_REJECTION_REASON}"


def tool_not_found_message(name: str) -> str:
    return f"Tool '{name}' not found"


def framework_error_message(error: str) -> str:
    return envelope_error(f"Framework error: {error}")


def invalid_arguments_message(error: str) -> str:
    return envelope_error(f"Invalid tool arguments: {error}")


def tool_output_message(output: Any) -> str:
    """A tool's output as the tool message carries it: `json.dumps(output)`."""
    try:
        return json.dumps(output, ensure_ascii=False)
    except (TypeError, ValueError) as err:
        return framework_error_message(f"tool output is not JSON: {err}")


def bound_text(text: str, limit: int) -> str:
    """Cut `text` to at most `limit` characters, saying clearly how much was dropped."""
    if len(text) <= limit:
        return text
    # The marker's length depends on the count it reports: shrink `keep` until they agree, so
    # the result never exceeds `limit` (keep only decreases, so this ends).
    keep = limit
    while True:
        marker = TRUNCATION_MARKER.format(dropped=len(text) - keep)
        fits = max(0, limit - len(marker))
        if fits >= keep:
            return text[:keep] + marker
        keep = fits


# ---- Arguments ----


@dataclass(frozen=True)
class ParsedArguments:
    ok: bool
    value: Any = None
    error: str = ""


def parse_arguments(arguments: Any) -> ParsedArguments:
    """Normalise tool arguments: a JSON string is parsed, a parsed value is taken as it is.

    Unlike the design this loop comes from (which executed with `null` on bad JSON), a string
    that is not valid JSON is an error the model is told about. An empty string means "no
    arguments".
    """
    if isinstance(arguments, str):
        if not arguments.strip():
            return ParsedArguments(ok=True, value={})
        try:
            return ParsedArguments(ok=True, value=json.loads(arguments))
        except json.JSONDecodeError as err:
            return ParsedArguments(ok=False, error=f"{err.msg} at position {err.pos}")
        except RecursionError:  # ~1,000 levels deep: no tool takes that, and it must not wedge
            return ParsedArguments(ok=False, error="nested too deeply")
    return ParsedArguments(ok=True, value=arguments)


# ---- Pending calls ----


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


def runnable(call: ToolCall, known_tool: Callable[[str], bool], max_argument_chars: int) -> bool:
    """Whether a call could run at all: a known tool and arguments that are one JSON object of a
    size a tool takes. A call that cannot run is answered at once and never waits for a person."""
    if not known_tool(call.name):
        return False
    if isinstance(call.arguments, str) and len(call.arguments) > max_argument_chars:
        return False
    parsed = parse_arguments(call.arguments)
    return parsed.ok and (parsed.value is None or isinstance(parsed.value, dict))


# ---- Approval matching ----


@dataclass(frozen=True)
class Execute:
    """Run the tool with these (parsed) arguments."""

    call: ToolCall
    arguments: Any


@dataclass(frozen=True)
class Respond:
    """Do not run anything: answer the call with this content."""

    call: ToolCall
    content: str


Step = Execute | Respond


def too_many_calls_message(limit: int) -> str:
    return envelope_error(
        f"Not run: a reply may run at most {limit} tool calls; ask for the rest in a later reply"
    )


def plan_resume(
    pending: Sequence[ToolCall],
    answers: Mapping[str, Answer],
    requires_approval: Callable[[ToolCall], bool],
    known_tools: Callable[[str], bool],
    *,
    max_runs: int | None = None,
    max_argument_chars: int | None = None,
) -> list[Step]:
    """Decide, for each pending call in order, whether to execute it or what to answer instead.

    - needs approval and answered rejected (or not answered at all) → `Rejected: {reason}`;
    - unknown tool → `Tool '{name}' not found`;
    - arguments that are not valid JSON, or longer than `max_argument_chars` → the
      invalid-arguments envelope;
    - beyond the first `max_runs` calls to execute → the too-many-calls envelope;
    - otherwise (approved, or not in need of approval) → execute.
    """
    steps: list[Step] = []
    runs = 0
    for call in pending:
        if requires_approval(call):
            answer = answers.get(call.id)
            if answer is None or not answer.approved:
                reason = answer.reason if answer is not None else None
                steps.append(Respond(call, rejection_message(reason)))
                continue
        if not known_tools(call.name):
            steps.append(Respond(call, tool_not_found_message(call.name)))
            continue
        text = call.arguments if isinstance(call.arguments, str) else None
        if max_argument_chars is not None and text is not None and len(text) > max_argument_chars:
            steps.append(
                Respond(
                    call,
                    invalid_arguments_message(
                        f"{len(text)} characters, more than the {max_argument_chars} a tool takes"
                    ),
                )
            )
            continue
        parsed = parse_arguments(call.arguments)
        if not parsed.ok:
            steps.append(Respond(call, invalid_arguments_message(parsed.error)))
            continue
        if max_runs is not None and runs >= max_runs:
            steps.append(Respond(call, too_many_calls_message(max_runs)))
            continue
        runs += 1
        steps.append(Execute(call, parsed.value))
    return steps


# ---- The ordering invariant ----


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
