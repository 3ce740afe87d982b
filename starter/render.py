"""How events, messages, pending calls and rules read as lines for people (the command line's
transcript, the web's event list), or one JSON object per line with `--json`. What is made
visible, and how, is `workflows.shown`'s: the terminal and the web show the same text."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

from starter.budget_text import budget_event_line
from workflows.contract.arguments import parse_arguments
from workflows.contract.rules import PolicyEntry
from workflows.model import (
    AgentEvent,
    AnswerEvent,
    AnswerValue,
    ApprovalEscalatedEvent,
    ApprovalEvent,
    ApprovalExpiredEvent,
    ApprovalReopenedEvent,
    ApprovalVoteEvent,
    AuditEntry,
    AwaitingApprovalEvent,
    ChatMessage,
    CompactionEvent,
    ErrorEvent,
    FinishedEvent,
    ForkedEvent,
    ForkedFrom,
    PendingQuestion,
    QuestionEvent,
    Quorum,
    SubAgentFinishedEvent,
    SubAgentOf,
    SubAgentStartedEvent,
    SubAgentWaitingEvent,
    TextDeltaEvent,
    ToolCall,
    ToolCallEvent,
    ToolResultEvent,
    WarningEvent,
)
from workflows.shown import MULTILINE, arguments_display, one_line, text_block, visible

TOOL_RESULT_PREVIEW = 300

__all__ = [
    "MULTILINE",
    "age",
    "arguments_display",
    "audit_arguments",
    "call_text",
    "decided_by",
    "event_json",
    "event_line",
    "message_lines",
    "moment",
    "one_line",
    "parent_text",
    "question_text",
    "rule_line",
    "sub_agent_line",
    "text_block",
    "visible",
]


def call_text(call: ToolCall) -> str:
    """A call as the terminal shows it; one the model wrote as text says so."""
    note = " (read from the model's text)" if call.from_text else ""
    return f"{visible(call.id)} {visible(call.name)} {arguments_display(call.arguments)}{note}"


def question_text(question: PendingQuestion | QuestionEvent) -> str:
    """A question as the terminal shows it: `call_1 "Which color?" (one of: red, blue)`."""
    asked = f'"{one_line(question.question, 400)}"'
    choice = ""
    if question.options:
        how = "any of" if question.multiple else "one of"
        choice = f" ({how}: {', '.join(visible(o) for o in question.options)})"
    return f"{visible(question.call_id)} {asked}{choice}"


def answer_text(answer: AnswerValue | None) -> str:
    """An answer as the terminal shows it (a list of options comma-separated)."""
    if answer is None:
        return "none"
    if isinstance(answer, list):
        return ", ".join(f'"{visible(a)}"' for a in answer)
    return f'"{one_line(answer, 400)}"'


def pin_hint(workflow_id: str, call_id: str, run_id: str | None, digest: str) -> str:
    """The arguments of an answer pinned to a call as shown (`W CALL --run-id R --sha256 D`):
    what `pending`, `watch` and the audit print for a person to copy."""
    run = f" --run-id {run_id}" if run_id else ""
    return f"{visible(workflow_id)} {visible(call_id)}{run} --sha256 {digest}"


def quorum_text(quorum: Quorum) -> str:
    """A call under an approver rule, as the card and the terminal say it: `1 of 2 approvals:
    alice; who may answer: ops`."""
    text = f"{len(quorum.approvers)} of {quorum.needed} approvals"
    if quorum.approvers:
        text += ": " + ", ".join(visible(name) for name in quorum.approvers)
    return f"{text}; who may answer: {' or '.join(visible(g) for g in quorum.groups)}"


def event_line(event: AgentEvent) -> str:
    """One event as a transcript line, e.g. `[r0] tool_call call_1 run_command {…} (needs
    approval)`, `assistant: …`, `finished: stop`."""
    r = f"[r{event.round}]"
    if isinstance(event, TextDeltaEvent):
        return f"assistant: {text_block(event.delta)}"
    if isinstance(event, ToolCallEvent):
        note = " (needs approval)" if event.requires_approval else ""
        if event.from_text:
            note = " (read from the model's text)" + note
        call = (
            f"{visible(event.call_id)} {visible(event.name)} {arguments_display(event.arguments)}"
        )
        return f"{r} tool_call {call}{note}"
    if isinstance(event, AwaitingApprovalEvent):
        calls = ", ".join(call_text(c) for c in event.pending)
        return f"{r} awaiting_approval {calls}"
    if isinstance(event, ApprovalEvent):
        verdict = "approved" if event.approved else "rejected"
        by = f" by {visible(event.approver)}" if event.approver else ""
        if event.source == "policy":
            by = f" by policy rule {event.rule}"
        elif event.source == "timeout":
            by = " by the approval timeout"
        elif event.source != "person":  # e.g. answers given with the run's input
            by = f" by {visible(str(event.source))}"
        why = f": {visible(event.reason)}" if event.reason else ""
        if event.reasons and any(event.reasons.values()):  # each voter's, not only the last's
            why = ": " + "; ".join(
                f"{visible(name)}: {visible(said)}" for name, said in event.reasons.items() if said
            )
        edited = ""
        if event.arguments is not None:
            edited = f" with arguments {arguments_display(event.arguments)}"
            edited += f" (the model's: {arguments_display(event.original_arguments)})"
        return f"{r} approval {visible(event.call_id)} {verdict}{by}{why}{edited}"
    if isinstance(event, QuestionEvent):
        return f"{r} question {question_text(event)}"
    if isinstance(event, AnswerEvent):
        by = f" by {visible(event.approver)}" if event.approver else ""
        if event.source == "timeout":
            by = " by the approval timeout"
        why = f": {visible(event.error)}" if event.error else ""
        return f"{r} answer {visible(event.call_id)} {answer_text(event.answer)}{by}{why}"
    if isinstance(event, ApprovalVoteEvent):
        verdict = "approved" if event.approved else "rejected"
        groups = f" ({', '.join(visible(g) for g in event.groups)})" if event.groups else ""
        tally = f"{event.votes} of {event.needed} approvals"
        who = f"by {visible(event.approver)}{groups}"
        why = f"; reason: {visible(event.reason)}" if event.reason else ""
        return f"{r} approval_vote {visible(event.call_id)} {verdict} {who}: {tally}{why}"
    if isinstance(event, ToolResultEvent):
        content = one_line(event.content, TOOL_RESULT_PREVIEW)
        return f"{r} tool_result {visible(event.call_id)} {visible(event.name)}: {content}"
    if isinstance(event, WarningEvent):
        return f"{r} warning: {visible(event.message)}"
    if isinstance(event, ErrorEvent):
        return f"{r} error: {visible(event.message)}"
    if isinstance(event, FinishedEvent):
        return f"finished: {event.finish_reason}"
    if isinstance(event, CompactionEvent):
        done = [
            f"{event.dropped_results} old result(s) dropped" if event.dropped_results else "",
            f"{event.summarised_messages} message(s) summarised"
            if event.summarised_messages
            else "",
            f"{event.cut_results} result(s) cut" if event.cut_results else "",
        ]
        how = ", ".join(d for d in done if d)
        return (
            f"{r} compaction: the model's view {event.before_tokens:,} → {event.after_tokens:,}"
            f" tokens ({how})"
        )
    if (line := budget_event_line(event)) is not None:
        return f"{r} {line}"
    if (line := sub_agent_line(event)) is not None:
        return f"{r} {line}"
    if isinstance(event, ApprovalExpiredEvent):
        ids = ", ".join(visible(c) for c in event.call_ids)
        return f"{r} approval_expired {ids}: nothing rejected; waiting until someone asks again"
    if isinstance(event, ApprovalReopenedEvent):
        by = f" by {visible(event.approver)}" if event.approver else ""
        until = f", waiting until {moment(event.deadline)}" if event.deadline else ""
        return f"{r} approval_reopened {visible(event.call_id)}: asked again{by}{until}"
    if isinstance(event, ForkedEvent):
        return f"{r} forked {forked_text(event.forked_from)}"
    if isinstance(event, ApprovalEscalatedEvent):
        ids = ", ".join(visible(c) for c in event.call_ids)
        groups = ", ".join(visible(g) for g in event.groups)
        held = "".join(
            f"; only {' or '.join(visible(g) for g in only)} may answer {visible(call_id)}"
            f" (the worker's enforced rule)"
            for call_id, only in (event.rule_groups or {}).items()
        )
        return f"{r} approval_escalated {ids} to {groups}{held}"
    return f"{r} {event.type}"  # pragma: no cover - every type is handled above


def forked_text(fork: ForkedFrom) -> str:
    """Where a fork comes from, as people read it: `from W (run R) after round N`."""
    run = f" (run {visible(fork.run_id)})" if fork.run_id else ""
    where = f"after round {fork.round}" if fork.round is not None else "before its first round"
    return f"from {visible(fork.workflow_id)}{run} {where}"


def sub_agent_line(event: AgentEvent) -> str | None:
    """A sub-agent's event as a transcript line (without its round), or None for another event:
    `sub_agent_started call_1 W.call_1: delete the logs folder`, `sub_agent_waiting call_1
    W.call_1 waits for call_2 delete_path {…}`, `sub_agent_finished call_1 W.call_1: stop (40
    tokens)`."""
    if isinstance(event, SubAgentStartedEvent):
        task = one_line(event.task, 400)
        return f"sub_agent_started {visible(event.call_id)} {visible(event.workflow_id)}: {task}"
    if isinstance(event, SubAgentWaitingEvent):
        waits = call_text(event.waiting_call)
        if event.waiting_call.name == "ask_user":
            asked = parse_arguments(event.waiting_call.arguments).value
            question = asked.get("question") if isinstance(asked, dict) else None
            waits = (
                f'an answer to {visible(event.waiting_call.id)} "{one_line(str(question), 400)}"'
            )
        return (
            f"sub_agent_waiting {visible(event.call_id)} {visible(event.workflow_id)} waits for"
            f" {waits}"
        )
    if isinstance(event, SubAgentFinishedEvent):
        how = event.finish_reason or "ended without finishing"
        return (
            f"sub_agent_finished {visible(event.call_id)} {visible(event.workflow_id)}: {how}"
            f" ({event.tokens:,} tokens)"
        )
    return None


def parent_text(parent: SubAgentOf) -> str:
    """Whose sub-agent a run is, as `pending`, the inbox and the tree say it: `sub-agent of W
    (call call_1): delete the logs folder`."""
    task = f": {one_line(parent.task, 200)}" if parent.task else ""
    return f"sub-agent of {visible(parent.workflow_id)} (call {visible(parent.call_id)}){task}"


_CUT = re.compile(r"…\[\d+ more characters\]\Z")
"""How the audit marks arguments it keeps only the start of (`workflows.shown.MORE`)."""


def audit_arguments(arguments: object) -> str:
    """An audit entry's arguments as people read them: like a waiting call's, or for long ones
    the start the audit kept, as it is, ending in its `…[N more characters]`."""
    if isinstance(arguments, str) and _CUT.search(arguments) and not parse_arguments(arguments).ok:
        return visible(arguments)
    return arguments_display(arguments)


def decided_by(entry: AuditEntry) -> str:
    """Who or what decided a call: `person ann`, `rule 1`, `the approval timeout`, `the run's
    input` (answers given when the run started); `person ann (remembered)` for a call answered
    with ann's earlier no to the same call (nobody was asked)."""
    if entry.remembered:
        who = f"person {visible(entry.approver)}" if entry.approver else "a person (unnamed)"
        return f"{who} (remembered)"
    if entry.source == "person" and entry.approvers:  # a call under an approver rule
        return "people " + ", ".join(visible(name) for name in entry.approvers)
    if entry.source == "person" or entry.action == "reopened":
        return f"person {visible(entry.approver)}" if entry.approver else "a person (unnamed)"
    if entry.source == "policy":
        return f"rule {entry.rule}" if entry.rule is not None else "a rule"
    if entry.source == "timeout":
        return "the approval timeout"
    if entry.source == "seed":
        return "the run's input"
    return visible(str(entry.source))  # pragma: no cover - every source is handled above


