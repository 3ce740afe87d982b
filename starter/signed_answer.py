"""An answer as the web app and `starter approve|reject` send it: with the approver's groups, and
signed when this program holds `AGENT_APPROVER_KEY` (`runtime.approver_key`), bound to the
run and the call's arguments that were shown (read from the run when the answer does not say)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from runtime.approver_key import ApproverKey, sign_answer, sign_reopen
from runtime.settings import Settings
from starter.handle import AgentHandle
from starter.web.auth import UsersFile
from workflows.contract.arguments import arguments_digest
from workflows.model import ReopenRequest, ToolApprovalResponse


async def as_sent(
    handle: AgentHandle,
    response: ToolApprovalResponse,
    *,
    key: ApproverKey | None,
    approver: str,
    groups: Sequence[str],
) -> ToolApprovalResponse:
    """`response` as `approver` of `groups` sends it: signed with `key` when there is one. An
    answer for a call that is not waiting goes unsigned (the run refuses it, saying why)."""
    response = response.model_copy(update={"approver": approver, "groups": list(groups) or None})
    if key is None:
        return response
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
    return sign_answer(
        key,
        response,
        workflow_id=handle.id,
        run_id=run_id,
        arguments_sha256=digest,
        approver=approver,
        groups=groups,
    )


async def reopen_as_sent(
    handle: AgentHandle,
    call_id: str,
    *,
    key: ApproverKey | None,
    approver: str,
    groups: Sequence[str],
) -> ReopenRequest:
    """`reopen_approval` for `call_id` as `approver` of `groups` sends it: signed with `key`
    when there is one, bound to the run and the call's arguments as the run shows them now (a
    question's: its `arguments_sha256`). A call that is not waiting goes unsigned (the run
    refuses it, saying why)."""
    request = ReopenRequest(call_id=call_id, approver=approver, groups=list(groups) or None)
    if key is None:
        return request
    status = await handle.status()
    digests = {c.id: arguments_digest(c.arguments) for c in status.pending_approvals}
    digests.update({q.call_id: q.arguments_sha256 for q in status.pending_questions})
    run_id = await handle.first_run_id(status)
    if call_id not in digests or run_id is None:
        return request
    return sign_reopen(
        key,
        request,
        workflow_id=handle.id,
        run_id=run_id,
        arguments_sha256=digests[call_id],
        approver=approver,
        groups=groups,
    )


def groups_in_users_file(user: str) -> tuple[str, ...]:
    """The user's groups in AGENT_WEB_USERS_FILE (none without the file, or not in it); a file
    that cannot be read raises UsersFileError."""
    path = Settings.read().web_users_file
    return UsersFile(Path(path)).groups_of(user) if path else ()
