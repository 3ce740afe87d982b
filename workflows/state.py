"""Where a generation's state comes from: handed over at continue-as-new, or new from the run's
input (including the first release's hand-over format, so runs it continued go on)."""

from __future__ import annotations

from workflows.model import AgentRunInput, AgentState, ApprovalWait, CarriedState, SessionWait


def initial_state(run_input: AgentRunInput) -> AgentState:
    if run_input.state is not None:
        return run_input.state
    if run_input.continued is not None:
        return from_carried(run_input, run_input.continued)
    policy = run_input.options.approval_policy
    return AgentState(
        messages=list(run_input.messages),
        options=run_input.options,
        run_rules=list(policy.rules) if policy is not None else [],
    )


def from_carried(run_input: AgentRunInput, carried: CarriedState) -> AgentState:
    """A hand-over written by the first release: flat fields beside the messages."""
    wait = None
    if carried.awaiting_announced and carried.awaiting_since is not None:
        wait = ApprovalWait(since=carried.awaiting_since, deadline=carried.approval_deadline)
    session = SessionWait(idle_deadline=carried.idle_deadline) if carried.between_turns else None
    return AgentState(
        messages=list(run_input.messages),
        options=run_input.options,
        round=carried.round,
        generation=carried.generation,
        events=list(carried.events),
        next_seq=carried.next_seq,
        answers=dict(carried.answers),
        approval_wait=wait,
        session_wait=session,
        cancel=carried.cancel,
        held_messages=list(carried.held_messages),
        usage=carried.usage,
        tool_specs=carried.tool_specs,
        seed_mode=carried.seed_mode,
        stream=carried.stream,
    )
