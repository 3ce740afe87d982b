"""`starter fork W [--round N] [--id NEW] [--say TEXT]`: start a new run from W's record up to the
end of its round N (`starter.fork`), and say where it comes from. W is only read."""

from __future__ import annotations

import argparse

from temporalio.service import RPCError, RPCStatusCode

from runtime.connect import task_queue
from starter.commands import Ctx
from starter.errors import EXIT_OK, EXIT_USAGE, CliError, not_found
from starter.follow import cli_name
from starter.fork import ForkRefused, fork_run
from starter.render import forked_text
from starter.run_state import NotReadable
from workflows.shown import visible


async def cmd_fork(ctx: Ctx, args: argparse.Namespace) -> int:
    queue = task_queue()
    try:
        forked = await fork_run(
            ctx.client,
            args.workflow_id,
            task_queue=queue,
            round=args.round,
            say=args.say,
            new_id=args.id,
        )
    except ForkRefused as err:
        raise CliError(str(err), EXIT_USAGE) from None
    except NotReadable as err:
        raise CliError(f"cannot read run '{visible(args.workflow_id)}': {err}") from None
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise not_found(args.workflow_id, ctx.namespace) from None
        raise
    ctx.out.data(
        {
            "workflow_id": forked.workflow_id,
            "run_id": forked.run_id,
            "task_queue": queue,
            "forked_from": forked.forked_from.model_dump(mode="json"),
            "messages": forked.messages,
            "waiting": forked.waiting,
        }
    )
    ctx.out.line(
        f"started {visible(forked.workflow_id)} on task queue {queue}, forked"
        f" {forked_text(forked.forked_from)} ({forked.messages} messages)"
    )
    if forked.waiting:
        ids = ", ".join(visible(call) for call in forked.waiting)
        ctx.out.line(f"its calls without a result go through the rules again: {ids}")
    ctx.out.line(f"follow it: {cli_name()} watch {visible(forked.workflow_id)}")
    return EXIT_OK
