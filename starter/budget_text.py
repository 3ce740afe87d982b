"""What people read of a run's token budget: its events as transcript lines, and the budget."""

from __future__ import annotations

from workflows.model import (
    AgentEvent,
    BudgetExhaustedEvent,
    BudgetGrantedEvent,
    BudgetStatus,
    BudgetStoppedEvent,
)
from workflows.shown import visible


def used_line(budget: BudgetStatus) -> str:
    """`used 1,200 of 1,000 tokens`, as the card and `starter pending` say it."""
    return f"used {budget.used:,} of {budget.limit:,} tokens"


def budget_event_line(event: AgentEvent) -> str | None:
    """A budget event as a transcript line (without its round), or None for other events."""
    if isinstance(event, BudgetExhaustedEvent):
        return (
            f"budget_exhausted: used {event.used:,} of {event.limit:,} tokens; the run waits"
            " for a person to grant more or stop it"
        )
    if not isinstance(event, BudgetGrantedEvent | BudgetStoppedEvent):
        return None
    by = f" by {visible(event.approver)}" if event.approver else ""
    if isinstance(event, BudgetGrantedEvent):
        return f"budget_granted: {event.tokens:,} more tokens{by} (budget {event.limit:,})"
    return f"budget_stopped{by} at {event.used:,} of {event.limit:,} tokens"
