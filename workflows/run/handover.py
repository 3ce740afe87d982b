"""A generation's state: where it comes from and how it is handed on. The one place that reads
and writes the hand-over of continue-as-new.

- A new run builds its state from its input (`messages`, `options`).
- A generation the workflow itself continued as new gets the previous generation's state as it
  was (`AgentRunInput.state`).
- A client cannot claim to be a continuation: `state` is taken only when the
  previous run of the chain itself continued as new (`handed_over`). The server also sets
  `continued_run_id` for a cron run and a retried run, whose input is the client's: those are
  plain starts, and a cron schedule is refused altogether.
"""

from __future__ import annotations

from dataclasses import replace

from pydantic_core import to_json
from temporalio.contrib.workflow_streams import WorkflowStreamState

from workflows.bounds import HANDOVER_BUDGET_BYTES
from workflows.contract.rules import PolicyRule
from workflows.model import (
    AgentEvent,
    AgentRunInput,
    AgentRunOptions,
    AgentState,
    WorkerSetup,
)
from workflows.shown import ELLIPSIS, shorten

NOT_A_CONTINUATION = (
    "Invalid AgentRunInput: `state` and `continued` are set only by the workflow itself when it"
    " continues as new; start a run with `messages` and `options`"
)


CRON_REFUSED = (
    "Invalid AgentRunInput: AgentWorkflow does not run on a cron schedule (each cron run starts"
    " from the client's input again); use a Temporal Schedule that starts a new run each time"
    " (`temporal schedule create`)"
)


def handed_over(continued_run_id: str | None, attempt: int, cron_schedule: str | None) -> bool:
    """Whether this run's input was written by the workflow itself: the previous run of the
    chain continued as new. Only the server sets these fields (a client chooses a cron schedule
    and a retry policy, never the run id or the attempt): a retried run has `attempt` > 1, a cron
    run its schedule; a continue-as-new starts at attempt 1 without one. (A reset replays the
    run it resets, with that run's own input.)"""
    return continued_run_id is not None and attempt == 1 and not cron_schedule


def initial_state(
    run_input: AgentRunInput, *, continued: bool, cron: bool = False
) -> tuple[AgentState, str | None]:
    """The state this generation starts from, and why the input is refused (or None): a
    hand-over given at a start that is not a continue-as-new is refused and a new state is built
    from the input's messages instead; a run on a cron schedule is refused whatever its input."""
    if cron:
        return new_state(run_input), CRON_REFUSED
    claimed = run_input.state is not None or run_input.continued is not None
    if claimed and not continued:
        return new_state(run_input), NOT_A_CONTINUATION
    if run_input.state is not None:
        return run_input.state, None
    state = new_state(run_input)
    return state, duplicate_call_ids(state)


def new_state(run_input: AgentRunInput) -> AgentState:
    policy = run_input.options.approval_policy
    rules: list[PolicyRule] = list(policy.rules) if policy is not None else []
    return AgentState(messages=list(run_input.messages), options=run_input.options, run_rules=rules)


def duplicate_call_ids(state: AgentState) -> str | None:
    """Why the input's conversation is refused: two tool calls with one id (an answer must be
    for one call only), or None."""
    seen: set[str] = set()
    for message in state.messages:
        for call in message.tool_calls or []:
            if call.id in seen:
                shown = shorten(call.id, 80, ELLIPSIS)
                return f"Invalid AgentRunInput: two tool calls have the id '{shown}'"
            seen.add(call.id)
    return None


def handover(
    state: AgentState, events: list[AgentEvent], stream: WorkflowStreamState | None
) -> AgentRunInput:
    """The next generation's input: the state as it is, with the retained events and stream
    tail. Answers given at start are spent (they applied to the first generation only); the
    options travel once, in the state."""
    handed = state.model_copy(
        update={
            "generation": state.generation + 1,
            "events": events,
            "stream": stream,
            "options": state.options.model_copy(update={"tool_approval_responses": []}),
        }
    )
    return AgentRunInput(messages=[], options=AgentRunOptions(), state=handed)


