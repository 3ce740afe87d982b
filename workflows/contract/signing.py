"""What a signed answer signs: the canonical bytes of one person's decision about one call.

An answer is signed with HMAC-SHA256 under `AGENT_APPROVER_KEY` (the web app, `starter
approve|reject` and every worker share it; `activities.approver_key` holds it). The signature
covers who answered (`approver`, `groups`), which call (`workflow_id`, `run_id` — the first run
id of the run's chain, as `ToolApprovalResponse.run_id` — `call_id` and `arguments_sha256`, the
digest of the arguments shown), what was decided and when (`signed_at`, ISO-8601 UTC). So a
signed answer copied to another call, run or set of arguments does not verify.

`decision` is a string so that every kind of answer a person gives signs the same way:

- `"approve"` / `"reject"`: an approval (`decision_of`);
- `"answer:<sha256 hex of the answer text>"`: an answer to a question the model asked;
- `"grant:<N>"` / `"stop"`: more tokens for a run whose budget ran out, or stop it;
- `"reopen"`: asking again for a call whose approval timeout passed (`REOPEN`).

Pure: no key, no clock. The workflow builds a `VerifyRequest` from the call it holds (never from
what the answer claims about the call) and the worker checks it (`verify_answer`, a local
activity): the key never enters the workflow or its history, only the verdict does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel

SIGNING_VERSION = "agent-answer-1"
"""The first element of the signed bytes: a signature for another kind of message never
verifies as an answer."""
SIGNED_AT_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$"
"""`signed_at` as signers write it (`signed_at_text`): ISO-8601, UTC, with `Z`."""


@dataclass(frozen=True)
class SignedFields:
    """Everything an answer's signature covers."""

    approver: str
    groups: tuple[str, ...]
    workflow_id: str
    run_id: str
    call_id: str
    arguments_sha256: str
    decision: str
    signed_at: str


def canonical_groups(groups: Iterable[str]) -> tuple[str, ...]:
    """Groups in one order, each once: the same set signs the same whatever order it came in."""
    return tuple(sorted(set(groups)))


def canonical_bytes(fields: SignedFields) -> bytes:
    """The bytes signed: one compact JSON array, in a fixed order (unambiguous whatever the
    values hold)."""
    values = [
        SIGNING_VERSION,
        fields.approver,
        list(canonical_groups(fields.groups)),
        fields.workflow_id,
        fields.run_id,
        fields.call_id,
        fields.arguments_sha256,
        fields.decision,
        fields.signed_at,
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
    signature the answer carried (base64)."""

    approver: str
    groups: list[str]
    workflow_id: str
    run_id: str
    call_id: str
    arguments_sha256: str
    decision: str
    signed_at: str
    signature: str

    def fields(self) -> SignedFields:
        return SignedFields(
            approver=self.approver,
            groups=tuple(self.groups),
            workflow_id=self.workflow_id,
            run_id=self.run_id,
            call_id=self.call_id,
            arguments_sha256=self.arguments_sha256,
            decision=self.decision,
            signed_at=self.signed_at,
        )


class VerifyVerdict(BaseModel):
    """Output of `verify_answer`: whether the signature verifies, else why not."""

    valid: bool
    problem: str | None = None
