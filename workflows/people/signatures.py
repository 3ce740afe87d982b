"""Signed answers in the workflow: each one is checked by the worker before it is taken.

The workflow never holds `AGENT_APPROVER_KEY`. For an answer that carries a signature it builds
what was signed from what it knows itself (its workflow id, the first run id of its chain, the
waiting call's id and the digest of that call's arguments, never what the answer claims about
them) and asks the `verify_answer` local activity; the verdict is recorded in the history, so a
replay (or a rotated key) never changes the decision. A forged answer, or a signed answer copied
to another call, run or set of arguments, is refused with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from workflows import bounds, names
from workflows.contract.arguments import arguments_digest
from workflows.contract.signing import REOPEN, VerifyRequest, VerifyVerdict, decision_of
from workflows.conversation.record import Conversation
from workflows.gate.approvals import Approvals
from workflows.model import ReopenRequest, ToolApprovalResponse, ToolCall
from workflows.shown import shorten

VERIFY_TIMEOUT = timedelta(seconds=10)
"""One check: an HMAC over a few hundred bytes, in the worker's own process."""
VERIFY_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))


def verify_request(
    response: ToolApprovalResponse, call: ToolCall, *, workflow_id: str, run_id: str
) -> VerifyRequest:
    """What the answer's signature must cover, as this run knows it."""
    return VerifyRequest(
        approver=response.approver or "",
        groups=list(response.groups or []),
        workflow_id=workflow_id,
        run_id=run_id,
        call_id=call.id,
        arguments_sha256=arguments_digest(call.arguments),
        decision=decision_of(response.approved),
        signed_at=response.signed_at or "",
        signature=response.signature or "",
    )


async def signature_refusal(request: VerifyRequest, what: str) -> str | None:
    """The worker's verdict on one signature (`verify_answer`): None when it verifies, else why
    `what` (an answer, a reopen, a grant) is refused."""
    try:
        verdict = await workflow.execute_local_activity(
            names.ACTIVITY_VERIFY_ANSWER,
            request,
            result_type=VerifyVerdict,
            start_to_close_timeout=VERIFY_TIMEOUT,
            retry_policy=VERIFY_RETRY,
        )
    except ActivityError as err:
        cause = err.cause if err.cause is not None else err
        return f"{what} could not be checked: {cause}"
    if not verdict.valid:
        return f"{what} is refused: {verdict.problem}"
    return None


class SignedAnswers:
    """The check of a signed answer: the worker verifies it before the run takes it."""

    def __init__(
        self,
        approvals: Approvals,
        conversation: Conversation,
        *,
        workflow_id: str,
        run_id: str,
    ) -> None:
        self._approvals = approvals
        self._conversation = conversation
        self._workflow_id = workflow_id
        self._run_id = run_id

    def signed(self, response: ToolApprovalResponse) -> bool:
        """Whether this answer must be verified before it is taken."""
        return response.signature is not None

    async def problem(
        self, response: ToolApprovalResponse, finished: Callable[[], bool]
    ) -> str | None:
        """Why a signed answer (already taken through `Approvals.receive`) is refused, or None:
        its signature verifies and, after the check, the call still waits for it."""
        shown = shorten(response.call_id, bounds.ECHO_CHARS)
        call = self._conversation.pending_call(response.call_id)
        if call is None:
            return f"call '{shown}' is not waiting for an answer"
        request = verify_request(response, call, workflow_id=self._workflow_id, run_id=self._run_id)
        problem = await signature_refusal(request, f"the answer for call '{shown}'")
        if problem is not None:
            return problem
        return self._approvals.receive(response, finished=finished()).problem

    def signed_reopen(self, request: ReopenRequest) -> bool:
        """Whether a `reopen_approval` must be verified before it is taken."""
        return request.signature is not None

    async def reopen_problem(self, request: ReopenRequest) -> str | None:
        """Why a signed `reopen_approval` is refused (its signature does not verify for this
        call of this run, decision `reopen`), or None."""
        shown = shorten(request.call_id, bounds.ECHO_CHARS)
        call = self._conversation.pending_call(request.call_id)
        if call is None:
            return f"call '{shown}' is not waiting for an answer"
        check = VerifyRequest(
            approver=request.approver or "",
            groups=list(request.groups or []),
            workflow_id=self._workflow_id,
            run_id=self._run_id,
            call_id=call.id,
            arguments_sha256=arguments_digest(call.arguments),
            decision=REOPEN,
            signed_at=request.signed_at or "",
            signature=request.signature or "",
        )
        return await signature_refusal(check, f"asking again for call '{shown}'")
