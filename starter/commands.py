"""The starter's commands, one coroutine each. They return an exit code or raise CliError."""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from runtime.connect import task_queue
from starter.audit_table import audit_lines
from starter.budget_text import used_line
from starter.errors import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_RUN_NOT_OK,
    EXIT_USAGE,
    CliError,
    no_worker,
    not_found,
    refusal,
)
from starter.follow import (
    Followed,
    cli_name,
    default_approver,
    follow,
    interactive_approvals,
    interactive_session,
)
from starter.handle import AgentHandle, AnswerNotDelivered, start_run
from starter.inbox import waiting_runs
from starter.output import Output
from starter.policy_args import load_policy, run_policy
from starter.render import (
    age,
    answer_text,
    arguments_display,
    call_text,
    event_line,
    message_lines,
    moment,
    parent_text,
    pin_hint,
    question_text,
    quorum_text,
    rule_line,
    visible,
)
from starter.signed_answer import as_sent, reopen_as_sent
from starter.signed_question import question_as_sent
from starter.signer import terminal_signer
from starter.tree import read_tree
from workflows import names
from workflows.contract.arguments import arguments_digest
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    CancelRequest,
    ChatMessage,
    QuestionAnswer,
    ToolApprovalResponse,
    ToolCall,
)


@dataclass
class Ctx:
    client: Client
    out: Output
    address: str
    namespace: str

    def handle(self, workflow_id: str) -> AgentHandle:
        return AgentHandle(self.client, workflow_id)


def not_delivered(workflow_id: str, err: AnswerNotDelivered) -> CliError:
    if err.busy:
        return CliError(
            f"run '{workflow_id}' kept refusing the answer for {err.seconds:.0f}s: too many"
            " requests in flight (Temporal admits only a few per run); try again"
        )
    return no_worker(err.seconds)


async def describe_status(ctx: Ctx, workflow_id: str) -> WorkflowExecutionStatus | None:
    try:
        description = await ctx.handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise not_found(workflow_id, ctx.namespace) from None
        raise
    return description.status


async def known_handle(ctx: Ctx, workflow_id: str) -> AgentHandle:
    """The handle of a run that exists (a clear error for an unknown id)."""
    await describe_status(ctx, workflow_id)
    return ctx.handle(workflow_id)


async def running_handle(ctx: Ctx, workflow_id: str, action: str) -> AgentHandle:
    """The handle of a run that is still going; a clear error for unknown or finished runs,
    saying how a finished one ended."""
    status = await describe_status(ctx, workflow_id)
    handle = ctx.handle(workflow_id)
    if status != WorkflowExecutionStatus.RUNNING:
        how = await handle.finished_how(status)
        raise CliError(f"run '{workflow_id}' has already finished ({how}); cannot {action}")
    return handle


