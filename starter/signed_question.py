"""An answer to a question as the web app and `starter answer` send it: with who answers, and
signed when this program holds a signing key that may sign for them, bound to the run and to the
question as it waits (the digest of its call's arguments, read from the run's `status`)."""

from __future__ import annotations

from datetime import datetime

from runtime.signing_key import SigningKey, signed_question_answer
from starter.handle import AgentHandle
from starter.signed_answer import signer_name
from workflows.model import QuestionAnswer


async def question_as_sent(
    handle: AgentHandle,
    answer: QuestionAnswer,
    *,
    key: SigningKey | None,
    approver: str,
    now: datetime | None = None,
) -> QuestionAnswer:
    """`answer` as `approver` sends it: signed with `key` when there is one that may sign for
    them (a person's own key signs as its person). An answer for a question that is not waiting
    goes unsigned (the run refuses it, saying why)."""
    signer = None if key is None else signer_name(key, approver)
    answer = answer.model_copy(update={"approver": signer or approver, "groups": None})
    if key is None or signer is None:
        return answer
    status = await handle.status()
    question = next((q for q in status.pending_questions if q.call_id == answer.call_id), None)
    run_id = answer.run_id or await handle.first_run_id(status)
    if question is None or not question.arguments_sha256 or run_id is None:
        return answer
    return signed_question_answer(
        key,
        answer,
        approver=signer,
        workflow_id=handle.id,
        run_id=run_id,
        arguments_sha256=question.arguments_sha256,
        now=now,
    )
