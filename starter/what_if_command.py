"""`starter what-if --policy FILE [--since DURATION] [W …] [--json]`: every recorded tool call of
the runs named (default: every run active in the last 7 days) decided again under a proposed
policy, beside what was decided then (`starter.what_if`). Nothing is run or changed."""

from __future__ import annotations

import argparse
from pathlib import Path

from temporalio.service import RPCError, RPCStatusCode

from starter.commands import Ctx
from starter.errors import EXIT_OK, EXIT_USAGE, CliError, not_found
from starter.run_state import NotReadable
from starter.what_if import CallDecision, PolicyFileError, ProposedPolicy, parse_policy
from starter.what_if_runs import (
    DEFAULT_SINCE,
    RunDecisions,
    call_json,
    parse_duration,
    summary_json,
    what_if,
)
from workflows.shown import arguments_display, visible

MAX_POLICY_FILE_BYTES = 2_000_000


def read_policy(path: str) -> ProposedPolicy:
    """The policy file at `path`; CliError (exit 2) naming the file, and the line when it does
    not parse."""
    try:
        raw = Path(path).expanduser().read_bytes()
    except OSError as err:
        raise CliError(
            f"--policy {path}: cannot read it: {err.strerror or err}", EXIT_USAGE
        ) from None
    if len(raw) > MAX_POLICY_FILE_BYTES:
        raise CliError(f"--policy {path}: more than {MAX_POLICY_FILE_BYTES:,} bytes", EXIT_USAGE)
    try:
        return parse_policy(raw.decode("utf-8"), path)
    except UnicodeDecodeError as err:
        raise CliError(f"--policy {path}: not UTF-8 text ({err.reason})", EXIT_USAGE) from None
    except PolicyFileError as err:
        raise CliError(str(err), EXIT_USAGE) from None


def call_line(run: RunDecisions, decision: CallDecision) -> str:
    """One call for people: run, call id, tool, the arguments as shown, then, now, changed."""
    call = decision.call
    verdict = "changed" if decision.changed else "unchanged"
    if not decision.compared:
        verdict = "not compared"
    return (
        f"{visible(run.workflow_id)} {visible(call.id)} {visible(call.name)}"
        f" {arguments_display(call.arguments)}\n"
        f"    then: {decision.then.text}; now: {decision.now.text}; {verdict}"
    )


async def cmd_what_if(ctx: Ctx, args: argparse.Namespace) -> int:
    proposed = read_policy(args.policy)
    try:
        since = parse_duration(args.since) if args.since is not None else DEFAULT_SINCE
    except ValueError as err:
        raise CliError(f"--since: {err}", EXIT_USAGE) from None
    named = list(args.workflow_ids) or None
    try:
        report = await what_if(ctx.client, proposed, named, since=since)
    except NotReadable as err:
        raise CliError(f"cannot read a run: {err}") from None
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND and named is not None:
            missing = next(iter(named)) if len(named) == 1 else "one of the runs named"
            raise not_found(missing, ctx.namespace) from None
        raise
    for run in report.runs:
        for decision in run.calls:
            ctx.out.data(call_json(run, decision))
            ctx.out.line(call_line(run, decision))
    for workflow_id, why in report.unreadable:
        ctx.out.info(f"{visible(workflow_id)}: not read ({visible(why)})")
    ctx.out.data(summary_json(report))
    ctx.out.line(report.summary())
    return EXIT_OK
