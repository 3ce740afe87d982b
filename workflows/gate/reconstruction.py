"""Resume by message reconstruction: for each pending call, run it or answer it, in call order.

No Temporal import here: the workflow calls these, and tests call them directly. The strings
the model sees are `workflows.contract.tool_results`; the pending calls are
`workflows.conversation.record`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from workflows.contract.arguments import parse_arguments
from workflows.contract.tool_results import (
    invalid_arguments_message,
    rejection_message,
    too_many_calls_message,
    tool_not_found_message,
)
from workflows.model import ToolCall


class Answer(Protocol):
    """Anything with the shape of an approval answer (a response or a recorded answer)."""

    @property
    def approved(self) -> bool: ...

    @property
    def reason(self) -> str | None: ...


def runnable(call: ToolCall, known_tool: Callable[[str], bool], max_argument_chars: int) -> bool:
    """Whether a call could run at all: a known tool and arguments that are one JSON object of a
    size a tool takes. A call that cannot run is answered at once and never waits for a person."""
    if not known_tool(call.name):
        return False
    if isinstance(call.arguments, str) and len(call.arguments) > max_argument_chars:
        return False
    parsed = parse_arguments(call.arguments)
    return parsed.ok and (parsed.value is None or isinstance(parsed.value, dict))


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


def plan_resume(
    pending: Sequence[ToolCall],
    answers: Mapping[str, Answer],
    requires_approval: Callable[[ToolCall], bool],
    known_tools: Callable[[str], bool],
    *,
    max_runs: int | None = None,
    max_argument_chars: int | None = None,
    refuse: Callable[[ToolCall, str | None], str | None] | None = None,
) -> list[Step]:
    """Decide, for each pending call in order, whether to execute it or what to answer instead.

    - needs approval and answered rejected (or not answered at all) → `Rejected: {reason}`;
    - unknown tool → `Tool '{name}' not found`;
    - arguments that are not valid JSON, or longer than `max_argument_chars` → the
      invalid-arguments envelope;
    - `refuse(call, arguments_error)` gives content (the run will not run this call: a repeat,
      arguments cut off at the token limit) → that content;
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
        refusal = None if refuse is None else refuse(call, None if parsed.ok else parsed.error)
        if refusal is not None:
            steps.append(Respond(call, refusal))
            continue
        if not parsed.ok:
            steps.append(Respond(call, invalid_arguments_message(parsed.error)))
            continue
        if max_runs is not None and runs >= max_runs:
            steps.append(Respond(call, too_many_calls_message(max_runs)))
            continue
        runs += 1
        steps.append(Execute(call, parsed.value))
    return steps