def audit_action(entry: AuditEntry) -> str:
    """What an audit entry records: `approved`, `rejected`, or what happened to a waiting call
    (`expired`, `asked again`, `escalated`)."""
    if entry.action == "decided":
        return "approved" if entry.approved else "rejected"
    return {"reopened": "asked again"}.get(entry.action, entry.action)


def moment(at: datetime | None) -> str:
    """A point in time for people, in UTC to the second: `2026-12-01 09:00:01 UTC`."""
    if at is None:
        return "?"
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def rule_line(rule: PolicyEntry) -> str:
    """One effective rule, e.g. `run  allow run_command when command=git status*`."""
    when = ""
    if rule.when:
        when = " when " + ", ".join(f"{visible(k)}={visible(v)}" for k, v in rule.when.items())
    why = f" ({visible(rule.reason)})" if rule.reason else ""
    who = ""
    if rule.approvers is not None:
        groups = " or ".join(visible(g) for g in rule.approvers.groups)
        who = f" by {rule.approvers.count} of {groups}"
    return f"{rule.origin:<8} {rule.decision:<5} {visible(rule.tool)}{when}{who}{why}"


def event_json(event: AgentEvent) -> str:
    return json.dumps(event.model_dump(mode="json"), ensure_ascii=False)


def message_lines(message: ChatMessage) -> list[str]:
    """A message of the history for people."""
    if message.role == "tool":
        head = f"tool {visible(message.tool_call_id or '')} ({visible(message.name or '')}): "
        return [head + one_line(message.content, TOOL_RESULT_PREVIEW)]
    lines = [f"{message.role}: {text_block(message.content)}"] if message.content else []
    for call in message.tool_calls or []:
        lines.append(f"{message.role} calls {call_text(call)}")
    return lines or [f"{message.role}:"]


def age(since: datetime | None, now: datetime | None = None) -> str:
    """`3s`, `5m 2s`, `2h 10m`, `3d 4h` since `since`."""
    if since is None:
        return "?"
    now = now or datetime.now(UTC)
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    seconds = max(0, int((now - since).total_seconds()))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"
