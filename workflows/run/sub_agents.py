"""Sub-agents: a run that delegates, under the same people, rules and budget. The one owner of
`state.sub_agents` and of what a sub-agent tells its parent.

With `options.sub_agents` (else the worker's AGENT_SUB_AGENTS), while the run's depth is below
the worker's AGENT_MAX_DEPTH, the model is offered `delegate {"task", "tools"?, "max_rounds"?}`.
A `delegate` call passes the gate like any call; when its batch runs it starts a child
`AgentWorkflow` (`{parent}.{call_id}`, on the parent's task queue) whose conversation is the
parent's system prompt and the task, whose tools are the parent's (narrowed to `tools`), whose
rules are the parent's run rules (the worker's enforced ones apply to every run), and whose
token budget is what is left of the parent's. The child tells its parent where it stands at
every pause (`sub_agent_report`) and at its end (in its result); the parent shows it
(`status.sub_agents`, the `sub_agent_*` events), counts its tokens and grants in the tree's
budget, keeps its decisions in its own audit, cascades a cancel to it, and takes its final
answer as the call's result.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, FailureError
from temporalio.workflow import ChildWorkflowCancellationType, ParentClosePolicy

from workflows import bounds, metrics, names, shown
from workflows.context import RunContext
from workflows.contract.arguments import parse_arguments
from workflows.contract.rules import ApprovalPolicy
from workflows.contract.tool_results import envelope_error
from workflows.gate.approvals import Approvals
from workflows.gate.audit import record_sub_agent
from workflows.model import (
    PERSON_PHASES,
    AgentRunInput,
    AgentRunResult,
    BudgetState,
    BudgetStatus,
    CancelRequest,
    ChatMessage,
    FinishReason,
    PendingQuestion,
    Phase,
    SubAgentFinishedEvent,
    SubAgentOf,
    SubAgentReport,
    SubAgentStartedEvent,
    SubAgentStatus,
    SubAgentWaitingEvent,
    ToolCall,
    ToolSpec,
)

DELEGATE = "delegate"
MAX_TASK_CHARS = 20_000
SHOWN_TASK_CHARS = 2_000
"""A task as `status`, events and the inbox show it."""
DEFAULT_MAX_DEPTH = 2
PAUSES: tuple[Phase, ...] = (*PERSON_PHASES, "budget_exhausted")
"""The phases a sub-agent reports to its parent when it enters (and leaves) them."""

DELEGATE_SPEC = ToolSpec(
    name=DELEGATE,
    description=(
        "Hand a task to a sub-agent: another agent that works on it with your tools (or the ones"
        " you name) under the same rules and people, and whose final answer is this call's"
        " result. Several calls in one reply run at once. Give it everything it needs in `task`:"
        " it sees only that."
    ),
    parameters={
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "what the sub-agent is to do, in full"},
            "tools": {
                "type": "array",
                "items": {"type": "string"},
                "description": "the tools it may use (default: yours)",
            },
            "max_rounds": {
                "type": "integer",
                "minimum": 1,
                "description": "the most rounds it may take (default: your limit)",
            },
        },
        "required": ["task"],
        "additionalProperties": False,
    },
)


@dataclass(frozen=True)
class Delegation:
    """What one `delegate` call asks."""

    task: str
    tools: tuple[str, ...] | None = None
    max_rounds: int | None = None


def parse_delegation(arguments: Any) -> Delegation | str:
    """A `delegate` call's arguments, or why they are no task (answered at once, nothing
    started)."""
    parsed = parse_arguments(arguments)
    if not parsed.ok or not isinstance(parsed.value, dict):
        return "the arguments are not one JSON object"
    value: dict[str, Any] = parsed.value
    unknown = sorted(set(value) - {"task", "tools", "max_rounds"})
    if unknown:
        return f"unknown argument(s): {', '.join(unknown)}"
    task = value.get("task")
    if not isinstance(task, str) or not task.strip():
        return "`task` must be a non-empty string"
    if len(task) > MAX_TASK_CHARS:
        return f"`task` is longer than {MAX_TASK_CHARS} characters"
    tools = value.get("tools")
    if tools is not None and (
        not isinstance(tools, list) or not all(isinstance(t, str) for t in tools)
    ):
        return "`tools` must be a list of tool names"
    rounds = value.get("max_rounds")
    if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int)):
        return "`max_rounds` must be a whole number"
    if isinstance(rounds, int) and rounds < 1:
        return "`max_rounds` must be at least 1"
    return Delegation(task.strip(), None if tools is None else tuple(tools), rounds)


def child_id(parent_id: str, call_id: str) -> str:
    """A sub-agent's workflow id: its parent's and the `delegate` call's."""
    return f"{parent_id}.{call_id}"