def split_names(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [n.strip() for n in value.split(",") if n.strip()]


MAX_SYSTEM_PROMPT_BYTES = 100_000
"""The longest system prompt `--system` takes (it goes to the model with every request)."""


def system_prompt(value: str | None) -> str | None:
    """`--system TEXT`, or with `@FILE` the text of FILE (UTF-8); None when not given or
    empty. A file that cannot be read is a usage error naming it."""
    if value is None or not value.startswith("@"):
        return value if value and value.strip() else None
    path = Path(value[1:]).expanduser()
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise CliError(
            f"--system {value}: cannot read {path}: {err.strerror or err}", EXIT_USAGE
        ) from None
    if len(raw) > MAX_SYSTEM_PROMPT_BYTES:
        raise CliError(
            f"--system {value}: {len(raw):,} bytes; at most {MAX_SYSTEM_PROMPT_BYTES:,}",
            EXIT_USAGE,
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CliError(f"--system {value}: not UTF-8 text ({err.reason})", EXIT_USAGE) from None
    return text.strip() or None


def exit_code_for(followed: Followed) -> int:
    if followed.finish_reason in {"error", "cancelled"}:
        return EXIT_RUN_NOT_OK
    if followed.finish_reason is None and followed.closed_status not in {None, "COMPLETED"}:
        return EXIT_RUN_NOT_OK
    return EXIT_OK


async def follow_run(ctx: Ctx, workflow_id: str, *, after: int = -1) -> int:
    interactive = sys.stdin.isatty() and not ctx.out.json_mode
    followed = await follow(
        ctx.client,
        workflow_id,
        ctx.out,
        after=after,
        on_awaiting=interactive_approvals(ctx.out, ctx.client) if interactive else None,
        on_waiting_for_message=(
            interactive_session(ctx.out, ctx.client, workflow_id) if interactive else None
        ),
    )
    return exit_code_for(followed)


# ---------------------------------------------------------------- commands


async def cmd_run(ctx: Ctx, args: argparse.Namespace) -> int:
    options: dict[str, Any] = {"keep_alive": args.keep_alive}
    if args.on_approval_timeout is not None:
        options["on_approval_timeout"] = args.on_approval_timeout
    if args.ask_user:
        options["ask_user"] = True
    if getattr(args, "sub_agents", False):
        options["sub_agents"] = True
    if args.max_rounds is not None:
        options["max_rounds"] = args.max_rounds
    if args.max_run_tokens is not None:
        options["max_run_tokens"] = args.max_run_tokens
    if args.approval_timeout is not None:
        options["approval_timeout_seconds"] = args.approval_timeout
    if args.tools is not None:
        options["tools"] = split_names(args.tools)
    if args.approval_required is not None:
        options["approval_required"] = split_names(args.approval_required)
    policy = run_policy(getattr(args, "rule_specs", None), args.policy)
    if policy is not None:
        options["approval_policy"] = policy
    system = system_prompt(args.system)
    first = [ChatMessage.system(system)] if system else []
    run_input = AgentRunInput(
        messages=[*first, ChatMessage.user(args.prompt)], options=AgentRunOptions(**options)
    )
    workflow_id = args.id or f"agent-{uuid.uuid4().hex[:12]}"
    queue = task_queue()
    handle = await start_run(ctx.client, run_input, workflow_id=workflow_id, task_queue=queue)
    ctx.out.data({"workflow_id": workflow_id, "run_id": handle.run_id, "task_queue": queue})
    ctx.out.line(f"started {workflow_id} on task queue {queue}")
    if args.no_follow:
        ctx.out.line(f"follow it: {cli_name()} watch {workflow_id}")
        return EXIT_OK
    return await follow_run(ctx, workflow_id)


PIN_FLAGS = "--run-id R --sha256 D"
"""The flags that pin an answer to the call shown."""


def unpinned_refusal(action: str) -> CliError:
    """An answer from no terminal with nothing pinning what was read: one line, exit 2."""
    return CliError(
        f"not at a terminal: {cli_name()} {action} needs {PIN_FLAGS} (printed by pending,"
        " watch, audit and notifications) to answer the call that was read, or --yes to answer"
        " it as it is now",
        code=EXIT_USAGE,
    )


async def confirm(question: str) -> bool:
    """Ask a yes/no question at the terminal (on stderr, so `--json` output stays clean);
    anything but `y`/`yes` is no."""
    print(question, end="", file=sys.stderr, flush=True)
    line = await asyncio.to_thread(sys.stdin.readline)
    return line.strip().lower() in {"y", "yes"}


def check_pins(args: argparse.Namespace, current_run: str | None, shown: ToolCall | None) -> None:
    """Refuse here, before sending, an answer whose run or arguments are not those pinned (the
    workflow refuses it too)."""
    if args.run_id is not None and current_run is not None and args.run_id != current_run:
        raise CliError(
            f"run '{visible(args.workflow_id)}' is not run {visible(args.run_id)} any more (now"
            f" {current_run}): the call read is not the call waiting; not answered"
        )
    if args.sha256 is not None and shown is not None:
        if arguments_digest(shown.arguments) != args.sha256:
            raise CliError(
                f"call '{visible(args.call_id)}' has other arguments than those read (sha256"
                f" {arguments_digest(shown.arguments)}, not {visible(args.sha256)}); not answered"
            )


async def _answer(ctx: Ctx, args: argparse.Namespace, approved: bool) -> int:
    """An answer pinned to the call that was read: by `--run-id` and `--sha256`, or by a
    person confirming the call shown at a terminal, or (`--yes`) to the call as it is now."""
    action = "approve" if approved else "reject"
    pinned = args.run_id is not None and args.sha256 is not None
    at_terminal = sys.stdin.isatty()
    if not pinned and not args.yes and not at_terminal:
        raise unpinned_refusal(action)
    handle = await running_handle(ctx, args.workflow_id, f"{action} {args.call_id}")
    arguments = getattr(args, "arguments", None)
    status = await handle.status()
    current_run = await handle.first_run_id(status)
    shown = next((c for c in status.pending_approvals if c.id == args.call_id), None)
    check_pins(args, current_run, shown)
    if not pinned and not args.yes:
        if shown is None:
            raise CliError(f"call '{visible(args.call_id)}' is not waiting for an answer")
        shown_digest = arguments_digest(shown.arguments)
        ctx.out.info(f"{call_text(shown)}\n  run {current_run}, sha256 {shown_digest}")
        if not await confirm(f"{action}? [y/N] "):
            ctx.out.info(f"{visible(args.call_id)} not answered")
            return EXIT_ERROR
    elif shown is not None:
        ctx.out.line(f"{action} {call_text(shown)}")
    # The answer names the run and the arguments that were read: if another run takes the id
    # or the call changes before it lands, Temporal or the workflow refuses it.
    run_id = args.run_id or (current_run if shown is not None else None)
    digest: str | None = args.sha256
    if digest is None and shown is not None:
        digest = arguments_digest(shown.arguments)
    if args.run_id is not None:  # Temporal itself refuses it for a run started since
        handle = AgentHandle(ctx.client, args.workflow_id, first_execution_run_id=args.run_id)
    signer = terminal_signer(args, ctx.out)
    try:
        response = ToolApprovalResponse(
            run_id=run_id,
            arguments_sha256=digest,
            call_id=args.call_id,
            approved=approved,
            reason=None if approved else args.reason,
            approver=signer.approver,
            remember=bool(args.remember),
            arguments=arguments,
        )
    except ValidationError as err:
        raise CliError(pin_error(err)) from None
    if signer.key is not None:  # signed as the key's person
        response = await as_sent(handle, response, key=signer.key, approver=signer.approver)
    try:
        remaining = await handle.answer(response)
    except AnswerNotDelivered as err:
        raise not_delivered(args.workflow_id, err) from None
    except WorkflowUpdateFailedError as err:
        raise CliError(
            f"the workflow rejected the answer: {signer.plainly(refusal(err))}"
        ) from None
    except RPCError as err:
        if args.run_id is None or err.status != RPCStatusCode.NOT_FOUND:
            raise
        raise CliError(  # replaced since the check above: Temporal refused it
            f"run '{visible(args.workflow_id)}' is not run {visible(args.run_id)} any more:"
            " the call read is not the call waiting; not answered"
        ) from None
    ctx.out.data(
        {
            "workflow_id": args.workflow_id,
            "call_id": args.call_id,
            "approved": approved,
            "approver": response.approver,
            "still_pending": [c.model_dump(mode="json") for c in remaining],
        }
    )
    verdict = "approved" if approved else f"rejected ({visible(args.reason)})"
    if response.arguments is not None:
        verdict += f" with arguments {arguments_display(response.arguments)}"
    if response.remember:
        verdict += f"; from now on {'allowed' if approved else 'denied'} in this run"
    left = ", ".join(c.id for c in remaining) or "none"
    ctx.out.line(f"{args.call_id} {verdict} by {response.approver}; still pending: {left}")
    return EXIT_OK


def pin_error(err: ValidationError) -> str:
    """A bad `--arguments`, `--run-id` or `--sha256`, in one line naming the flag."""
    first = err.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else "arguments"
    flag = {"run_id": "--run-id", "arguments_sha256": "--sha256"}.get(field, "--arguments")
    return f"{flag}: {first['msg']}"


async def cmd_approve(ctx: Ctx, args: argparse.Namespace) -> int:
    return await _answer(ctx, args, approved=True)


async def cmd_reject(ctx: Ctx, args: argparse.Namespace) -> int:
    return await _answer(ctx, args, approved=False)


async def cmd_answer(ctx: Ctx, args: argparse.Namespace) -> int:
    """Answer a question the model asked: one TEXT (the words joined), or for a question that
    takes several options, one option per TEXT."""
    handle = await running_handle(ctx, args.workflow_id, f"answer {args.call_id}")
    status = await handle.status()
    question = next((q for q in status.pending_questions if q.call_id == args.call_id), None)
    if question is None:
        waiting = ", ".join(q.call_id for q in status.pending_questions) or "none"
        raise CliError(
            f"call '{visible(args.call_id)}' is not a question waiting for an answer"
            f" (waiting: {visible(waiting)})"
        )
    given: str | list[str] = list(args.text) if question.multiple else " ".join(args.text)
    signer = terminal_signer(args, ctx.out)
    answer = QuestionAnswer(
        call_id=args.call_id,
        answer=given,
        approver=signer.approver,
        run_id=await handle.first_run_id(status),
    )
    if signer.key is not None:  # signed as the key's person
        answer = await question_as_sent(handle, answer, key=signer.key, approver=signer.approver)
    try:
        waiting_now = await handle.submit_answer(answer)
    except AnswerNotDelivered as err:
        raise not_delivered(args.workflow_id, err) from None
    except WorkflowUpdateFailedError as err:
        raise CliError(f"the answer was refused: {refusal(err)}") from None
    ctx.out.data(
        {
            "workflow_id": args.workflow_id,
            "call_id": args.call_id,
            "answer": given,
            "approver": answer.approver,
            "still_waiting": [q.model_dump(mode="json") for q in waiting_now],
        }
    )
    left = ", ".join(q.call_id for q in waiting_now) or "none"
    who = visible(answer.approver or "?")
    ctx.out.line(
        f"{visible(args.call_id)} answered {answer_text(given)} by {who};"
        f" questions still waiting: {visible(left)}"
    )
    return EXIT_OK


async def cmd_reask(ctx: Ctx, args: argparse.Namespace) -> int:
    """Ask again for an expired call (`reopen_approval`): it waits with a new deadline. A call
    that has not expired, or is unknown, is refused with the workflow's reason (exit 1)."""
    handle = await running_handle(ctx, args.workflow_id, f"ask again for {args.call_id}")
    signer = terminal_signer(args, ctx.out, "asking again")
    approver = signer.approver
    request = await reopen_as_sent(handle, args.call_id, key=signer.key, approver=approver)
    try:
        status = await handle.reopen(request)
    except WorkflowUpdateFailedError as err:
        raise CliError(f"{visible(args.call_id)} not asked again: {refusal(err)}") from None
    deadline = status.approval_deadline
    ctx.out.data(
        {
            "workflow_id": args.workflow_id,
            "call_id": args.call_id,
            "approver": approver,
            "deadline": deadline.isoformat() if deadline else None,
            "expired": status.expired,
        }
    )
    until = f" until {moment(deadline)}" if deadline else ""
    ctx.out.line(f"{visible(args.call_id)} asked again by {visible(approver)}: waiting{until}")
    return EXIT_OK


async def cmd_policy(ctx: Ctx, args: argparse.Namespace) -> int:
    """The run's effective approval rules; with `--set FILE`, replace the run's rules first."""
    if args.set is not None:
        rules = load_policy(args.set)
        handle = await running_handle(ctx, args.workflow_id, "change its rules")
        try:
            view = await handle.set_policy(rules)
        except WorkflowUpdateFailedError as err:
            raise CliError(f"the workflow refused the rules: {refusal(err)}") from None
    else:
        view = await (await known_handle(ctx, args.workflow_id)).policy()
    ctx.out.data({"workflow_id": args.workflow_id, **view.model_dump(mode="json")})
    if not view.rules:
        ctx.out.line("no rules: every tool decides by its own default")
    for index, rule in enumerate(view.rules):
        ctx.out.line(f"{index:>3} {rule_line(rule)}")
    return EXIT_OK


async def cmd_cancel(ctx: Ctx, args: argparse.Namespace) -> int:
    handle = await running_handle(ctx, args.workflow_id, "cancel it")
    request = CancelRequest(
        reason=args.reason, immediate=args.immediate, requested_by=default_approver()
    )
    await handle.cancel(request)
    ctx.out.data({"workflow_id": args.workflow_id, "cancel": request.model_dump()})
    how = "immediate " if args.immediate else ""
    ctx.out.line(f"{how}cancel requested for {args.workflow_id}")
    return EXIT_OK


async def cmd_say(ctx: Ctx, args: argparse.Namespace) -> int:
    handle = await running_handle(ctx, args.workflow_id, "send a message")
    await handle.say(args.text)
    ctx.out.data({"workflow_id": args.workflow_id, "sent": args.text})
    ctx.out.line(f"message sent to {args.workflow_id}")
    return EXIT_OK


async def cmd_watch(ctx: Ctx, args: argparse.Namespace) -> int:
    await describe_status(ctx, args.workflow_id)  # a clear error for an unknown id
    return await follow_run(ctx, args.workflow_id, after=args.after)


async def cmd_history(ctx: Ctx, args: argparse.Namespace) -> int:
    """The run's messages and events: a closed run's from its history (no worker needed), an
    open run's from its queries."""
    handle = await known_handle(ctx, args.workflow_id)
    if getattr(args, "tree", False):
        return await history_tree(ctx, args.workflow_id)
    record = await handle.record()
    if record is not None:
        status, messages, events = record.status, record.messages, record.events
    else:
        messages = await handle.messages()
        events = await handle.events(-1)
        status = await handle.status()
    closed = None if record is None else {"status": record.closed, "reason": record.failure}
    if ctx.out.json_mode:
        ctx.out.data(
            {
                "workflow_id": args.workflow_id,
                "status": status.model_dump(mode="json"),
                "messages": [m.model_dump(mode="json") for m in messages],
                "events": [e.model_dump(mode="json") for e in events],
                "closed": closed,
            }
        )
        return EXIT_OK
    ctx.out.line(f"run {args.workflow_id}: {status.phase}, round {status.round}")
    if status.finish_reason:
        ctx.out.line(f"finish reason: {status.finish_reason}")
    elif record is not None:
        why = f": {visible(record.failure)}" if record.failure else ""
        ctx.out.line(f"ended without finishing: {record.closed}{why}")
    ctx.out.line("")
    ctx.out.line(f"messages ({len(messages)}):")
    for message in messages:
        for line in message_lines(message):
            ctx.out.line(f"  {line}")
    ctx.out.line("")
    ctx.out.line(f"events ({len(events)}):")
    for event in events:
        ctx.out.line(f"  {event.seq:>4} {event_line(event)}")
    return EXIT_OK


async def history_tree(ctx: Ctx, workflow_id: str) -> int:
    """`history W --tree`: the run and its sub-agents, each under its parent (`--json`: one
    object per run, depth first)."""
    tree = await read_tree(ctx.client, workflow_id)
    for row in tree.as_json():
        ctx.out.data(row)
    for line in tree.lines():
        ctx.out.line(line)
    return EXIT_OK


async def cmd_audit(ctx: Ctx, args: argparse.Namespace) -> int:
    """Every decision of the run, in order; `--json`: the `audit` query's answer as it is."""
    handle = await known_handle(ctx, args.workflow_id)
    record = await handle.record()  # a closed run: from its history, no worker needed
    try:
        view = record.audit if record is not None else await handle.audit()
    except WorkflowQueryFailedError as err:  # e.g. a worker of a release without the audit
        raise CliError(f"run '{args.workflow_id}' cannot answer the audit query: {err}") from None
    ctx.out.data(view.model_dump(mode="json"))
    for line in audit_lines(args.workflow_id, view, await handle.first_run_id()):
        ctx.out.line(line)
    return EXIT_OK


async def cmd_pending(ctx: Ctx, args: argparse.Namespace) -> int:
    try:
        runs = await waiting_runs(ctx.client)
    except RPCError as err:
        if err.status == RPCStatusCode.INVALID_ARGUMENT:
            raise CliError(
                f"cannot list runs by {names.AGENT_STATUS.name}: {err.message}"
                " (start the worker once: it registers the search attributes)"
            ) from None
        raise
    for run in runs:
        ctx.out.data(run.as_json())
        status = run.status
        if status is None:
            calls = "1 call" if run.pending_count == 1 else f"{run.pending_count} calls"
            ctx.out.line(
                f"{visible(run.workflow_id)} ({calls} pending;"
                " details unavailable until a worker answers)"
            )
            continue
        if run.budget is not None:
            ctx.out.line(
                f"{visible(run.workflow_id)} (round {status.round}, {used_line(run.budget)})"
            )
            if status.parent is not None:
                ctx.out.line(f"  {parent_text(status.parent)}")
            ctx.out.line(f"    {cli_name()} grant {visible(run.workflow_id)} TOKENS | --stop")
            continue
        waited = age(status.awaiting_since)
        ctx.out.line(f"{visible(run.workflow_id)} (round {status.round}, waiting {waited}):")
        if status.parent is not None:  # a sub-agent: asked where its parent's people look
            ctx.out.line(f"  {parent_text(status.parent)}")
        quorums = {q.call_id: q for q in status.quorums}
        for call in status.pending_approvals:
            ctx.out.line(f"  {call_text(call)}")
            if call.id in quorums:
                ctx.out.line(f"    {quorum_text(quorums[call.id])}")
            pin = pin_hint(
                run.workflow_id, call.id, run.first_run_id, arguments_digest(call.arguments)
            )
            if call.id in status.expired:
                ctx.out.line(
                    f"    expired: {cli_name()} reask {visible(run.workflow_id)} {visible(call.id)}"
                    f" (or reject {pin})"
                )
            else:
                ctx.out.line(f"    {cli_name()} approve|reject {pin}")
        for question in status.pending_questions:
            ctx.out.line(f"  question {question_text(question)}")
            ids = f"{visible(run.workflow_id)} {visible(question.call_id)}"
            if question.call_id in status.expired:
                ctx.out.line(f"    expired: {cli_name()} reask {ids}")
            else:
                ctx.out.line(f"    {cli_name()} answer {ids} TEXT")
        for answer in status.decided:
            verdict = "allowed" if answer.approved else "denied"
            who = f"rule {answer.rule}" if answer.source == "policy" else answer.source
            if answer.source == "person" and answer.approver:
                who = f"person {visible(answer.approver)}"
            ctx.out.line(f"  {visible(answer.call_id)} already {verdict} by {who}")
    if not runs:
        ctx.out.line("no runs are waiting for approval or an answer")
    else:
        ctx.out.line(
            f"answer: {cli_name()} approve|reject WORKFLOW_ID CALL_ID {PIN_FLAGS}"
            " (the run and arguments read above; at a terminal, without them, it asks)"
        )
    return EXIT_OK
