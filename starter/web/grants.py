"""A grant from the web (`POST /api/runs/{id}/budget`): more tokens for a run at its token
budget, or stop it, as the signed-in user (the `grant_budget` update, so a refusal comes back
with the workflow's reason)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from temporalio.client import Client

from runtime.signing_key import SigningKey
from starter.handle import AgentHandle
from starter.signed_grant import grant_as_sent
from starter.web import actions
from workflows.contract.inputs import tokens_problem
from workflows.model import BudgetGrant, describe_validation

GRANT_SHAPE = '{"tokens": N} or {"stop": true}'


async def grant(
    client: Client,
    workflow_id: str,
    body: Any,
    approver: str,
    *,
    key: SigningKey | None = None,
) -> actions.Answer:
    """Grant as `approver` (the signed-in user), signed with `key` when the server holds one
    that may sign for them; the body names none of them."""
    if not isinstance(body, dict):
        return 400, {"error": f"the body must be a JSON object: {GRANT_SHAPE}"}
    if (named := actions.names_the_server(body)) is not None:
        return named
    if body.get("tokens") is not None and (problem := tokens_problem(body["tokens"])):
        return 400, {"error": problem}
    try:
        request = BudgetGrant.model_validate(body)
    except ValidationError as err:
        return 400, {"error": f"invalid grant: {describe_validation(err)}"}
    handle = AgentHandle(client, workflow_id, worker_wait=actions.WORKER_WAIT_SECONDS)
    try:
        request = await grant_as_sent(handle, request, key=key, approver=approver)
        budget = await handle.grant(request)
    except Exception as err:
        return actions._failure(err, workflow_id)
    return 200, {"workflow_id": workflow_id, "budget": budget.model_dump()}
