"""Questions: the one owner of a run's `ask_user` calls and their answers.

A run offers `ask_user` when `options.ask_user` says so (else the worker's AGENT_ASK_USER,
`WorkerSetup.ask_user`). A call of it with a good question waits for a person as an approval
does (the run's wait, deadline and timeout, `workflows.run.waits`); its answer enters through
`receive` (the `submit_answer` update) and is recorded by `answer` (event, audit); when the batch
runs, each question's step is its answer (`steps`). No I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import ValidationError

from workflows import bounds
from workflows.context import RunContext
from workflows.conversation.record import Conversation
from workflows.gate.audit import record_answer
from workflows.gate.reconstruction import Respond, Step
from workflows.intake import describe
from workflows.model import (
    AnswerEvent,
    AnswerValue,
    ApprovalSource,
    PendingQuestion,
    QuestionAnswer,
    QuestionEvent,
    QuestionRecord,
    ToolCall,
    ToolSpec,
)
from workflows.people.ask_user import (
    ASK_USER,
    ASK_USER_SPEC,
    NOT_ANSWERED,
    Question,
    answer_content,
    check_answer,
    error_content,
    invalid_question,
    parse_question,
)
from workflows.people.expiry import answer_problem
from workflows.shown import shorten


class Questions:
    def __init__(
        self,
        ctx: RunContext,
        conversation: Conversation,
        *,
        after_answer: Callable[[], None] = lambda: None,
    ) -> None:
        self._state = ctx.state
        self._conversation = conversation
        self._run_id = ctx.run_id
        self._emit = ctx.emit
        self._now = ctx.now
        self._after_answer = after_answer

    # ---- offering the tool

    @property
    def enabled(self) -> bool:
        """Whether this run offers `ask_user` (the run's option, else the worker's default)."""
        chosen = self._state.options.ask_user
        if chosen is not None:
            return chosen
        setup = self._state.setup
        return setup is not None and setup.ask_user

    def offered(self) -> list[ToolSpec]:
        """What the workflow adds to the tools the model is offered."""
        return [ASK_USER_SPEC] if self.enabled else []

    # ---- what waits

    def asked(self, pending: Sequence[ToolCall]) -> list[Question]:
        """The good questions among the pending calls (a bad one is answered at once)."""
        if not self.enabled:
            return []
        found = [parse_question(c) for c in pending if c.name == ASK_USER]
        return [q for q in found if isinstance(q, Question)]

    def waiting(self, pending: Sequence[ToolCall]) -> list[Question]:
        """The questions still waiting for a person's answer."""
        return [q for q in self.asked(pending) if q.call_id not in self._state.questions]

    def calls(self, pending: Sequence[ToolCall]) -> list[ToolCall]:
        """The `ask_user` calls whose question waits (they expire and are asked again as
        waiting calls do, `workflows.people.expiry`)."""
        ids = {q.call_id for q in self.waiting(pending)}
        return [c for c in pending if c.id in ids]

    def question(self, call_id: str) -> Question | None:
        """The waiting question of this call, if one waits."""
        waiting = self.waiting(self._conversation.pending())
        return next((q for q in waiting if q.call_id == call_id), None)

    def shown(self) -> list[PendingQuestion]:
        """The `status` query's `pending_questions`."""
        return [q.shown() for q in self.waiting(self._conversation.pending())]

    def announce(self, pending: Sequence[ToolCall]) -> list[Question]:
        """A `question` event for each question that starts waiting; returns those."""
        new = [q for q in self.waiting(pending) if q.call_id not in self._state.asked_questions]
        for question in new:
            self._state.asked_questions.append(question.call_id)
            shown = question.shown()
            self._emit(QuestionEvent(**shown.model_dump(exclude={"arguments_sha256"})))
        return new

    # ---- answers

    def receive(self, payload: object, *, finished: bool) -> tuple[QuestionAnswer, AnswerValue]:
        """An answer through the `submit_answer` update: parsed, then checked against the waiting
        question; ValueError with the reason when it cannot be taken (nothing changes)."""
        if finished:
            raise ValueError("the run has finished")
        return self.check(self.parse(payload), finished=finished)

    def parse(self, payload: object) -> QuestionAnswer:
        """An answer validated; nothing about the run checked (ValueError with the reason)."""
        try:
            return QuestionAnswer.model_validate(payload)
        except ValidationError as err:
            raise ValueError(f"invalid answer: {describe(err)}") from None

    def check(
        self, response: QuestionAnswer, *, finished: bool
    ) -> tuple[QuestionAnswer, AnswerValue]:
        """Whether a parsed answer can be taken now, and its value (ValueError with the reason)."""
        if finished:
            raise ValueError("the run has finished")
        if response.run_id is not None and response.run_id != self._run_id:
            raise ValueError("the question belongs to another run")
        echoed = shorten(response.call_id, bounds.ECHO_CHARS)
        if response.call_id in self._state.questions:
            raise ValueError(f"question '{echoed}' was already answered")
        waiting = self.waiting(self._conversation.pending())
        question = next((q for q in waiting if q.call_id == response.call_id), None)
        if question is None:
            if not waiting:
                raise ValueError(f"no question is waiting for an answer (got one for '{echoed}')")
            known = shorten(", ".join(q.call_id for q in waiting), 400)
            raise ValueError(f"unknown question '{echoed}' (waiting: {known})")
        if problem := answer_problem(self._state, question.call_id):
            raise ValueError(problem)
        value = check_answer(question, response.answer)  # Refused: a ValueError
        return response, value

    def answer(
        self,
        call_id: str,
        value: AnswerValue | None,
        *,
        approver: str | None = None,
        groups: list[str] | None = None,
        source: ApprovalSource = "person",
        error: str | None = None,
    ) -> None:
        """Record an answer (a person's, or the timeout's error): its event and the audit."""
        record = QuestionRecord(
            call_id=call_id,
            answer=value,
            approver=approver,
            groups=groups,
            at=self._now(),
            source=source,
            error=error,
        )
        self._state.questions[call_id] = record
        call = self._conversation.pending_call(call_id)
        if call is not None:
            record_answer(self._state, call, record)
        self._emit(AnswerEvent(**record.model_dump()))
        self._after_answer()

    def time_out(self, pending: Sequence[ToolCall], problem: str) -> None:
        """The wait's timeout answers every waiting question with `problem`."""
        for question in self.waiting(pending):
            self.answer(question.call_id, None, source="timeout", error=problem)

    # ---- the batch

    def steps(self, steps: Sequence[Step]) -> list[Step]:
        """Each `ask_user` call's step: its answer, or the error it gets instead."""
        if not self.enabled:
            return list(steps)
        result: list[Step] = []
        for step in steps:
            call = step.call
            if call.name != ASK_USER:
                result.append(step)
                continue
            question = parse_question(call)
            record = self._state.questions.get(call.id)
            if isinstance(question, str):
                content = invalid_question(question)
            elif record is not None and record.answer is not None:
                content = answer_content(record.answer)
            else:
                content = error_content(record.error if record and record.error else NOT_ANSWERED)
            result.append(Respond(call, content))
        return result

    def batch_done(self) -> None:
        """The pending calls all have their tool messages: their answers are spent."""
        self._state.questions.clear()
        self._state.asked_questions.clear()
