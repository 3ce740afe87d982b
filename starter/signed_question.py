"""An answer to a question as the web app and `starter answer` send it: with who answers and
their groups, and signed when this program holds `AGENT_APPROVER_KEY`, bound to the run and to
the question as it waits (the digest of its call's arguments, read from the run's `status`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from runtime.approver_key import ApproverKey
from starter.handle import AgentHandle
from workflows.model import QuestionAnswer
from workflows.people.signatures import answer_decision, canonical_groups


async def question_as_sent(
    handle: AgentHandle,
    answer: QuestionAnswer,
    *,
    key: ApproverKey | None,
    approver: str,
    groups: Sequence[str],
    now: datetime | None = None,
) -> QuestionAnswer:
    """`answer` as `approver` of `groups` sends it: signed with `key` when there is one. An
    answer for a question that is not waiting goes unsigned (the run refuses it, saying why)."""
    chosen = list(canonical_groups(groups))
    answer = answer.model_copy(update={"approver": approver, "groups": chosen or None})
    if key is None:
        return answer
    status = await handle.status()
    question = next((q for q in status.pending_questions if q.call_id == answer.call_id), None)
    run_id = answer.run_id or await handle.first_run_id(status)
    if question is None or not question.arguments_sha256 or run_id is None:
        return answer
    signed_at, signature = key.signed_now(
        approver=approver, groups=chosen, workflow_id=handle.id, run_id=run_id,
        call_id=answer.call_id, arguments_sha256=question.arguments_sha256,
        decision=answer_decision(answer.answer), now=now,
    )  # fmt: skip
    return answer.model_copy(
        update={"run_id": run_id, "signed_at": signed_at, "signature": signature}
    )
