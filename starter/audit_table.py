"""`starter audit W` for people: the run's decisions as a table, oldest first (who or which rule,
when, the arguments that ran, edits marked, the reason underneath), after the counts and tokens.
Every text goes through `starter.render`, as on the web page."""

from __future__ import annotations

from starter.render import answer_text, audit_action, audit_arguments, decided_by, moment, visible
from workflows.gate.audit import GRANT_BUDGET
from workflows.model import AuditView

HEADER = ("#", "at", "call", "tool", "decision", "by", "arguments")


def dropped_line(dropped: int) -> str:
    """What the audit says of the decisions it no longer holds (the oldest, past its budget)."""
    return f"{dropped:,} older decision{'' if dropped == 1 else 's'} not kept"


def counts_line(view: AuditView) -> str:
    c = view.counts
    line = (
        f"approved by people {c.approved_by_person}, rejected by people {c.rejected_by_person},"
        f" decided by rules {c.by_rule}, by the approval timeout {c.by_timeout}"
    )
    line += f", with the run's input {c.seeded}" if c.seeded else ""
    line += f", with a remembered no {c.remembered}" if c.remembered else ""
    line += f", questions answered {c.questions_answered}" if c.questions_answered else ""
    line += f", votes of approvers {c.votes}" if c.votes else ""
    line += f", tokens granted {c.tokens_granted:,}" if c.tokens_granted else ""
    if c.expired or c.reopened or c.escalated:
        line += f"; expired {c.expired}, asked again {c.reopened}, escalated {c.escalated}"
    return line


def tokens_line(view: AuditView) -> str:
    u = view.usage
    return f"tokens: {u.prompt_tokens:,} prompt + {u.completion_tokens:,} completion"


def audit_lines(workflow_id: str, view: AuditView, run_id: str | None = None) -> list[str]:
    """The whole audit as lines of text; `run_id`, the first run id of the run's chain, is what
    `starter approve --run-id` pins an answer to."""
    kept = len(view.decisions)
    run = f" (run id {visible(run_id)})" if run_id else ""
    lines = [
        f"audit of {visible(workflow_id)}{run}: {kept + view.dropped} decision"
        f"{'' if kept + view.dropped == 1 else 's'}",
        f"  {counts_line(view)}",
        f"  {tokens_line(view)}",
    ]
    if view.dropped:
        lines.append(f"  {dropped_line(view.dropped)}")
    if not view.decisions:
        lines.append("no decision yet")
        return lines
    rows: list[tuple[tuple[str, ...], str | None, str | None]] = []
    for number, entry in enumerate(view.decisions, start=view.dropped + 1):
        arguments = audit_arguments(entry.arguments) + (" (edited)" if entry.edited else "")
        decision = audit_action(entry)
        if entry.tool == GRANT_BUDGET:
            decision = "granted" if entry.approved else "stopped"
        elif entry.answer is not None or entry.tool == "ask_user":
            decision = "answered" if entry.answer is not None else "unanswered"
            arguments += f" answer: {answer_text(entry.answer)}"
        cells = (
            str(number),
            moment(entry.at),
            visible(entry.call_id),
            visible(entry.tool),
            decision,
            decided_by(entry),
            arguments,
        )
        reason = visible(entry.reason) if entry.reason else None
        rows.append((cells, reason, visible(entry.workflow_id) if entry.workflow_id else None))
    widths = [max(len(HEADER[i]), *(len(cells[i]) for cells, _, _ in rows)) for i in range(6)]

    def line(cells: tuple[str, ...]) -> str:
        return (
            "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(cells[:6])) + "  " + cells[6]
        )

    lines.append("")
    lines.append(line(HEADER))
    indent = " " * (widths[0] + 2)
    for shown, reason, sub_agent in rows:
        lines.append(line(shown))
        if sub_agent:  # a sub-agent's decision, kept in its parent's audit
            lines.append(f"{indent}in sub-agent {sub_agent}")
        if reason:
            lines.append(f"{indent}reason: {reason}")
    return lines
