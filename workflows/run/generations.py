"""A generation's edges: what it reads of the worker when it starts, when it continues as new,
and the result the last one returns. What is handed over is `state`'s.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow

from workflows import activity_calls as calls
from workflows import bounds
from workflows.conversation.compaction import Compactor
from workflows.gate.approvals import Approvals
from workflows.model import AgentRunResult, AgentState, FinishReason, ToolSpec

MAX_GENERATION_BYTES = 3_500_000
"""Continue as new once a generation's history is this big, even before Temporal suggests it."""


async def read_setup(
    state: AgentState,
    approvals: Approvals,
    compactor: Compactor,
    workflow_tools: Callable[[], list[ToolSpec]] = list,
) -> None:
    """What the run needs of the worker: its tools, rules and window. Read again by every
    generation: what decides a call (tools, enforced rules, notifications) is the worker's as it
    is now, never a value carried over."""
    first = state.setup is None
    setup = await calls.worker_setup()
    state.setup = setup
    approvals.know_tools([*setup.tools, *workflow_tools()])
    state.worker_policy = setup.policy
    if first:
        compactor.start(setup)


def history_full(max_history_events: int | None) -> bool:
    """Whether this generation continues as new now: Temporal suggests it, or its history
    reached MAX_GENERATION_BYTES or the run's `max_history_events`."""
    info = workflow.info()
    if info.is_continue_as_new_suggested():
        return True
    if info.get_current_history_size() >= MAX_GENERATION_BYTES:
        return True
    cap = max_history_events
    return cap is not None and info.get_current_history_length() >= cap


def result_of(state: AgentState, reason: FinishReason, error: str | None) -> AgentRunResult:
    """The run's result: the conversation (cut to its budget, without a payload store)."""
    messages = state.messages
    setup = state.setup
    if not (setup is not None and setup.payload_store):
        # A safety net: the conversation bound keeps the result far below this already.
        messages, _ = bounds.fit_messages(messages, bounds.RESULT_BUDGET_BYTES)
    return AgentRunResult(
        messages=messages,
        finish_reason=reason,
        rounds=state.round,
        error=error,
        usage=state.usage,
    )
