"""An answer as the web app and `starter approve|reject` send it: signed when this program holds a
signing key (`runtime.signing_key`), bound to the run and the call's arguments that were shown
(read from the run when the answer does not say).

A person's own key signs as that person, whoever runs the program (`approver` plays no part);
a signing service's key (the web app's) signs as `approver` only when the approvers file lets
`approver` sign through it. Anything else goes unsigned, and is taken only where no approver rule
applies. Groups are never sent: they are the worker's approvers file's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from runtime.setting_error import SettingError
from runtime.settings import Settings
from runtime.signing_key import SigningKey, find_signing_key, signed_answer, signed_reopen
from starter.handle import AgentHandle
from workflows.contract.arguments import arguments_digest
from workflows.model import ReopenRequest, ToolApprovalResponse


def signer_name(key: SigningKey, approver: str) -> str | None:
    """As whom `key` signs a decision `approver` sends: its person, or `approver` through a
    service that may sign for them; None: it may not sign it."""
    if key.person is not None:
        return key.person
    return approver if key.signs_for(approver) else None


async def as_sent(
    handle: AgentHandle,
    response: ToolApprovalResponse,
    *,
    key: SigningKey | None,
    approver: str,
    groups: Sequence[str] = (),
) -> ToolApprovalResponse:
    """`response` as `approver` sends it: signed with `key` when there is one that may sign for
    them (a person's own key signs as its person). An answer for a call that is not waiting
    goes unsigned (the run refuses it, saying why). `groups` are not sent: the worker's
    approvers file has them."""
    response = response.model_copy(update={"approver": approver, "groups": None})
    signer = None if key is None else signer_name(key, approver)
    if key is None or signer is None:
        return response
    response = response.model_copy(update={"approver": signer})
    run_id, digest = response.run_id, response.arguments_sha256
    if run_id is None or digest is None:
        status = await handle.status()
        call = next((c for c in status.pending_approvals if c.id == response.call_id), None)
        if call is None:
            return response
        run_id = run_id or await handle.first_run_id(status)
        digest = digest or arguments_digest(call.arguments)
    if run_id is None:
        return response
    return signed_answer(
        key,
        response,
        approver=signer,
        workflow_id=handle.id,
        run_id=run_id,
        arguments_sha256=digest,
    )


async def reopen_as_sent(
    handle: AgentHandle,
    call_id: str,
    *,
    key: SigningKey | None,
    approver: str,
) -> ReopenRequest:
    """`reopen_approval` for `call_id` as `approver` sends it: signed with `key` when there is
    one that may sign for them, bound to the run and the call's arguments as the run shows them
    now (a question's: its `arguments_sha256`). A call that is not waiting goes unsigned (the
    run refuses it, saying why)."""
    signer = None if key is None else signer_name(key, approver)
    request = ReopenRequest(call_id=call_id, approver=signer or approver)
    if key is None or signer is None:
        return request
    status = await handle.status()
    digests = {c.id: arguments_digest(c.arguments) for c in status.pending_approvals}
    digests.update({q.call_id: q.arguments_sha256 for q in status.pending_questions})
    run_id = await handle.first_run_id(status)
    if call_id not in digests or run_id is None:
        return request
    return signed_reopen(
        key,
        request,
        approver=signer,
        workflow_id=handle.id,
        run_id=run_id,
        arguments_sha256=digests[call_id],
    )


UNSIGNED = "taken only where no approver rule applies"


class PromptKey:
    """The key `starter run`'s prompt signs its answers with."""

    @staticmethod
    def from_env() -> SigningKey | None:
        """The terminal's key (AGENT_SIGNING_KEY, else `~/.ssh/id_ed25519` when the approvers
        file lists it), or None, saying on stderr in one line that answers go unsigned."""
        try:
            found = find_signing_key(None, Settings.read())
        except SettingError as err:
            print(f"answers go unsigned ({UNSIGNED}): {err}", file=sys.stderr, flush=True)
            return None
        if found.key is None:
            why = found.unsigned or "no key"
            print(f"answers go unsigned ({UNSIGNED}): {why}", file=sys.stderr, flush=True)
        return found.key


def groups_in_users_file(user: str) -> tuple[str, ...]:
    """No groups: a person's groups are the worker's approvers file's, never sent (kept for the
    prompt's callers, which pass them on to `as_sent`)."""
    return ()
