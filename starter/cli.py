"""The command line: `python -m starter COMMAND …` (see `--help`, and the README)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import NoReturn

from runtime.connect import connect, connect_config, data_converter
from runtime.process import exit_now
from runtime.setting_error import SettingError
from runtime.settings import Settings, warn_unknown_settings
from runtime.shown_commands import starter_command
from runtime.telemetry import install_quiet_runtime
from starter import commands
from starter.errors import EXIT_ERROR, EXIT_OK, EXIT_USAGE, CliError, cannot_reach, translate
from starter.fork_command import cmd_fork
from starter.grant import cmd_grant
from starter.output import Output
from starter.what_if_command import cmd_what_if
from workflows.contract.inputs import tokens_problem

Command = Callable[[commands.Ctx, argparse.Namespace], Awaitable[int]]


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a whole number above 0, got {text}")
    return value


def _tokens(text: str) -> int:
    """A grant's TOKENS, refused in the sentence every door says (`tokens_problem`)."""
    try:
        value: object = int(text.strip())
    except ValueError:
        value = text
    problem = tokens_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{problem}, got {text}")
    assert isinstance(value, int)
    return value


KEY_HELP = (
    "sign with this OpenSSH Ed25519 private key, a person's own in AGENT_APPROVERS_FILE (default:"
    " AGENT_SIGNING_KEY, else ~/.ssh/id_ed25519 when the file lists it; none: sent unsigned)"
)


def _signing(parser: argparse.ArgumentParser, who: str) -> None:
    """`--key` and `--approver`: who signs, and who an unsigned answer names."""
    parser.add_argument("--key", metavar="FILE", type=Path, help=KEY_HELP)
    parser.add_argument(
        "--approver",
        help=f"who {who} when nothing is signed (default: your OS user); a signed one is the"
        " key's person's, whatever this says",
    )


def _port(text: str) -> int:
    """A TCP port to listen on: 0 (any free one) to 65535."""
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, got {text}")
    return value


