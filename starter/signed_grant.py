"""A grant as the web app and `starter grant` send it: signed when this program holds a signing
key that may sign for the person, over the run's budget as it stands (read from the run)."""

from __future__ import annotations

from runtime.signing_key import SigningKey, signed_grant
from starter.handle import AgentHandle
from starter.signed_answer import signer_name
from workflows.model import BudgetGrant


async def grant_as_sent(
    handle: AgentHandle,
    grant: BudgetGrant,
    *,
    key: SigningKey | None,
    approver: str,
) -> BudgetGrant:
    """`grant` as `approver` sends it: signed with `key` when there is one that may sign for
    them (a person's own key signs as its person). A run with no budget gets it unsigned (it
    refuses it, saying why)."""
    signer = None if key is None else signer_name(key, approver)
    grant = grant.model_copy(update={"approver": signer or approver, "groups": []})
    if key is None or signer is None:
        return grant
    status = await handle.status()
    run_id = await handle.first_run_id(status)
    if status.budget is None or run_id is None:
        return grant
    return signed_grant(
        key,
        grant,
        approver=signer,
        workflow_id=handle.id,
        run_id=run_id,
        limit=status.budget.limit,
    )
