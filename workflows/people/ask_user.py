"""The `ask_user` tool: a question the model asks a person, whose answer is the tool's result.

The workflow itself offers it (it is no tool of the worker's and never runs as `execute_tool`),
so here are its spec, what a call of it asks (`parse_question`: bad arguments are answered at
once with an error, never waited on), what answer it takes (`check_answer`: free text, one of
its options, or a list of them when it takes several) and the result the model reads. Pure; no
Temporal import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from workflows.contract.arguments import arguments_digest, parse_arguments
from workflows.contract.tool_results import envelope_error
from workflows.model import AnswerValue, PendingQuestion, ToolCall, ToolSpec

ASK_USER = "ask_user"
MAX_QUESTION_CHARS = 2_000
MAX_OPTIONS = 20
MAX_OPTION_CHARS = 200
MAX_ANSWER_CHARS = 4_000
"""The longest free-text answer a person may give (the model reads it whole)."""
QUESTION_TIMED_OUT = "no answer: the question timed out"
NOT_ANSWERED = "no answer: the question was not answered"

ASK_USER_SPEC = ToolSpec(
    name=ASK_USER,
    description=(
        "Ask the person you work for a question and wait for their answer (minutes or days). "
        "Use it when you cannot go on without their decision. With `options` they pick one "
        "(or, with `multiple: true`, several); without, they answer in their own words."
    ),
    parameters={
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "the question, in one or two sentences"},
            "options": {
                "type": "array",
                "items": {"type": "string"},
                "description": "the answers to choose from (optional)",
            },
            "multiple": {
                "type": "boolean",
                "description": "with options: the person may choose several",
            },
        },
        "required": ["question"],
        "additionalProperties": False,
    },
)


@dataclass(frozen=True)
class Question:
    """What one `ask_user` call asks."""

    call_id: str
    question: str
    options: tuple[str, ...] | None = None
    multiple: bool = False
    arguments_sha256: str = ""

    def shown(self) -> PendingQuestion:
        options = None if self.options is None else list(self.options)
        return PendingQuestion(
            call_id=self.call_id,
            question=self.question,
            options=options,
            multiple=self.multiple,
            arguments_sha256=self.arguments_sha256,
        )


def parse_question(call: ToolCall) -> Question | str:
    """The question a call asks, or why it is not one (told to the model at once)."""
    parsed = parse_arguments(call.arguments)
    if not parsed.ok or not isinstance(parsed.value, dict):
        return "the arguments must be one JSON object with a 'question'"
    args: dict[str, Any] = parsed.value
    digest = arguments_digest(call.arguments)
    unknown = sorted(set(args) - {"question", "options", "multiple"})
    if unknown:
        return f"unknown argument '{unknown[0]}' (ask_user takes question, options, multiple)"
    question = args.get("question")
    if not isinstance(question, str) or not question.strip():
        return "'question' must be a non-empty string"
    if len(question) > MAX_QUESTION_CHARS:
        return f"'question' is {len(question)} characters; at most {MAX_QUESTION_CHARS}"
    options = args.get("options")
    multiple = args.get("multiple", False)
    if not isinstance(multiple, bool):
        return "'multiple' must be true or false"
    if options is None:
        if multiple:
            return "'multiple' needs 'options' to choose from"
        return Question(call.id, question.strip(), arguments_sha256=digest)
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        return "'options' must be a list of strings"
    cleaned = [o.strip() for o in options]
    if not cleaned or len(cleaned) > MAX_OPTIONS:
        return f"'options' must hold 1 to {MAX_OPTIONS} answers"
    if any(not o or len(o) > MAX_OPTION_CHARS for o in cleaned):
        return f"each option must be a non-empty string of at most {MAX_OPTION_CHARS} characters"
    if len(set(cleaned)) != len(cleaned):
        return "'options' must not repeat an answer"
    return Question(call.id, question.strip(), tuple(cleaned), multiple, digest)


class Refused(ValueError):
    """An answer that is not one to this question: the reason, and nothing changes."""


def check_answer(question: Question, answer: object) -> AnswerValue:
    """The answer as the model will read it; `Refused` with the reason when it is not an answer
    to this question."""
    options = question.options
    if options is None:
        if not isinstance(answer, str) or not answer.strip():
            raise Refused("the answer must be a non-empty text")
        if len(answer) > MAX_ANSWER_CHARS:
            raise Refused(f"the answer is {len(answer)} characters; at most {MAX_ANSWER_CHARS}")
        return answer.strip()
    listed = ", ".join(options)
    if not question.multiple:
        if not isinstance(answer, str):
            raise Refused(f"this question takes one of its options as a text: {listed}")
        if answer.strip() not in options:
            raise Refused(f"'{_echo(answer)}' is not one of the options: {listed}")
        return answer.strip()
    if not isinstance(answer, list) or not all(isinstance(a, str) for a in answer):
        raise Refused(f"this question takes a list of its options: {listed}")
    chosen: list[str] = []
    for item in answer:
        if item.strip() not in options:
            raise Refused(f"'{_echo(item)}' is not one of the options: {listed}")
        if item.strip() not in chosen:
            chosen.append(item.strip())
    if not chosen:
        raise Refused("choose at least one of the options")
    return chosen


def _echo(text: str) -> str:
    return text if len(text) <= 80 else text[:79] + "…"


def answer_content(answer: AnswerValue) -> str:
    """The tool result the model reads: the envelope every tool's result has."""
    return json.dumps({"ok": True, "error": None, "data": {"answer": answer}}, ensure_ascii=False)


def error_content(problem: str) -> str:
    """An `ask_user` call that gets no answer (bad arguments, the timeout), in the envelope."""
    return envelope_error(problem)


def invalid_question(problem: str) -> str:
    return error_content(f"Invalid question: {problem}; nobody was asked")