class _RuleSpec(argparse.Action):
    """`--allow SPEC` / `--deny SPEC`, kept in the order given (one list for both)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        specs = list(getattr(namespace, "rule_specs", None) or [])
        specs.append(("allow" if option_string == "--allow" else "deny", str(values)))
        namespace.rule_specs = specs


def _pin_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that pin an answer to the call a person was shown (`pending`, `watch`,
    `audit` and notifications print them)."""
    parser.add_argument(
        "--run-id",
        metavar="R",
        help="answer only if the run is still run R (the first run id of its chain, as shown)",
    )
    parser.add_argument(
        "--sha256",
        metavar="D",
        help="answer only if the call's arguments still have this SHA-256 (as shown)",
    )
    parser.add_argument(
        "--yes",
        action="store_true",
        help="answer the call as it is now, without --run-id/--sha256 and without asking",
    )


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json",
        dest="json_here",
        action="store_true",
        help="machine-readable output: one JSON object per line",
    )
    parser = argparse.ArgumentParser(
        prog=starter_command(),
        description="Start, follow, approve and cancel durable agent runs (AgentWorkflow). "
        "Connects through temporalio.envconfig: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, "
        "TEMPORAL_API_KEY, TEMPORAL_TLS*, TEMPORAL_PROFILE (default localhost:7233). "
        "Task queue: AGENT_TASK_QUEUE (default agent).",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", parents=[common], help="start a run and follow its events")
    run.add_argument("prompt", help="the user's request")
    run.add_argument(
        "--system",
        metavar="TEXT|@FILE",
        help="a system message, first in the run's messages (@FILE: the text of FILE)",
    )
    run.add_argument("--id", help="workflow id (default: agent-<random>)")
    run.add_argument("--max-rounds", type=_non_negative_int, help="round limit (default 10)")
    run.add_argument(
        "--approval-timeout",
        type=_positive_float,
        metavar="SECONDS",
        help="how long to wait for an approval (default: forever)",
    )
    run.add_argument(
        "--on-approval-timeout",
        choices=["expire", "cancel", "reject"],
        help="what a timed-out approval does: expire the calls (they wait until someone asks"
        " again or rejects; the default), cancel the run, or reject the calls",
    )
    run.add_argument("--keep-alive", action="store_true", help="a session: wait for more messages")
    run.add_argument(
        "--ask-user",
        action="store_true",
        help="offer the model the ask_user tool: questions that wait for a person's answer",
    )
    run.add_argument(
        "--sub-agents",
        action="store_true",
        help="offer the model the delegate tool: tasks handed to sub-agents (child runs under"
        " the same people, rules and budget)",
    )
    run.add_argument(
        "--max-run-tokens",
        type=_positive_int,
        metavar="N",
        help="the run's token budget: at it, the run waits for a person to grant more",
    )
    run.add_argument("--tools", metavar="A,B", help="allow only these tools")
    run.add_argument(
        "--approval-required", metavar="A,B", help="also require approval for these tools"
    )
    run.add_argument("--no-follow", action="store_true", help="start and return")
    run.add_argument(
        "--policy", metavar="FILE", help='approval rules of this run: a JSON file {"rules": […]}'
    )
    for flag, what in (("--allow", "run without asking"), ("--deny", "refuse without asking")):
        run.add_argument(
            flag,
            metavar="TOOL[:ARG=GLOB]",
            action=_RuleSpec,
            dest="rule_specs",
            help=f"{what} the calls it matches (repeatable; in order, before --policy's rules)",
        )

    approve = sub.add_parser("approve", parents=[common], help="approve a pending tool call")
    approve.add_argument("workflow_id")
    approve.add_argument("call_id")
    _signing(approve, "approves")
    approve.add_argument(
        "--remember", action="store_true", help="and always allow this tool in this run"
    )
    approve.add_argument(
        "--arguments", metavar="JSON", help="run the call with these arguments (a JSON object)"
    )
    _pin_arguments(approve)

    reject = sub.add_parser("reject", parents=[common], help="reject a pending tool call")
    reject.add_argument("workflow_id")
    reject.add_argument("call_id")
    reject.add_argument("--reason", required=True, help="told to the model")
    _signing(reject, "rejects")
    reject.add_argument(
        "--remember", action="store_true", help="and always deny this tool in this run"
    )
    _pin_arguments(reject)

    answer = sub.add_parser(
        "answer", parents=[common], help="answer a question the model asked (ask_user)"
    )
    answer.add_argument("workflow_id")
    answer.add_argument("call_id")
    answer.add_argument(
        "text",
        nargs="+",
        help="the answer; for a question that takes several options, one option per TEXT"
        " (otherwise the TEXTs are joined with spaces)",
    )
    _signing(answer, "answers")
    reask = sub.add_parser(
        "reask",
        parents=[common],
        help="ask again for an expired call: it waits with a new deadline",
    )
    reask.add_argument("workflow_id")
    reask.add_argument("call_id")
    _signing(reask, "asks again")

    grant = sub.add_parser(
        "grant", parents=[common], help="more tokens for a run at its budget, or stop it"
    )
    grant.add_argument("workflow_id")
    grant.add_argument(
        "tokens", nargs="?", type=_tokens, help="how many tokens to add to its budget"
    )
    grant.add_argument("--key", metavar="FILE", type=Path, help=KEY_HELP)
    grant.add_argument(
        "--stop", action="store_true", help="stop the run at its budget (it finishes `budget`)"
    )

    policy = sub.add_parser("policy", parents=[common], help="a run's effective approval rules")
    policy.add_argument("workflow_id")
    policy.add_argument(
        "--set", metavar="FILE", help='replace the run\'s rules with a JSON file {"rules": […]}'
    )

    cancel = sub.add_parser("cancel", parents=[common], help="cancel a run")
    cancel.add_argument("workflow_id")
    cancel.add_argument("--reason", help="why: in the run's error event and its result")
    cancel.add_argument(
        "--immediate",
        action="store_true",
        help="also interrupt the in-flight LLM call or tools",
    )

    say = sub.add_parser("say", parents=[common], help="send a user message to a run")
    say.add_argument("workflow_id")
    say.add_argument("text")

    watch = sub.add_parser("watch", parents=[common], help="follow a run's events until it ends")
    watch.add_argument("workflow_id")
    watch.add_argument(
        "--after", type=int, default=-1, help="only events with a higher seq (default: all)"
    )

    history = sub.add_parser("history", parents=[common], help="a run's messages and events")
    history.add_argument("workflow_id")
    history.add_argument(
        "--tree", action="store_true", help="the run and its sub-agents, each under its parent"
    )

    sub.add_parser("pending", parents=[common], help="list the runs waiting for approval")

    audit = sub.add_parser(
        "audit",
        parents=[common],
        help="every decision of a run, in order: who or which rule, when, the arguments that ran",
    )
    audit.add_argument("workflow_id")

    sub.add_parser(
        "approvers",
        parents=[common],
        help="the people of AGENT_APPROVERS_FILE, their groups and how each signs; checks every"
        " key (exit 2 for a bad file)",
    )
    fork = sub.add_parser(
        "fork",
        parents=[common],
        help="start a new run from a run's record up to the end of one of its rounds",
    )
    fork.add_argument("workflow_id")
    fork.add_argument(
        "--round",
        type=_non_negative_int,
        metavar="N",
        help="the last round (model reply, from 0) the new run keeps (default: all of them)",
    )
    fork.add_argument("--id", help="the new run's workflow id (default: fork-<random>)")
    fork.add_argument("--say", metavar="TEXT", help="then this user message")

    what_if = sub.add_parser(
        "what-if",
        parents=[common],
        help="every recorded tool call decided again under a proposed policy (changes nothing)",
    )
    what_if.add_argument(
        "--policy",
        required=True,
        metavar="FILE",
        help='the proposed policy: JSON {"enforced"?: […], "rules"?: […], "defaults"?: […]}',
    )
    what_if.add_argument(
        "--since",
        metavar="DURATION",
        help="without W: the runs active within this long (30m, 24h, 7d, 2w; default 7d)",
    )
    what_if.add_argument(
        "workflow_ids", nargs="*", metavar="W", help="these runs (default: the recent ones)"
    )

    sub.add_parser("demo", parents=[common], help="the whole story offline, in one command")

    codec = sub.add_parser(
        "codec-server",
        help="serve the encryption keys' codec to the Temporal UI and CLI (--codec-endpoint)",
    )
    codec.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1")
    codec.add_argument("--port", type=_port, default=8081, help="default 8081")
    codec.add_argument(
        "--ui-origin",
        default="http://localhost:8233",
        metavar="URL",
        help="the Temporal UI's origin, allowed by CORS (default http://localhost:8233)",
    )
    web = sub.add_parser(
        "web",
        help="serve the approval inbox on the web (add-user: who may sign in)",
        description="Serve the approval inbox. With AGENT_WEB_USERS_FILE people sign in; without"
        " it, local mode: loopback only, no sign-in, your OS user as the approver.",
    )
    web.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1")
    web.add_argument("--port", type=_port, default=8080, help="default 8080")
    web_sub = web.add_subparsers(dest="web_command", metavar="add-user")
    add_user = web_sub.add_parser(
        "add-user", help="add or replace a user in AGENT_WEB_USERS_FILE (password from stdin)"
    )
    add_user.add_argument("name")
    add_user.add_argument(
        "--token", action="store_true", help="also make an API token; printed alone, last"
    )
    add_user.add_argument(
        "--group",
        action="append",
        metavar="G",
        help="a group the user is in (repeatable; sets them all: approver rules name groups);"
        " without it a replaced user keeps their groups",
    )
    return parser


COMMANDS: dict[str, Command] = {
    "run": commands.cmd_run,
    "approve": commands.cmd_approve,
    "reject": commands.cmd_reject,
    "answer": commands.cmd_answer,
    "reask": commands.cmd_reask,
    "cancel": commands.cmd_cancel,
    "say": commands.cmd_say,
    "watch": commands.cmd_watch,
    "history": commands.cmd_history,
    "pending": commands.cmd_pending,
    "policy": commands.cmd_policy,
    "audit": commands.cmd_audit,
    "grant": cmd_grant,
    "fork": cmd_fork,
    "what-if": cmd_what_if,
}


async def amain(argv: Sequence[str] | None = None) -> int:
    """Parse, run one command, return its exit code (errors are printed, not raised)."""
    args = build_parser().parse_args(argv)
    install_quiet_runtime()
    out = Output(json_mode=bool(args.json or getattr(args, "json_here", False)))
    warn_unknown_settings()  # a variable that is no setting (AGENT_POLCY_FILE): stderr, go on
    try:
        Settings.read()  # every setting, checked once: a typo stops every program alike
    except SettingError as err:
        out.error(str(err))
        return EXIT_USAGE
    if args.command == "codec-server":
        from starter.codec_server import serve

        return await serve(args.host, args.port, args.ui_origin)
    if args.command == "web" and args.web_command == "add-user":
        from starter.web.server import cmd_add_user

        return cmd_add_user(args.name, args.token, args.group)
    if args.command == "approvers":
        from starter.approvers_list import cmd_approvers

        return cmd_approvers(out)
    try:
        data_converter()
    except SettingError as err:  # a key or a payload store that cannot be used: say which variable
        out.error(str(err))
        return EXIT_USAGE
    if args.command == "demo":
        from starter.demo import run_demo

        try:
            return await run_demo(out)
        except Exception as err:  # one clear line, never a traceback
            out.error(f"demo failed: {type(err).__name__}: {err}")
            return EXIT_ERROR
    if args.command == "web":
        from starter.web.server import serve as serve_web

        return await serve_web(args.host, args.port)
    config = connect_config()
    address = str(config.get("target_host"))
    namespace = str(config.get("namespace"))
    try:
        client = await connect()
    except Exception as err:  # any failure to connect gets the same one-line explanation
        out.error(cannot_reach(address, namespace, err).message)
        return EXIT_ERROR
    ctx = commands.Ctx(client=client, out=out, address=address, namespace=namespace)
    try:
        return await COMMANDS[args.command](ctx, args)
    except BrokenPipeError:  # `… | head`: the reader has what it wanted
        return quiet_after_broken_pipe()
    except Exception as err:  # one clear line, never a traceback
        failure: CliError = translate(
            err, workflow_id=getattr(args, "workflow_id", None), namespace=namespace
        )
        out.error(failure.message)
        return failure.code


EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away."""


def quiet_after_broken_pipe() -> int:
    """Stop writing, as Unix tools do when the reader of their output has gone (`| head`): no
    message, and nothing left to flush at exit."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def main(argv: Sequence[str] | None = None) -> NoReturn:
    try:
        code = asyncio.run(amain(argv))
    except KeyboardInterrupt:
        print("\ninterrupted; the run goes on in Temporal", file=sys.stderr)
        code = 130
    except SystemExit as exit_:  # argparse: --help and usage errors
        code = exit_.code if isinstance(exit_.code, int) else EXIT_OK
    exit_now(code)
