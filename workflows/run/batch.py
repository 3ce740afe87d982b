"""A batch: the pending calls of one reply, run and answered together.

The runnable calls run in parallel (at most `bounds.MAX_PARALLEL_TOOLS` at once), each as one
`execute_tool` activity; the others are answered with what `plan_resume` decided; all results
join the conversation together, in call order (the ordering invariant), also when a cancel
interrupts the batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from enum import Enum
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from workflows import activity_calls as calls
from workflows import names
from workflows.bounds import (
    ECHO_CHARS,
    MAX_ARGUMENT_CHARS,
    MAX_CALLS_PER_REPLY,
    MAX_PARALLEL_TOOLS,
)
from workflows.context import RunContext
from workflows.contract.tool_results import envelope_error
from workflows.conversation.record import Conversation
from workflows.gate.approvals import Approvals
from workflows.gate.reconstruction import Execute, Respond, Step, plan_resume
from workflows.model import ToolCall, ToolRequest, ToolResultEvent
from workflows.people.questions import Questions
from workflows.run.event_log import EVENT_TEXT_LIMIT
from workflows.run.sub_agents import DELEGATE, SubAgents
from workflows.run.turns import Turns
from workflows.run.wording import INTERRUPTED_TOOL
from workflows.shown import shorten


class Resumed(Enum):
    """How a batch ended."""

    DONE = "done"
    PAST_LIMIT = "past_limit"
    """A call was past the repeat limit: a session's turn ends."""
    HANDED_BACK = "handed_back"
    """A call waits for a person after all; nothing was appended."""


class InFlight:
    """The activities running now, so an immediate cancel can reach every one of them."""

    def __init__(self) -> None:
        self._handles: dict[str, workflow.ActivityHandle[Any]] = {}

    def add(self, key: str, handle: workflow.ActivityHandle[Any]) -> None:
        self._handles[key] = handle

    def remove(self, key: str) -> None:
        self._handles.pop(key, None)

    def __contains__(self, key: str) -> bool:
        return key in self._handles

    def cancel_all(self) -> None:
        for handle in list(self._handles.values()):
            handle.cancel()


