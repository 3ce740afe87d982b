"""`starter grant W TOKENS` and `starter grant W --stop`: a person's answer to a run that waits
at its token budget (the `grant_budget` update), signed with the person's own key
(`starter.signer`)."""

from __future__ import annotations

import argparse

from temporalio.client import WorkflowUpdateFailedError

from starter.budget_text import used_line
from starter.commands import Ctx, running_handle
from starter.errors import EXIT_OK, EXIT_USAGE, CliError, refusal
from starter.signed_grant import grant_as_sent
from starter.signer import terminal_signer
from workflows.model import BudgetGrant


def grant_of(args: argparse.Namespace) -> BudgetGrant:
    """The grant the command line asks for: TOKENS or --stop, exactly one."""
    if args.stop == (args.tokens is not None):
        raise CliError("give either TOKENS (a whole number from 1) or --stop", EXIT_USAGE)
    if args.stop:
        return BudgetGrant(stop=True)
    return BudgetGrant(tokens=args.tokens)


async def cmd_grant(ctx: Ctx, args: argparse.Namespace) -> int:
    grant = grant_of(args)
    action = "stop it" if grant.stop else "grant it tokens"
    handle = await running_handle(ctx, args.workflow_id, action)
    signer = terminal_signer(args, ctx.out, "the grant")
    grant = await grant_as_sent(handle, grant, key=signer.key, approver=signer.approver)
    try:
        budget = await handle.grant(grant)
    except WorkflowUpdateFailedError as err:
        raise CliError(f"the workflow refused the grant: {signer.plainly(refusal(err))}") from None
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