def carried_once(handed: AgentRunInput) -> AgentRunInput:
    """The hand-over with nothing in it twice and nothing it does not need: the run's rules
    travel in `run_rules` only (`options.approval_policy` was read at the start), and options
    the workflow does not know (a warning at the start) are left behind."""
    state = handed.state
    if state is None:
        return handed
    known = state.options.model_dump(exclude=set(state.options.model_extra or {}))
    known["approval_policy"] = None
    options = AgentRunOptions.model_validate(known)
    return handed.model_copy(update={"state": state.model_copy(update={"options": options})})


def bounded_handover(
    handed: AgentRunInput, setup: WorkerSetup | None
) -> tuple[AgentRunInput, str | None]:
    """The hand-over with the run's rules once, cut to its budget. With a payload store
    the hand-over goes to the store whole (Temporal holds a reference)."""
    handed = carried_once(handed)
    if setup is not None and setup.payload_store:
        return handed, None
    return fit_handover(handed, HANDOVER_BUDGET_BYTES)


def handover_bytes(run_input: AgentRunInput) -> int:
    """The input's size as the payload converter writes it (pydantic's JSON)."""
    return len(to_json(run_input))


def fit_handover(handed: AgentRunInput, budget: int) -> tuple[AgentRunInput, str | None]:
    """The hand-over cut to `budget` bytes: the oldest items of the carried stream, then of the
    carried events, then of the audit (counted as dropped), then the stream's publisher records
    go first. Why the run cannot continue when even that is not enough (or None): the
    conversation and the run's rules are never cut."""
    size = handover_bytes(handed)
    if handed.state is None or size <= budget:
        return handed, None
    state = handed.state.model_copy()  # cut a copy: `handed` stays as it was
    handed = handed.model_copy(update={"state": state})
    for cut in (_cut_stream, _cut_events, _cut_audit, _cut_publishers):
        while size > budget and cut(state, size - budget):
            size = handover_bytes(handed)
        if size <= budget:
            return handed, None
    return handed, cannot_continue(state, size, budget)


def _oldest(items: list[object], excess: int) -> int:
    """How many of the oldest `items` free at least `excess` bytes of JSON (all of them when
    they cannot)."""
    freed = 0
    for count, item in enumerate(items, start=1):
        freed += len(to_json(item)) + 1
        if freed >= excess:
            return count
    return len(items)


def _cut_stream(state: AgentState, excess: int) -> bool:
    stream = state.stream
    if stream is None or not stream.log:
        return False
    count = _oldest(list(stream.log), excess)
    state.stream = replace(stream, log=stream.log[count:], base_offset=stream.base_offset + count)
    return True


def _cut_events(state: AgentState, excess: int) -> bool:
    if not state.events:
        return False
    state.events = state.events[_oldest(list(state.events), excess) :]
    return True


def _cut_audit(state: AgentState, excess: int) -> bool:
    if not state.audit:
        return False
    count = _oldest(list(state.audit), excess)
    state.audit = state.audit[count:]
    state.audit_dropped += count
    state.audit_bytes = sum(len(entry.model_dump_json()) for entry in state.audit)
    return True


def _cut_publishers(state: AgentState, excess: int) -> bool:
    stream = state.stream
    if stream is None or not stream.publishers:
        return False
    by_age = sorted(stream.publishers.items(), key=lambda item: item[1].last_seen)
    count = _oldest([{key: value} for key, value in by_age], excess)
    state.stream = replace(stream, publishers=dict(by_age[count:]))
    return True


def cannot_continue(state: AgentState, size: int, budget: int) -> str:
    """Why the run ends instead of continuing as new, naming what takes the room."""
    messages = len(to_json(state.messages)) + len(to_json(state.held_messages))
    rules = len(to_json(state.run_rules))
    return (
        f"the run cannot continue as new: its state takes {size} bytes, more than the"
        f" {budget}-byte hand-over, with the carried events, stream and audit left out"
        f" (the conversation {messages} bytes, the run's rules {rules} bytes); start a new run"
        " with a shorter conversation or fewer rules, or give the worker a payload store"
        " (AGENT_PAYLOAD_STORE)"
    )