def answer_of(result: AgentRunResult) -> str:
    """A finished sub-agent's answer: its last assistant message's text."""
    last = next((m for m in reversed(result.messages) if m.role == "assistant"), None)
    return "" if last is None else last.content


def result_content(workflow_id: str, result: AgentRunResult) -> str:
    """The `delegate` call's tool result: the sub-agent's answer, or why it gave none."""
    tokens = result.usage.total
    if result.finish_reason != "stop":
        said = f": {result.error}" if result.error else ""
        return envelope_error(f"sub-agent {workflow_id} ended with {result.finish_reason}{said}")
    data = {
        "answer": answer_of(result),
        "workflow_id": workflow_id,
        "finish_reason": result.finish_reason,
        "tokens": tokens,
    }
    return json.dumps({"ok": True, "error": None, "data": data}, ensure_ascii=False)


def failure_content(workflow_id: str, err: BaseException) -> str:
    """The `delegate` call's tool result when Temporal ended the sub-agent without a result."""
    cause = err.cause if isinstance(err, ChildWorkflowError) and err.cause is not None else err
    message = cause.message if isinstance(cause, FailureError) else str(cause)
    return envelope_error(f"sub-agent {workflow_id} ended with error: {message}")


class SubAgents:
    def __init__(
        self,
        ctx: RunContext,
        approvals: Approvals,
        *,
        budget: Callable[[], BudgetStatus | None],
    ) -> None:
        self._ctx = ctx
        self._state = ctx.state
        self._approvals = approvals
        self._budget = budget
        """The tree's budget as it stands (used, limit), or None: the run has none."""
        self._handles: dict[str, workflow.ChildWorkflowHandle[Any, AgentRunResult]] = {}
        self._told: Phase | None = None
        """The phase this sub-agent last told its parent (a pause, or running after one)."""
        self._telling: list[asyncio.Task[None]] = []

    # ---- offering the tool

    @property
    def parent(self) -> SubAgentOf | None:
        """The run that delegated to this one, or None (this run is no sub-agent)."""
        return self._state.options.parent

    @property
    def depth(self) -> int:
        parent = self.parent
        return 0 if parent is None else parent.depth

    @property
    def enabled(self) -> bool:
        """Whether this run offers `delegate`: the run's option (else the worker's), while its
        depth is below the worker's AGENT_MAX_DEPTH."""
        if not self._ctx.patched.sub_agents:
            return False
        setup = self._state.setup
        chosen = self._state.options.sub_agents
        on = chosen if chosen is not None else (setup is not None and setup.sub_agents)
        most = setup.max_depth if setup is not None else DEFAULT_MAX_DEPTH
        return bool(on) and self.depth < most

    def specs(self) -> list[ToolSpec]:
        """The tool the workflow itself adds to the worker's, when the run offers it."""
        return [DELEGATE_SPEC] if self.enabled else []

    # ---- the parent: starting a sub-agent and taking its answer

    def open(self) -> bool:
        """Whether a sub-agent of this run is running (a batch waits for it)."""
        return bool(self._handles)

    async def run(self, call: ToolCall, arguments: Any) -> str:
        """Start the sub-agent of one `delegate` call and wait for its end: its answer (or why
        it gave none) is the call's result."""
        delegation = parse_delegation(arguments)
        if isinstance(delegation, str):
            return envelope_error(f"Invalid delegation: {delegation}; no sub-agent was started")
        ctx, state = self._ctx, self._state
        workflow_id = child_id(ctx.workflow_id, call.id)
        task = shown.shorten(delegation.task, SHOWN_TASK_CHARS)
        state.sub_agents[call.id] = SubAgentStatus(
            call_id=call.id, workflow_id=workflow_id, task=task
        )
        try:
            handle = await workflow.start_child_workflow(
                names.WORKFLOW_TYPE,
                self._child_input(call, delegation),
                id=workflow_id,
                task_queue=workflow.info().task_queue,
                result_type=AgentRunResult,
                cancellation_type=ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
                parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                static_summary=f"sub-agent of {ctx.workflow_id}: {shown.shorten(task, 200)}",
            )
        except Exception as err:  # already running (a reused id), or the start refused
            state.sub_agents.pop(call.id, None)
            return envelope_error(f"the sub-agent could not start: {shown.one_line(str(err))}")
        self._handles[call.id] = handle
        ctx.emit(SubAgentStartedEvent(call_id=call.id, workflow_id=workflow_id, task=task))
        ctx.set_phase(
            "waiting_for_sub_agents",
            f"round {state.round}: waiting for {len(self._handles)} sub-agent(s)",
        )
        try:
            result: AgentRunResult = await handle
            if (last := result.sub_agent_report) is not None and last.call_id == call.id:
                self.take_report(last)  # its decisions and grants, before its end is counted
            content = result_content(workflow_id, result)
            reason: FinishReason | None = result.finish_reason
            tokens = result.usage.total
        except ChildWorkflowError as err:
            content, reason, tokens = failure_content(workflow_id, err), None, 0
        finally:
            self._handles.pop(call.id, None)
        self._finished(call.id, workflow_id, reason, tokens)
        return content

    def _child_input(self, call: ToolCall, delegation: Delegation) -> AgentRunInput:
        """The sub-agent's start: the parent's system prompt and the task; the parent's
        options, tools (narrowed, never widened) and run rules; what is left of the budget."""
        state, options = self._state, self._state.options
        head = [m for m in state.messages if m.role == "system" and m.name is None]
        allowed = set(self._approvals.allowed_tools())
        tools = sorted(allowed if delegation.tools is None else allowed & set(delegation.tools))
        rounds = options.max_rounds
        if delegation.max_rounds is not None:
            rounds = min(rounds, delegation.max_rounds)
        budget = self._budget()
        left = None if budget is None else max(1, budget.limit - budget.used)
        parent = SubAgentOf(
            workflow_id=self._ctx.workflow_id,
            run_id=self._ctx.run_id,
            call_id=call.id,
            depth=self.depth + 1,
            task=shown.shorten(delegation.task, SHOWN_TASK_CHARS),
        )
        child = options.model_copy(
            update={
                "max_rounds": rounds,
                "tools": tools,
                "approval_policy": ApprovalPolicy(rules=list(state.run_rules)),
                "tool_approval_responses": [],
                "keep_alive": False,
                "idle_timeout_seconds": None,
                "max_history_events": None,
                "max_run_tokens": left,
                "parent": parent,
                "forked_from": None,  # the parent's provenance, not the sub-agent's
            }
        )
        return AgentRunInput(messages=[*head, ChatMessage.user(delegation.task)], options=child)

    def _finished(
        self, call_id: str, workflow_id: str, reason: FinishReason | None, tokens: int
    ) -> None:
        """A sub-agent ended: its tokens and grants join the tree's for good."""
        state = self._state
        record = state.sub_agents.get(call_id)
        used = max(tokens, record.tokens if record is not None else 0)
        state.sub_agent_tokens += used
        granted = state.sub_agent_grants.pop(call_id, 0)
        if granted:  # a grant at the sub-agent's budget counts for the tree
            if state.budget is None:  # a parent that never reached its own budget carries none
                state.budget = BudgetState()
            state.budget.granted += granted
        if record is not None:
            done = {"phase": "finished", "finish_reason": reason, "tokens": used}
            state.sub_agents[call_id] = record.model_copy(update=done)
        metrics.sub_agent_finished(reason)
        self._ctx.emit(
            SubAgentFinishedEvent(
                call_id=call_id, workflow_id=workflow_id, finish_reason=reason, tokens=tokens
            )
        )

    def take_report(self, report: SubAgentReport) -> str | None:
        """A sub-agent's word about itself; why it is ignored (not one of this run's open
        sub-agents), or None. Its tokens only ever grow (a report never takes some back)."""
        state = self._state
        record = state.sub_agents.get(report.call_id)
        if record is None or record.workflow_id != report.workflow_id:
            echoed = shown.shorten(report.workflow_id, bounds.ECHO_CHARS)
            return f"'{echoed}' is no sub-agent of this run waiting to finish"
        if report.audit:
            record_sub_agent(state, report.audit, report.workflow_id)
        if record.phase == "finished":
            return None
        before = {c.id for c in record.pending_approvals} | {
            q.call_id for q in record.pending_questions
        }
        state.sub_agents[report.call_id] = record.model_copy(
            update={
                "phase": report.phase,
                "pending_approvals": report.pending_approvals,
                "pending_questions": report.pending_questions,
                "tokens": max(record.tokens, report.usage.total),
            }
        )
        grants = state.sub_agent_grants
        grants[report.call_id] = max(grants.get(report.call_id, 0), report.granted)
        waiting = [c for c in report.pending_approvals if c.id not in before]
        waiting += [_question_call(q) for q in report.pending_questions if q.call_id not in before]
        if report.phase in PERSON_PHASES and waiting:
            self._ctx.emit(
                SubAgentWaitingEvent(
                    call_id=report.call_id,
                    workflow_id=report.workflow_id,
                    waiting_call=bounds.event_call(waiting[0]),
                )
            )
        return None

    async def cancel(self, request: CancelRequest) -> None:
        """A cancel of this run goes to every sub-agent still running, with the same reason."""
        for call_id, handle in list(self._handles.items()):
            payload = request.model_dump(mode="json", exclude_none=True)
            try:
                await handle.signal(names.SIGNAL_CANCEL, payload)
            except Exception as err:  # it ended meanwhile
                echoed = shown.shorten(call_id, bounds.ECHO_CHARS)
                workflow.logger.info("sub-agent of %s not told to cancel: %s", echoed, err)

    def statuses(self) -> list[SubAgentStatus]:
        """The `status` query's `sub_agents`: those still running."""
        return [r for r in self._state.sub_agents.values() if r.phase != "finished"]

    def batch_done(self) -> None:
        """The batch's `delegate` calls have their results: their records are spent."""
        self._state.sub_agents.clear()

    # ---- the sub-agent: telling its parent

    def report_due(self, phase: Phase) -> bool:
        """Whether entering `phase` is news for the parent: a pause or the first step out of one
        (its end is news too, but the result carries it: `with_final_report`)."""
        if self.parent is None or phase == "finished":  # the end travels in the result
            return False
        if phase in PAUSES:
            return True
        return self._told in PAUSES

    def schedule_report(
        self,
        phase: Phase,
        *,
        pending_approvals: list[ToolCall],
        pending_questions: list[PendingQuestion],
        granted: int,
        finish_reason: FinishReason | None = None,
    ) -> None:
        """Tell the parent (`tell_parent`) without holding up the caller; `reported` waits."""
        self._told = phase
        told = self.tell_parent(
            phase,
            pending_approvals=pending_approvals,
            pending_questions=pending_questions,
            granted=granted,
            finish_reason=finish_reason,
        )
        self._telling.append(asyncio.create_task(told))

    async def reported(self) -> None:
        """Every report scheduled so far has reached the parent (before the run ends or
        continues as new)."""
        while self._telling:
            await self._telling.pop(0)

    async def tell_parent(
        self,
        phase: Phase,
        *,
        pending_approvals: list[ToolCall],
        pending_questions: list[PendingQuestion],
        granted: int,
        finish_reason: FinishReason | None = None,
    ) -> None:
        """Tell the parent where this sub-agent stands (`sub_agent_report`); at its end, with
        its decisions for the parent's audit."""
        parent = self.parent
        if parent is None:
            return
        self._told = phase
        report = self._report(
            parent, phase, pending_approvals, pending_questions, granted, finish_reason
        )
        handle = workflow.get_external_workflow_handle(parent.workflow_id)
        try:
            await handle.signal(
                names.SIGNAL_SUB_AGENT_REPORT, report.model_dump(mode="json", exclude_none=True)
            )
        except Exception as err:  # the parent has ended: nobody to tell
            workflow.logger.info("parent %s not told: %s", parent.workflow_id, err)

    def with_final_report(self, result: AgentRunResult, *, granted: int) -> AgentRunResult:
        """A sub-agent's result carries its last report (its decisions, the tokens granted it):
        the parent takes it with the result, so the end needs no signal and no wait for one."""
        parent = self.parent
        if parent is None:
            return result
        report = self._report(parent, "finished", [], [], granted, result.finish_reason)
        return result.model_copy(update={"sub_agent_report": report})

    def _report(
        self,
        parent: SubAgentOf,
        phase: Phase,
        pending_approvals: list[ToolCall],
        pending_questions: list[PendingQuestion],
        granted: int,
        finish_reason: FinishReason | None,
    ) -> SubAgentReport:
        ending = phase == "finished"
        return SubAgentReport(
            call_id=parent.call_id,
            workflow_id=self._ctx.workflow_id,
            phase=phase,
            pending_approvals=[bounds.event_call(c) for c in pending_approvals],
            pending_questions=pending_questions,
            usage=self._state.usage,
            granted=granted,
            finish_reason=finish_reason,
            audit=list(self._state.audit) if ending else [],
        )


def not_a_sub_agent(parent: SubAgentOf | None, info: workflow.Info) -> str | None:
    """Why a run's `options.parent` is refused, or None: only a run Temporal started as that
    parent's child, under the id its `delegate` call gives, is its sub-agent."""
    if parent is None:
        return None
    real = info.parent
    if (
        real is None
        or real.workflow_id != parent.workflow_id
        or info.workflow_id != child_id(parent.workflow_id, parent.call_id)
    ):
        return (
            "Invalid AgentRunInput: options.parent is set only by a run for the sub-agent its"
            " `delegate` call starts"
        )
    return None


def _question_call(question: PendingQuestion) -> ToolCall:
    """A waiting question as the call that asked it (what `sub_agent_waiting` names)."""
    arguments = {"question": question.question}
    if question.options is not None:
        arguments["options"] = question.options  # type: ignore[assignment]
    return ToolCall(id=question.call_id, name="ask_user", arguments=arguments)
