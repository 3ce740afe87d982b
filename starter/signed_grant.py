"""A grant as the web app and `starter grant` send it: with the person's groups, and signed when
this program holds `AGENT_APPROVER_KEY`, over the run's budget as it stands (read from the run)."""

from __future__ import annotations

from collections.abc import Sequence

from runtime.approver_key import ApproverKey
from starter.handle import AgentHandle
from workflows.model import BudgetGrant
from workflows.people.signatures import budget_call, canonical_groups, grant_decision


async def grant_as_sent(
    handle: AgentHandle,
    grant: BudgetGrant,
    *,
    key: ApproverKey | None,
    approver: str,
    groups: Sequence[str],
) -> BudgetGrant:
    """`grant` as `approver` of `groups` sends it: signed with `key` when there is one. A run
    with no budget gets it unsigned (it refuses it, saying why)."""
    groups = list(canonical_groups(groups))
    grant = grant.model_copy(update={"approver": approver, "groups": groups})
    if key is None:
        return grant
    status = await handle.status()
    run_id = await handle.first_run_id(status)
    if status.budget is None or run_id is None:
        return grant
    signed_at, signature = key.signed_now(
        approver=approver, groups=groups, workflow_id=handle.id, run_id=run_id,
        call_id=budget_call(status.budget.limit), arguments_sha256="",
        decision=grant_decision(grant),
    )  # fmt: skip
    return grant.model_copy(update={"signed_at": signed_at, "signature": signature})
