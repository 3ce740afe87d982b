"""A signed decision, from the bytes that are signed to the worker's verdict: an approval (or a
vote), a question's answer, asking again for an expired call, and a budget grant. One module and
one check for all four.

What is signed (Ed25519, by the person's own key or by a signing service the worker's approvers
file lets sign for them) is the canonical bytes of one person's decision about one thing: who
decided (`approver`; never their groups, which are the approvers file's), which run
(`workflow_id`, the first run id of its chain), what about (`call_id` and `arguments_sha256`, the
digest of the arguments shown; a grant names the budget as it stood instead), what was decided
and when (`signed_at`, ISO-8601 UTC), and the signing service that signed for the person
(`signed_by`, empty for their own key). So a signed decision copied to another call, run, set of
arguments, budget or person does not verify, nor one a service signed passed off as the
person's own.

`decision` is a string, so every kind signs the same way:

- `"approve"` / `"reject"`: an approval (`decision_of`);
- `"answer:<sha256 hex of the answer text>"`: an answer to a question (`answer_decision`);
- `"grant:<N>"` / `"stop"`: more tokens for a run at its budget, or stop it (`grant_decision`);
- `"reopen"`: asking again for a call whose approval timeout passed (`REOPEN`).

Clients build what they sign here (`starter`, the web app); the workflow builds what a
signature must cover from what it knows itself (never from what the decision claims about the
call) and asks the worker (`verify_answer`, a local activity: the approvers file never enters
the workflow, only the verdict enters its history, so a replay never decides again).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from workflows import names
from workflows.contract.arguments import arguments_digest
from workflows.model import (
    BudgetGrant,
    QuestionAnswer,
    ReopenRequest,
    ToolApprovalResponse,
    ToolCall,
)

SIGNING_VERSION = "agent-decision-2"
"""The first element of the signed bytes: a signature for another kind of message (or for the
shared key's bytes of before, `agent-answer-1`) never verifies as a decision."""


@dataclass(frozen=True)
class SignedFields:
    """Everything a decision's signature covers."""

    approver: str
    workflow_id: str
    run_id: str
    call_id: str
    arguments_sha256: str
    decision: str
    signed_at: str
    signed_by: str = ""
    """The signing service that signed for `approver` (empty: their own key)."""


def canonical_bytes(fields: SignedFields) -> bytes:
    """The bytes signed: one compact JSON array, in a fixed order (unambiguous whatever the
    values hold): `[version, approver, workflow_id, run_id, call_id, arguments_sha256, decision,
    signed_at, signed_by or ""]`."""
    values = [
        SIGNING_VERSION,
        fields.approver,
        fields.workflow_id,
        fields.run_id,
        fields.call_id,
        fields.arguments_sha256,
        fields.decision,
        fields.signed_at,
        fields.signed_by,
    ]
    return json.dumps(values, ensure_ascii=False, separators=(",", ":")).encode()


REOPEN = "reopen"
"""The decision a signed `reopen_approval` signs: ask again for an expired call."""


def decision_of(approved: bool) -> str:
    """An approval's decision as signed."""
    return "approve" if approved else "reject"


def signed_at_text(moment: datetime) -> str:
    """A time as `signed_at` carries it: ISO-8601 in UTC, to the microsecond, with `Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class VerifyRequest(BaseModel):
    """Input of `verify_answer`: the fields signed, as the workflow knows them, and the
    signature the decision carried (base64)."""

    approver: str
    workflow_id: str
    run_id: str
    call_id: str
    arguments_sha256: str
    decision: str
    signed_at: str
    signature: str
    signed_by: str = ""
    """The signing service the decision names as its signer (empty: the person's own key)."""

    def fields(self) -> SignedFields:
        return SignedFields(
            approver=self.approver,
            workflow_id=self.workflow_id,
            run_id=self.run_id,
            call_id=self.call_id,
            arguments_sha256=self.arguments_sha256,
            decision=self.decision,
            signed_at=self.signed_at,
            signed_by=self.signed_by,
        )


class VerifyVerdict(BaseModel):
    """Output of `verify_answer`: whether the signature verifies, else why not, and who signed
    as the worker's approvers file has them."""

    valid: bool
    problem: str | None = None
    groups: list[str] | None = None
    """The signer's groups in the worker's approvers file, possibly none (None only in verdicts
    recorded before the worker read its groups from a file, by runs started before own keys:
    the answer's own groups stand then)."""
    signed_by: str | None = None
    """The signing service that signed, when it was not the person's own key."""


@dataclass(frozen=True)
class Verified:
    """A signature the worker verified: the signer's groups, as its approvers file has them
    (None: a verdict recorded before it said), and the service that signed, if any."""

    groups: list[str] | None
    signed_by: str | None


def answer_decision(answer: object) -> str:
    """A question's answer as it is signed: `answer:` and the hex SHA-256 of the answer as sent,
    a text as it is, a list of options as its compact JSON."""
    text = (
        answer
        if isinstance(answer, str)
        else json.dumps(answer, ensure_ascii=False, separators=(",", ":"))
    )
    return "answer:" + hashlib.sha256(text.encode()).hexdigest()


def grant_decision(grant: BudgetGrant) -> str:
    """A grant's decision as signed: `grant:N` or `stop`."""
    return "stop" if grant.stop else f"grant:{grant.tokens}"


def budget_call(limit: int) -> str:
    """What a signed grant names in place of a call: the budget as it stood, so a grant that took
    effect cannot be sent again."""
    return f"budget:{limit}"


# ---- what each kind must cover, as the run knows it


def approval_request(
    response: ToolApprovalResponse, call: ToolCall, *, workflow_id: str, run_id: str
) -> VerifyRequest:
    """An approval (or a vote) for `call`, the waiting call this run holds."""
    return VerifyRequest(
        approver=response.approver or "",
        workflow_id=workflow_id,
        run_id=run_id,
        call_id=call.id,
        arguments_sha256=arguments_digest(call.arguments),
        decision=decision_of(response.approved),
        signed_at=response.signed_at or "",
        signature=response.signature or "",
        signed_by=response.signed_by or "",
    )


def answer_request(
    answer: QuestionAnswer, call_id: str, arguments_sha256: str, *, workflow_id: str, run_id: str
) -> VerifyRequest:
    """An answer to the question of call `call_id` (its arguments' digest as this run holds it)."""
    return VerifyRequest(
        approver=answer.approver or "",
        workflow_id=workflow_id,
        run_id=run_id,
        call_id=call_id,
        arguments_sha256=arguments_sha256,
        decision=answer_decision(answer.answer),
        signed_at=answer.signed_at or "",
        signature=answer.signature or "",
        signed_by=answer.signed_by or "",
    )


def reopen_request(
    request: ReopenRequest, call: ToolCall, *, workflow_id: str, run_id: str
) -> VerifyRequest:
    """Asking again for `call`, an expired call this run holds."""
    return VerifyRequest(
        approver=request.approver or "",
        workflow_id=workflow_id,
        run_id=run_id,
        call_id=call.id,
        arguments_sha256=arguments_digest(call.arguments),
        decision=REOPEN,
        signed_at=request.signed_at or "",
        signature=request.signature or "",
        signed_by=request.signed_by or "",
    )


def grant_request(
    grant: BudgetGrant, limit: int, *, workflow_id: str, run_id: str
) -> VerifyRequest:
    """A grant for this run's budget as it stands (`limit`)."""
    return VerifyRequest(
        approver=grant.approver or "",
        workflow_id=workflow_id,
        run_id=run_id,
        call_id=budget_call(limit),
        arguments_sha256="",
        decision=grant_decision(grant),
        signed_at=grant.signed_at or "",
        signature=grant.signature or "",
        signed_by=grant.signed_by or "",
    )


# ---- the worker's verdict

VERIFY_TIMEOUT = timedelta(seconds=10)
"""One check, in the worker's own process."""
VERIFY_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))


async def verdict(request: VerifyRequest, what: str) -> Verified | str:
    """The worker's verdict on one signature (`verify_answer`): who signed, or why `what` (an
    answer, a vote, a reopen, a grant) is refused."""
    try:
        found = await workflow.execute_local_activity(
            names.ACTIVITY_VERIFY_ANSWER,
            request,
            result_type=VerifyVerdict,
            start_to_close_timeout=VERIFY_TIMEOUT,
            retry_policy=VERIFY_RETRY,
        )
    except ActivityError as err:
        cause = err.cause if err.cause is not None else err
        return f"{what} could not be checked: {cause}"
    if not found.valid:
        return f"{what} is refused: {found.problem}"
    return Verified(groups=found.groups, signed_by=found.signed_by)