class Batch:
    def __init__(
        self,
        ctx: RunContext,
        conversation: Conversation,
        approvals: Approvals,
        questions: Questions,
        turns: Turns,
        inflight: InFlight,
        sub_agents: SubAgents,
    ) -> None:
        self._ctx = ctx
        self._state = ctx.state
        self._questions = questions
        self._turns = turns
        self._sub_agents = sub_agents
        self._hands_back = ctx.patched.own_keys
        self._conversation = conversation
        self._approvals = approvals
        self._inflight = inflight
        self._emit = ctx.emit
        self._calls: list[ToolCall] = []
        self._results: dict[str, str] = {}
        self._executed: set[str] = set()
        """The calls whose result is their `execute_tool` activity's (not a failure's)."""
        self._handed_back: set[str] = set()
        """Calls the worker sent back to wait for a person (`names.ERROR_NEEDS_PERSON`)."""

    async def resume(self, pending: list[ToolCall]) -> Resumed:
        """Resume by message reconstruction: run the approved and unguarded calls in parallel,
        answer the rest, in call order (`plan_resume`), and append every result. `PAST_LIMIT`
        when a session's turn ends here (a call was past the repeat limit); `HANDED_BACK` when
        the worker sent a call back to wait for a person: nothing is appended then, the results
        of the others are held until it ran (`state.held_results`), and nothing runs twice."""
        state = self._state
        self._ctx.set_phase("running", f"round {state.round}: running {len(pending)} tool call(s)")
        allowed = set(self._approvals.allowed_tools())
        steps = plan_resume(
            pending,
            state.answers,
            self._approvals.requires_approval,
            allowed.__contains__,
            max_runs=MAX_CALLS_PER_REPLY,
            max_argument_chars=MAX_ARGUMENT_CHARS,
            refuse=self._approvals.refusal,
        )
        steps = self._questions.steps(steps)
        held = state.held_results
        if held:  # the rest of a batch a handed-back call interrupted: they ran already
            steps = [Respond(s.call, held[s.call.id]) if s.call.id in held else s for s in steps]
        past_limit = self._turns.in_session() and self._approvals.repeats.past_limit(pending)
        self._approvals.audit_remembered(steps)
        self._approvals.repeats.count_answers([c for c in pending if c.id not in held])
        await self.run(pending, steps)
        state.approval_wait = None
        if self._handed_back:
            self._hand_back()
            return Resumed.HANDED_BACK
        held.clear()
        self._approvals.batch_done()
        self._questions.batch_done()
        self._sub_agents.batch_done()
        self._conversation.flush_held()
        return Resumed.PAST_LIMIT if past_limit else Resumed.DONE

    def _hand_back(self) -> None:
        """The worker found that a call its enforced rule sends to a person had none (a path
        the run's view did not show): it waits for one; the batch's other results wait with it."""
        state = self._state
        for call in self._calls:
            if call.id in self._handed_back:
                state.answers.pop(call.id, None)
                if call.id not in state.asked:
                    state.asked.append(call.id)
                echoed = shorten(call.id, ECHO_CHARS)
                self._ctx.warn(
                    f"call '{echoed}' {call.name}: the worker's enforced rules send it to a person"
                    " (what its path leads to is guarded); it waits for an answer"
                )
            elif call.id in self._results:
                state.held_results[call.id] = self._results[call.id]
        self._calls, self._results, self._executed, self._handed_back = [], {}, set(), set()

    async def run(self, pending: Sequence[ToolCall], steps: Sequence[Step]) -> None:
        """Run the `Execute` steps, answer the `Respond` ones, append every result (unless a
        call was handed back)."""
        self._calls, self._results, self._executed = list(pending), {}, set()
        self._handed_back = set()
        for step in steps:
            if isinstance(step, Respond):
                self._results[step.call.id] = step.content
        executions = [s for s in steps if isinstance(s, Execute)]
        for step in executions:
            self._approvals.repeats.ran(step.call)
        slots = asyncio.Semaphore(MAX_PARALLEL_TOOLS)

        async def bounded(step: Execute) -> None:
            async with slots:
                await self._execute(step)

        await asyncio.gather(*(bounded(s) for s in executions))
        if not self._handed_back:
            self._append()

    def close_interrupted(self) -> None:
        """On a cancel that interrupted tools: answer every call of the batch, so the invariant
        holds (finished ones with their result, the others as cancelled)."""
        if self._calls:
            self._append()

    async def _execute(self, step: Execute) -> None:
        call = step.call
        if call.name == DELEGATE and self._sub_agents.enabled:
            self._results[call.id] = await self._sub_agents.run(call, step.arguments)
            self._executed.add(call.id)
            return
        spec = self._approvals.spec(call.name)
        info = workflow.info()
        request = ToolRequest(
            workflow_id=info.workflow_id,
            call_id=call.id,
            name=call.name,
            arguments=step.arguments,
            run_key=info.first_execution_run_id,
            answered_by=self._approvals.approved_by(call.id),
            votes=self._approvals.votes.approving(call.id),
            escalated_to=self._approvals.escalated_by_operator(call.id),
        )
        key = f"tool:{call.id}"
        handle = calls.start_tool(request, spec)
        self._inflight.add(key, handle)
        try:
            content = await handle
            self._executed.add(call.id)
        except ActivityError as err:
            if calls.is_cancellation(err):
                if self._state.cancel is None:
                    raise  # Temporal's own cancellation: the run ends as cancelled
                return  # answered as cancelled when the batch is appended
            if self._hands_back and calls.failure_type(err) == names.ERROR_NEEDS_PERSON:
                self._handed_back.add(call.id)
                return
            content = calls.tool_failure_content(err, spec)
        finally:
            self._inflight.remove(key)
        self._results[call.id] = content

    def _append(self) -> None:
        results = [self._results.get(call.id) for call in self._calls]
        contents = [envelope_error(INTERRUPTED_TOOL) if r is None else r for r in results]
        added = self._conversation.append_results(self._calls, contents, self._executed)
        for message in added:
            self._emit(
                ToolResultEvent(
                    call_id=message.tool_call_id or "",
                    name=message.name or "",
                    content=shorten(message.content, EVENT_TEXT_LIMIT),
                )
            )
        self._calls, self._results, self._executed = [], {}, set()
