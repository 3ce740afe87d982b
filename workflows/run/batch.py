"""A batch: the pending calls of one reply, run and answered together.

The runnable calls run in parallel (at most `bounds.MAX_PARALLEL_TOOLS` at once), each as one
`execute_tool` activity; the others are answered with what `plan_resume` decided; all results
join the conversation together, in call order (the ordering invariant), also when a cancel
interrupts the batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from workflows import activity_calls as calls
from workflows.bounds import MAX_ARGUMENT_CHARS, MAX_CALLS_PER_REPLY, MAX_PARALLEL_TOOLS
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
        self._conversation = conversation
        self._approvals = approvals
        self._inflight = inflight
        self._emit = ctx.emit
        self._calls: list[ToolCall] = []
        self._results: dict[str, str] = {}
        self._executed: set[str] = set()
        """The calls whose result is their `execute_tool` activity's (not a failure's)."""

    async def resume(self, pending: list[ToolCall]) -> bool:
        """Resume by message reconstruction: run the approved and unguarded calls in parallel,
        answer the rest, in call order (`plan_resume`). True when a session's turn ends here (a
        call was past the repeat limit)."""
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
        past_limit = self._turns.in_session() and self._approvals.repeats.past_limit(pending)
        self._approvals.audit_remembered(steps)
        self._approvals.repeats.count_answers(pending)
        await self.run(pending, steps)
        self._approvals.batch_done()
        self._questions.batch_done()
        self._sub_agents.batch_done()
        state.approval_wait = None
        self._conversation.flush_held()
        return past_limit

    async def run(self, pending: Sequence[ToolCall], steps: Sequence[Step]) -> None:
        """Run the `Execute` steps, answer the `Respond` ones, append every result."""
        self._calls, self._results, self._executed = list(pending), {}, set()
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
