"""Signed answers to questions: checked by the worker before they are taken, as approvals are
(`workflows.people.signatures`).

The signature covers what an approval's does, the question's call and the digest of its
arguments as this run holds them, with the decision `answer:<sha256 of the answer as sent>`
(`workflows.people.ask_user.answer_decision`). The `verify_answer` local activity checks it with the
worker's key; only the verdict enters the history.
"""

from __future__ import annotations

from workflows import bounds
from workflows.contract.signing import VerifyRequest
from workflows.model import QuestionAnswer
from workflows.people.ask_user import Question, answer_decision
from workflows.people.signatures import signature_refusal
from workflows.shown import shorten


def verify_request(
    answer: QuestionAnswer, question: Question, *, workflow_id: str, run_id: str
) -> VerifyRequest:
    """What the answer's signature must cover, as this run knows it."""
    return VerifyRequest(
        approver=answer.approver or "",
        groups=list(answer.groups or []),
        workflow_id=workflow_id,
        run_id=run_id,
        call_id=question.call_id,
        arguments_sha256=question.arguments_sha256,
        decision=answer_decision(answer.answer),
        signed_at=answer.signed_at or "",
        signature=answer.signature or "",
    )


async def signature_problem(
    answer: QuestionAnswer, question: Question, *, workflow_id: str, run_id: str
) -> str | None:
    """Why a signed answer is refused (its signature does not verify, or could not be
    checked), or None."""
    shown = shorten(answer.call_id, bounds.ECHO_CHARS)
    request = verify_request(answer, question, workflow_id=workflow_id, run_id=run_id)
    return await signature_refusal(request, f"the answer for question '{shown}'")
