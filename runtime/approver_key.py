"""`AGENT_APPROVER_KEY`: signing a person's answer, and checking one (`verify_answer`).

The one place that holds the key. The web app and `starter approve|reject` sign the answers they
send (`sign_answer`); a worker checks the signature of each signed answer a run takes, through
the `verify_answer` local activity, so the key never enters a workflow or its history: only the
verdict is recorded, and replaying a run (or rotating the key) never changes a decision.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from temporalio import activity

from runtime.settings import Settings
from workflows import names
from workflows.model import ReopenRequest, ToolApprovalResponse
from workflows.people.signatures import (
    REOPEN,
    SignedFields,
    VerifyRequest,
    VerifyVerdict,
    canonical_bytes,
    canonical_groups,
    decision_of,
    signed_at_text,
)

NO_KEY = "this worker holds no AGENT_APPROVER_KEY, so it cannot check a signed answer"
DOES_NOT_VERIFY = (
    "its signature does not verify (forged, changed, or signed for another call, run or arguments)"
)


class ApproverKey:
    """The shared key: signs and checks the canonical bytes of `workflows.people.signatures`."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ApproverKey | None:
        """The key of the environment, or None when `AGENT_APPROVER_KEY` is unset (a bad value
        raises BadSetting, as every setting does)."""
        key = Settings.read(environ).approver_key
        return None if key is None else cls(key)

    def sign(self, fields: SignedFields) -> str:
        digest = hmac.new(self._key, canonical_bytes(fields), hashlib.sha256).digest()
        return base64.b64encode(digest).decode()

    def signed_now(
        self,
        *,
        approver: str,
        groups: Sequence[str],
        workflow_id: str,
        run_id: str,
        call_id: str,
        arguments_sha256: str,
        decision: str,
        now: datetime | None = None,
    ) -> tuple[str, str]:
        """`signed_at` and the signature of one person's decision, signed now: what every
        signer (an answer, a question's answer, a reopen, a grant) adds to what it sends."""
        signed_at = signed_at_text(now or datetime.now(UTC))
        fields = SignedFields(
            approver=approver,
            groups=canonical_groups(groups),
            workflow_id=workflow_id,
            run_id=run_id,
            call_id=call_id,
            arguments_sha256=arguments_sha256,
            decision=decision,
            signed_at=signed_at,
        )
        return signed_at, self.sign(fields)

    def verifies(self, fields: SignedFields, signature: str) -> bool:
        return hmac.compare_digest(self.sign(fields).encode(), signature.encode())


def sign_answer(
    key: ApproverKey,
    response: ToolApprovalResponse,
    *,
    workflow_id: str,
    run_id: str,
    arguments_sha256: str,
    approver: str,
    groups: Sequence[str],
    now: datetime | None = None,
) -> ToolApprovalResponse:
    """`response` as `approver` (of `groups`) signs it, bound to this call of this run."""
    signed_at, signature = key.signed_now(
        approver=approver, groups=groups, workflow_id=workflow_id, run_id=run_id,
        call_id=response.call_id, arguments_sha256=arguments_sha256,
        decision=decision_of(response.approved), now=now,
    )  # fmt: skip
    return response.model_copy(
        update={
            "approver": approver,
            "groups": list(canonical_groups(groups)),
            "run_id": run_id,
            "arguments_sha256": arguments_sha256,
            "signed_at": signed_at,
            "signature": signature,
        }
    )


def sign_reopen(
    key: ApproverKey,
    request: ReopenRequest,
    *,
    workflow_id: str,
    run_id: str,
    arguments_sha256: str,
    approver: str,
    groups: Sequence[str],
    now: datetime | None = None,
) -> ReopenRequest:
    """`reopen_approval` as `approver` (of `groups`) signs it (decision `reopen`), bound to this
    call of this run."""
    signed_at, signature = key.signed_now(
        approver=approver, groups=groups, workflow_id=workflow_id, run_id=run_id,
        call_id=request.call_id, arguments_sha256=arguments_sha256, decision=REOPEN, now=now,
    )  # fmt: skip
    return request.model_copy(
        update={
            "approver": approver,
            "groups": list(canonical_groups(groups)),
            "signed_at": signed_at,
            "signature": signature,
        }
    )


class AnswerVerifier:
    """The `verify_answer` local activity, over the worker's key (None: it has none)."""

    def __init__(self, key: ApproverKey | None) -> None:
        self._key = key

    @activity.defn(name=names.ACTIVITY_VERIFY_ANSWER)
    async def verify_answer(self, request: VerifyRequest) -> VerifyVerdict:
        if self._key is None:
            return VerifyVerdict(valid=False, problem=NO_KEY)
        if not self._key.verifies(request.fields(), request.signature):
            return VerifyVerdict(valid=False, problem=DOES_NOT_VERIFY)
        return VerifyVerdict(valid=True)
