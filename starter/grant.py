"""`starter grant W TOKENS` and `starter grant W --stop`: a person's answer to a run that waits
at its token budget (the `grant_budget` update), as the operating-system user."""

from __future__ import annotations

import argparse

from temporalio.client import WorkflowUpdateFailedError

from runtime.approver_key import ApproverKey
from starter.budget_text import used_line
from starter.commands import Ctx, running_handle
from starter.errors import EXIT_OK, EXIT_USAGE, CliError, refusal
from starter.follow import default_approver
from starter.signed_answer import groups_in_users_file
from starter.signed_grant import grant_as_sent
from starter.web.auth import UsersFileError
from workflows.model import BudgetGrant


def grant_of(args: argparse.Namespace) -> BudgetGrant:
    """The grant the command line asks for: TOKENS or --stop, exactly one."""
    if args.stop == (args.tokens is not None):
        raise CliError("give either TOKENS (more than 0) or --stop", EXIT_USAGE)
    if args.stop:
        return BudgetGrant(stop=True, approver=default_approver())
    return BudgetGrant(tokens=args.tokens, approver=default_approver())


async def cmd_grant(ctx: Ctx, args: argparse.Namespace) -> int:
    grant = grant_of(args)
    action = "stop it" if grant.stop else "grant it tokens"
    handle = await running_handle(ctx, args.workflow_id, action)
    key = ApproverKey.from_env()
    if key is not None:  # signed as the OS user, with their groups from the users file
        try:
            groups = groups_in_users_file(default_approver())
        except UsersFileError as err:
            raise CliError(f"AGENT_WEB_USERS_FILE: {err}", code=EXIT_USAGE) from None
        grant = await grant_as_sent(
            handle, grant, key=key, approver=default_approver(), groups=groups
        )
    try:
        budget = await handle.grant(grant)
    except WorkflowUpdateFailedError as err:
        raise CliError(f"the workflow refused the grant: {refusal(err)}", EXIT_USAGE) from None
    ctx.out.data(
        {
            "workflow_id": args.workflow_id,
            **grant.model_dump(exclude_defaults=True),
            "budget": budget.model_dump(),
        }
    )
    if grant.stop:
        ctx.out.line(f"{args.workflow_id} stops at its budget ({used_line(budget)})")
    else:
        ctx.out.line(f"granted {grant.tokens:,} tokens to {args.workflow_id}: {used_line(budget)}")
    return EXIT_OK
