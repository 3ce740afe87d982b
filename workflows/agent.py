"""AgentWorkflow: the durable tool-calling loop with approval, resume and cancellation.

One iteration, in priority order: cancel > apply answers (resume) > max rounds > call the model.
The workflow never does I/O: every model call and every tool execution is an activity. Its state
is one object (`AgentState`), handed to the next generation as it is at continue-as-new; the
rules it follows are plain functions and small classes beside it (`approvals`, `reconstruction`,
`bounds`, `inputs`), and so are the inbox (`inbox`) and the live stream (`live_stream`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from workflows import bounds, names
    from workflows.approvals import Approvals
    from workflows.conversation import call_ids, pending_calls, unique_call_ids
    from workflows.event_log import EventLog, preview
    from workflows.inbox import Inbox, describe_waiting
    from workflows.inputs import (
        Parsed,
        parse_approval,
        parse_approval_policy,
        parse_cancel,
        parse_user_message,
    )
    from workflows.intake import decode
    from workflows.live_stream import STREAM_PUBLISH_SIGNAL, LiveStream
    from workflows.model import (
        AgentEvent,
        AgentRunInput,
        AgentRunResult,
        AgentState,
        AgentStatus,
        ApprovalEvent,
        ApprovalRecord,
        ApprovalSource,
        ApprovalWait,
        AwaitingApprovalEvent,
        BaseEvent,
        ChatMessage,
        ErrorEvent,
        FinishedEvent,
        FinishReason,
        LlmRequest,
        LlmResponse,
        Phase,
        SessionWait,
        TextDeltaEvent,
        ToolApprovalResponse,
        ToolCall,
        ToolCallEvent,
        ToolRequest,
        ToolResultEvent,
        ToolSpec,
        WarningEvent,
    )
    from workflows.policy import edited_call, remember, remembered_rule, with_call
    from workflows.reconstruction import Execute, Respond, plan_resume
    from workflows.rules import PolicyView, WorkerPolicy
    from workflows.state import initial_state
    from workflows.tool_results import bound_text, envelope_error, framework_error_message

CANCELLED_MESSAGE = "Agent run cancelled"
APPROVAL_TIMED_OUT = "Approval timed out"
INTERRUPTED_TOOL = f"Cancelled: {CANCELLED_MESSAGE}; the tool may not have run"
TOOL_CONTENT_LIMIT = bounds.TOOL_CONTENT_CHARS
MAX_CONVERSATION_BYTES = bounds.MAX_CONVERSATION_BYTES
MAX_GENERATION_BYTES = 3_500_000
"""Continue as new once a generation's history is this big, even before Temporal suggests it."""
HARDENED = "hardened-loop-1"
"""`workflow.patched` id of the loop that renames reused call ids, never asks a person about a
call that cannot run, bounds replies and batches and checks the conversation's size at start.
Runs recorded before it replay without these rules."""
APPROVAL_POLICY = "approval-policy-1"
"""`workflow.patched` id of reading the worker's approval rules (the `worker_policy` activity)
at a run's start. Runs recorded before it replay without the worker's rules."""

HEARTBEAT_TIMEOUT = timedelta(seconds=20)
"""Activities heartbeat every 0.5 s; a worker that dies mid-activity is noticed after this."""

LLM_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=8,
)


def _tool_retry(spec: ToolSpec | None) -> RetryPolicy:
    # A tool that is not safe to retry gets exactly one attempt: an interrupted attempt becomes
    # an error result the model sees, never a second execution.
    safe = spec.safe_to_retry if spec is not None else False
    return RetryPolicy(maximum_attempts=3 if safe else 1, initial_interval=timedelta(seconds=1))


def _failure_detail(err: ActivityError) -> str:
    """What went wrong in a failed activity, in the words of the error it raised."""
    cause = err.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause or err)


def _too_large(size: int, reply: int | None = None) -> str:
    what = (
        f"the model's reply of {reply} bytes brings it to {size} bytes"
        if reply
        else f"{size} bytes"
    )
    return (
        f"Conversation too large: {what}, more than {MAX_CONVERSATION_BYTES};"
        " start a new run with a shorter history"
    )


def _cancellation_of(err: BaseException) -> bool:
    return isinstance(err, asyncio.CancelledError) or (
        isinstance(err, ActivityError) and isinstance(err.cause, CancelledError)
    )


@workflow.defn(name=names.WORKFLOW_TYPE)
class AgentWorkflow:
    @workflow.init
    def __init__(self, input: AgentRunInput) -> None:
        self._state: AgentState = initial_state(input)
        self._hardened = workflow.patched(HARDENED)
        self._reads_worker_policy = workflow.patched(APPROVAL_POLICY)
        self._log = EventLog(self._state)
        self._approvals = Approvals(self._state, hardened=self._hardened)
        self._inbox = Inbox()
        # Bookkeeping of this generation only (never carried):
        self._phase: Phase = "running"
        self._finish_reason: FinishReason | None = None
        self._error: str | None = None
        self._inflight: dict[str, workflow.ActivityHandle[Any]] = {}
        self._batch: list[ToolCall] = []
        self._batch_results: dict[str, str] = {}
        self._sized_count = 0
        self._sized_bytes = 0
        self._live = LiveStream(self._state.stream, self._warn)

    # ------------------------------------------------------------------ run

    @workflow.run
    async def run(self, input: AgentRunInput) -> AgentRunResult:
        try:
            result = await self._prepare() or await self._loop()
            await self._live.close()
            return result
        except BaseException as err:
            if not _cancellation_of(err) or self._finish_reason is not None:
                raise
            # Temporal's own cancellation (`temporal workflow cancel`): end as a cancel signal
            # does, then let the execution close as Canceled.
            self._close_interrupted_batch()
            self._finish("cancelled", CANCELLED_MESSAGE)
            await self._live.close()
            raise

    async def _prepare(self) -> AgentRunResult | None:
        """Read what a run needs once (the worker's tools and rules; carried afterwards) and, in
        the first generation, check the input. A result when the run ends right there."""
        state = self._state
        if state.tool_specs is None:
            specs = await workflow.execute_activity(
                names.ACTIVITY_LIST_TOOLS,
                result_type=list[ToolSpec],
                start_to_close_timeout=timedelta(seconds=30),
                summary="list the worker's tools",
            )
            self._approvals.know_tools(specs)
        if self._reads_worker_policy and state.worker_policy is None:
            state.worker_policy = await workflow.execute_activity(
                names.ACTIVITY_WORKER_POLICY,
                result_type=WorkerPolicy,
                start_to_close_timeout=timedelta(seconds=30),
                summary="read the worker's approval rules",
            )
        if state.generation > 0:
            return None
        self._warn_unknown_options()
        size = self._conversation_bytes()
        if self._hardened and size > MAX_CONVERSATION_BYTES:
            return self._finish("error", _too_large(size))
        self._apply_seed_responses()
        return None

    async def _loop(self) -> AgentRunResult:
        state = self._state
        while True:
            # 1. Cancel requested: nothing else runs.
            if state.cancel is not None:
                return self._finish("cancelled", CANCELLED_MESSAGE)
            if self._should_continue_as_new():
                await self._continue_as_new()
            # A session between turns (`keep_alive`): wait for the next message.
            if state.session_wait is not None:
                if not await self._wait_for_message(state.session_wait):
                    return self._finish("stop")
                continue  # a message (a new turn), a cancel, or continue-as-new
            # 2. Answers to apply (or a batch that needs none): resume from the messages.
            pending = pending_calls(state.messages)
            if pending:
                if state.seed_mode or not self._approvals.unanswered(pending):
                    await self._resume(pending)
                    state.round += 1
                    continue
                timed_out = await self._wait_for_answers(pending)
                if timed_out and state.options.on_approval_timeout == "cancel":
                    return self._finish("cancelled", APPROVAL_TIMED_OUT)
                continue
            self._flush_held_messages()
            # 3. Round limit.
            if state.round >= state.options.max_rounds:
                return self._finish("max_rounds")
            # 4. Call the model.
            response = await self._call_llm()
            if response is None:
                if self._finish_reason is not None:
                    return self._result()
                continue  # cancelled in flight: the next iteration ends the run
            if state.cancel is not None or state.messages[-1].tool_calls:
                continue  # the next iteration ends the run, runs the calls or waits for approval
            if state.held_messages:
                continue  # a message arrived while the model was answering: answer it too
            if not state.options.keep_alive:
                return self._finish("stop")
            idle = state.options.idle_timeout_seconds
            state.session_wait = SessionWait(
                idle_deadline=None if idle is None else workflow.now() + timedelta(seconds=idle)
            )

    # ------------------------------------------------------------ the model

    async def _call_llm(self) -> LlmResponse | None:
        state = self._state
        size = self._conversation_bytes()
        if size > MAX_CONVERSATION_BYTES:
            self._finish("error", _too_large(size))
            return None
        self._set_phase("running", f"round {state.round}: waiting for the model")
        info = workflow.info()
        request = LlmRequest(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            message_count=len(state.messages),
            round=state.round,
            tools=self._approvals.allowed_tools(),
            model=state.options.model,
            temperature=state.options.temperature,
            max_tokens=state.options.max_tokens,
        )
        handle = workflow.start_activity(
            names.ACTIVITY_CALL_LLM,
            request,
            result_type=LlmResponse,
            start_to_close_timeout=timedelta(minutes=10),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=LLM_RETRY,
            summary=f"llm round {state.round}",
        )
        self._inflight["llm"] = handle
        try:
            response: LlmResponse = await handle
        except ActivityError as err:
            if _cancellation_of(err):
                if state.cancel is None:
                    raise  # Temporal's own cancellation: run() ends the run as cancelled
                return None
            self._finish("error", f"LLM call failed: {_failure_detail(err)}")
            return None
        finally:
            self._inflight.pop("llm", None)
        state.usage = state.usage + response.usage
        message = self._assistant_message(response)
        if message.content:
            self._emit(TextDeltaEvent(delta=preview(message.content)))
        if self._hardened:
            added = bounds.json_bytes(message)
            if size + added > MAX_CONVERSATION_BYTES:
                self._finish("error", _too_large(size + added, reply=added))
                return None
        state.messages.append(message)
        calls = message.tool_calls or []
        verdicts = {call.id: self._approvals.verdict(call) for call in calls}
        state.asked.extend(
            c.id
            for c in calls
            if (v := verdicts[c.id]) and v.decision == "ask" and v.rule is not None
        )
        for call in calls:
            verdict = verdicts[call.id]
            self._emit(
                ToolCallEvent(
                    call_id=call.id,
                    name=call.name,
                    arguments=bounds.event_arguments(call.arguments),
                    requires_approval=verdict is not None and verdict.decision == "ask",
                )
            )
        for call in calls:
            self._decide_by_rule(call, verdicts[call.id])
        if response.finish_reason == "length":
            self._warn(
                "the model stopped at its token limit (finish_reason 'length'): its reply may be"
                " cut off; a call whose arguments were cut off is answered as invalid"
                " without asking anyone"
            )
        return response

    def _assistant_message(self, response: LlmResponse) -> ChatMessage:
        """The reply as the conversation keeps it: every call with an id no other call of the
        run has (renamed deterministically), so an answer is for one call only."""
        calls = response.message.tool_calls or []
        prefix = f"call_r{self._state.round}"
        if self._hardened:
            taken = call_ids(self._state.messages)
            calls = unique_call_ids(calls, prefix, taken, bounds.MAX_CALL_ID_CHARS)
        else:
            calls = unique_call_ids(calls, prefix)
        return ChatMessage.assistant(response.message.content, calls)

    # -------------------------------------------------------------- tools

    async def _resume(self, pending: list[ToolCall]) -> None:
        """Run the approved and unguarded calls in parallel, answer the rest, in call order."""
        state = self._state
        self._set_phase("running", f"round {state.round}: running {len(pending)} tool call(s)")
        allowed = set(self._approvals.allowed_tools())
        steps = plan_resume(
            pending,
            state.answers,
            self._approvals.requires_approval,
            allowed.__contains__,
            max_runs=bounds.MAX_CALLS_PER_REPLY if self._hardened else None,
            max_argument_chars=bounds.MAX_ARGUMENT_CHARS if self._hardened else None,
        )
        self._batch, self._batch_results = pending, {}
        for step in steps:
            if isinstance(step, Respond):
                self._batch_results[step.call.id] = step.content
        executions = [s for s in steps if isinstance(s, Execute)]
        if self._hardened:
            slots = asyncio.Semaphore(bounds.MAX_PARALLEL_TOOLS)

            async def bounded(step: Execute) -> None:
                async with slots:
                    await self._execute(step)

            await asyncio.gather(*(bounded(s) for s in executions))
        else:
            await asyncio.gather(*(self._execute(s) for s in executions))
        self._append_batch()
        state.answers.clear()
        state.seed_mode = False
        state.approval_wait = None
        self._flush_held_messages()

    async def _execute(self, step: Execute) -> None:
        call = step.call
        spec = self._approvals.spec(call.name)
        info = workflow.info()
        handle = workflow.start_activity(
            names.ACTIVITY_EXECUTE_TOOL,
            ToolRequest(
                workflow_id=info.workflow_id,
                call_id=call.id,
                name=call.name,
                arguments=step.arguments,
                run_key=info.first_execution_run_id,
            ),
            result_type=str,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=_tool_retry(spec),
            summary=f"tool {call.name} {call.id}",
        )
        self._inflight[f"tool:{call.id}"] = handle
        try:
            content = await handle
        except ActivityError as err:
            if _cancellation_of(err):
                if self._state.cancel is None:
                    raise  # Temporal's own cancellation: run() ends the run as cancelled
                return  # _append_batch answers it as cancelled
            detail = _failure_detail(err)
            if spec is not None and not spec.safe_to_retry:
                detail += (
                    "; this tool is not safe to retry, so it was not run again"
                    " (it may or may not have taken effect)"
                )
            content = framework_error_message(f"tool execution failed: {detail}")
        finally:
            self._inflight.pop(f"tool:{call.id}", None)
        self._batch_results[call.id] = content

    def _append_batch(self) -> None:
        results = [self._batch_results.get(call.id) for call in self._batch]
        contents = [
            bound_text(envelope_error(INTERRUPTED_TOOL) if r is None else r, TOOL_CONTENT_LIMIT)
            for r in results
        ]
        if self._hardened:
            # The whole batch is appended at once (the ordering invariant): cut it to what the
            # conversation budget leaves, so no later payload outgrows Temporal's limit.
            room = MAX_CONVERSATION_BYTES - self._conversation_bytes() - 200 * len(contents)
            contents = bounds.fit_batch(contents, max(0, room) // 2)
        for call, content in zip(self._batch, contents, strict=True):
            self._state.messages.append(ChatMessage.tool(call, content))
            self._emit(ToolResultEvent(call_id=call.id, name=call.name, content=preview(content)))
        self._batch, self._batch_results = [], {}

    def _close_interrupted_batch(self) -> None:
        """On a cancel that interrupted tools: answer every call of the batch, so the invariant
        holds (finished ones with their result, the others as cancelled)."""
        if self._batch:
            self._append_batch()

    # ------------------------------------------------------------ waiting

    async def _wait_for_answers(self, pending: list[ToolCall]) -> bool:
        """Wait durably until every pending call is answered, or cancel, or the timeout.

        Returns True when the approval timeout fired.
        """
        state = self._state
        waiting = self._approvals.unanswered(pending)
        if state.approval_wait is None:
            self._emit(AwaitingApprovalEvent(pending=[bounds.event_call(c) for c in waiting]))
            seconds = state.options.approval_timeout_seconds
            now = workflow.now()
            state.approval_wait = ApprovalWait(
                since=now, deadline=None if seconds is None else now + timedelta(seconds=seconds)
            )
        self._set_phase("awaiting_approval", describe_waiting(state.round, waiting))
        deadline = state.approval_wait.deadline
        timeout: float | None = None
        if deadline is not None:
            timeout = max(0.0, (deadline - workflow.now()).total_seconds())
        try:
            await workflow.wait_condition(
                lambda: (
                    state.cancel is not None
                    or not self._approvals.unanswered(pending)
                    or self._should_continue_as_new()
                ),
                timeout=timeout,
                timeout_summary="approval timeout",
            )
        except TimeoutError:
            if state.options.on_approval_timeout == "reject":
                for call in self._approvals.unanswered(pending):
                    self._record_answer(
                        ToolApprovalResponse(
                            call_id=call.id, approved=False, reason=APPROVAL_TIMED_OUT
                        ),
                        source="timeout",
                    )
            return True
        return False

    async def _wait_for_message(self, wait: SessionWait) -> bool:
        """A session between turns, durably, across continue-as-new (the idle deadline is
        carried). Returns False when the idle timeout ended it; a message starts a new turn."""
        state = self._state
        self._set_phase("waiting_for_message", "waiting for the next message")
        timeout: float | None = None
        if wait.idle_deadline is not None:
            timeout = max(0.0, (wait.idle_deadline - workflow.now()).total_seconds())
        try:
            await workflow.wait_condition(
                lambda: (
                    bool(state.held_messages)
                    or state.cancel is not None
                    or self._should_continue_as_new()
                ),
                timeout=timeout,
                timeout_summary="session idle timeout",
            )
        except TimeoutError:
            return False
        if state.held_messages:
            state.session_wait = None
            state.round = 0
        return True

    # ----------------------------------------------------------- handlers

    @workflow.signal(dynamic=True)
    def on_signal(self, name: str, args: Sequence[RawValue]) -> None:
        """All signals come in raw, so a payload that does not decode or validate becomes a
        `warning` event instead of being dropped by the SDK with only a log line."""
        handlers: dict[str, Callable[[object], None]] = {
            names.SIGNAL_TOOL_APPROVAL: self._on_tool_approval,
            names.SIGNAL_CANCEL: self._on_cancel,
            names.SIGNAL_SEND_MESSAGE: self._on_send_message,
        }
        handler = handlers.get(name)
        if handler is None:
            self._warn(f"unknown signal '{bounds.shown(name)}' ignored")
            return
        payload, error = decode(args, optional=name == names.SIGNAL_CANCEL)
        if error is not None:
            self._warn(f"{name}: {error}; signal ignored")
            return
        handler(payload)

    def _on_tool_approval(self, payload: object) -> None:
        response = self._accept(names.SIGNAL_TOOL_APPROVAL, parse_approval(payload))
        if response is None:
            return
        problem = self._approvals.problem(response.call_id, finished=self._finished)
        if problem is not None:
            self._warn(f"tool_approval: {problem}; ignored")
            return
        self._record_answer(response)

    def _on_cancel(self, payload: object) -> None:
        request = self._accept(names.SIGNAL_CANCEL, parse_cancel(payload))
        if request is None or self._finished:
            return
        current = self._state.cancel
        if current is not None and (current.immediate or not request.immediate):
            return  # cancel twice: harmless (only an upgrade to immediate changes anything)
        self._state.cancel = request
        if request.immediate:
            for handle in list(self._inflight.values()):
                handle.cancel()

    def _on_send_message(self, payload: object) -> None:
        message = self._accept(names.SIGNAL_SEND_MESSAGE, parse_user_message(payload))
        if message is None:
            return
        if self._finished:
            self._warn("send_message: the run has finished; message ignored")
            return
        held = self._state.held_messages
        size = self._conversation_bytes() + sum(bounds.json_bytes(m) for m in held)
        added = bounds.json_bytes(message)
        if size + added > MAX_CONVERSATION_BYTES:
            self._warn(
                f"send_message: a message of {added} bytes would bring the conversation to"
                f" {size + added} bytes, more than {MAX_CONVERSATION_BYTES}; message ignored"
            )
            return
        held.append(message)

    @workflow.signal(name=STREAM_PUBLISH_SIGNAL)
    def _stream_publish(self, payload: RawValue) -> None:
        """A publish to the live stream: see `LiveStream.on_publish` (declared on the class so a
        publish in a run's first activation is decoded for this handler)."""
        self._live.on_publish(payload)

    @workflow.update(name=names.UPDATE_SUBMIT_APPROVAL)
    def submit_approval(self, payload: RawValue) -> list[ToolCall]:
        response = self._validated_approval(payload)
        self._record_answer(response)
        return self._approvals.waiting()

    @submit_approval.validator
    def _validate_submit_approval(self, payload: RawValue) -> None:
        self._validated_approval(payload)

    def _validated_approval(self, payload: RawValue) -> ToolApprovalResponse:
        value, error = decode([payload], optional=False)
        if error is not None:
            raise ApplicationError(error, type="InvalidApproval", non_retryable=True)
        parsed = parse_approval(value)
        if parsed.value is None:
            raise ApplicationError(str(parsed.error), type="InvalidApproval", non_retryable=True)
        problem = self._approvals.problem(parsed.value.call_id, finished=self._finished)
        if problem is not None:
            raise ApplicationError(problem, type="InvalidApproval", non_retryable=True)
        return parsed.value

    @workflow.update(name=names.UPDATE_SET_APPROVAL_POLICY)
    def set_approval_policy(self, payload: RawValue) -> PolicyView:
        """Replace the run's rules (remembered ones included); calls waiting for a person that
        the new rules decide are decided at once. Returns the effective rules."""
        self._state.run_rules = list(self._validated_policy(payload))
        self._decide_waiting_by_rules()
        return self._approvals.view()

    @set_approval_policy.validator
    def _validate_set_approval_policy(self, payload: RawValue) -> None:
        self._validated_policy(payload)

    def _validated_policy(self, payload: RawValue) -> list[Any]:
        if self._finished:
            raise ApplicationError(
                "the run has finished", type="InvalidApprovalPolicy", non_retryable=True
            )
        value, error = decode([payload], optional=False)
        parsed = parse_approval_policy(value) if error is None else None
        if parsed is None or parsed.value is None:
            why = str(error) if parsed is None else str(parsed.error)
            raise ApplicationError(why, type="InvalidApprovalPolicy", non_retryable=True)
        return list(parsed.value.rules)

    @workflow.query(name=names.QUERY_POLICY)
    def policy(self) -> PolicyView:
        return self._approvals.view()

    @workflow.query(name=names.QUERY_STATUS)
    def status(self) -> AgentStatus:
        state = self._state
        awaiting = self._phase == "awaiting_approval" and state.approval_wait is not None
        return AgentStatus(
            phase=self._phase,
            round=state.round,
            pending_approvals=[] if self._finished else self._approvals.waiting(),
            finish_reason=self._finish_reason,
            cancel_requested=state.cancel is not None,
            awaiting_since=state.approval_wait.since if awaiting and state.approval_wait else None,
            decided=[] if self._finished else list(state.answers.values()),
        )

    @workflow.query(name=names.QUERY_EVENTS)
    def events(self, after: int = -1) -> list[AgentEvent]:
        return self._log.after(after)

    @workflow.query(name=names.QUERY_MESSAGES)
    def messages(self) -> list[ChatMessage]:
        return self._state.messages

    # ------------------------------------------------------------ helpers

    @property
    def _finished(self) -> bool:
        return self._phase == "finished"

    def _accept(self, signal: str, parsed: Parsed[Any]) -> Any:
        if parsed.error is not None or parsed.value is None:
            self._warn(f"{signal}: {parsed.error}; ignored")
            return None
        if parsed.note:
            self._warn(f"{signal}: {parsed.note}")
        return parsed.value

    def _record_answer(
        self,
        response: ToolApprovalResponse,
        *,
        source: ApprovalSource = "person",
        rule: int | None = None,
    ) -> None:
        state = self._state
        record = ApprovalRecord(
            call_id=response.call_id,
            approved=response.approved,
            reason=response.reason,
            approver=response.approver,
            at=workflow.now(),
            source=source,
            rule=rule,
        )
        state.answers[response.call_id] = record
        edit = self._apply_edit(response)
        self._emit(
            ApprovalEvent(
                **record.model_dump(),
                arguments=None if edit is None else bounds.event_arguments(edit[0]),
                original_arguments=None if edit is None else bounds.event_arguments(edit[1]),
            )
        )
        if response.remember:
            call = self._pending_call(response.call_id)
            if call is not None:
                state.run_rules = remember(state.run_rules, remembered_rule(call.name, response))
                self._decide_waiting_by_rules()
        if self._phase == "awaiting_approval":
            waiting = self._approvals.waiting()
            self._set_phase("awaiting_approval", describe_waiting(state.round, waiting))

    def _apply_edit(self, response: ToolApprovalResponse) -> tuple[Any, Any] | None:
        """Edited arguments: the assistant message's call becomes the call that runs, so the
        conversation says what happened. Returns (arguments, original arguments)."""
        call = self._pending_call(response.call_id)
        if response.arguments is None or not response.approved or call is None:
            return None
        edit = edited_call(call, response.arguments)
        self._state.messages[:] = with_call(self._state.messages, edit.call)
        self._sized_count = self._sized_bytes = 0  # a message changed: measure again
        self._approvals.forget(call.id)
        return edit.call.arguments, edit.original_arguments

    def _pending_call(self, call_id: str) -> ToolCall | None:
        return next((c for c in pending_calls(self._state.messages) if c.id == call_id), None)

    def _decide_by_rule(self, call: ToolCall, verdict: Any) -> None:
        """A rule's `allow` or `deny` is an answer like a person's (source `policy`)."""
        if verdict is None or verdict.rule is None or verdict.decision == "ask":
            return
        approved = verdict.decision == "allow"
        self._record_answer(
            ToolApprovalResponse(
                call_id=call.id, approved=approved, reason=None if approved else verdict.reason
            ),
            source="policy",
            rule=verdict.rule,
        )

    def _decide_waiting_by_rules(self) -> None:
        """After the rules changed: the calls waiting for a person that they decide now."""
        for call in self._approvals.waiting():
            self._decide_by_rule(call, self._approvals.verdict(call))

    def _apply_seed_responses(self) -> None:
        """Answers given at start (`tool_approval_responses`) apply at the first iteration; a
        call that needs approval and has no answer is then denied."""
        responses = self._state.options.tool_approval_responses
        if not responses:
            return
        for response in responses:
            problem = self._approvals.problem(response.call_id, finished=self._finished)
            if problem is not None:
                self._warn(f"tool_approval_responses: {problem}; ignored")
                continue
            self._record_answer(response)
        self._state.seed_mode = bool(pending_calls(self._state.messages))

    def _warn_unknown_options(self) -> None:
        for key in sorted(self._state.options.model_extra or {}):
            self._warn(f"unknown option '{key}' ignored")

    def _flush_held_messages(self) -> None:
        state = self._state
        if state.held_messages and not pending_calls(state.messages):
            state.messages.extend(state.held_messages)
            state.held_messages = []

    def _emit(self, event: BaseEvent) -> None:
        self._live.publish(self._log.emit(event))  # type: ignore[arg-type]

    def _warn(self, message: str) -> None:
        message = preview(message)
        workflow.logger.warning(message)
        self._emit(WarningEvent(message=message))

    def _set_phase(self, phase: Phase, details: str) -> None:
        self._phase = phase
        pending = len(self._approvals.waiting()) if phase == "awaiting_approval" else 0
        self._inbox.show(phase, details, pending)

    def _conversation_bytes(self) -> int:
        """The JSON size of the messages, measured once per message (they are append-only)."""
        messages = self._state.messages
        for message in messages[self._sized_count :]:
            self._sized_bytes += bounds.json_bytes(message)
        self._sized_count = len(messages)
        return self._sized_bytes

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        if info.is_continue_as_new_suggested():
            return True
        if info.get_current_history_size() >= MAX_GENERATION_BYTES:
            return True
        cap = self._state.options.max_history_events
        return cap is not None and info.get_current_history_length() >= cap

    async def _continue_as_new(self) -> None:
        """Hand the state to the next generation as it is (live followers follow on to it)."""
        await self._live.close()
        state = self._state
        handed = state.model_copy(
            update={
                "generation": state.generation + 1,
                "events": self._log.carry(),
                "stream": self._live.carried(),
                "options": state.options.model_copy(update={"tool_approval_responses": []}),
            }
        )
        workflow.continue_as_new(AgentRunInput(messages=[], options=handed.options, state=handed))

    def _finish(self, reason: FinishReason, error: str | None = None) -> AgentRunResult:
        if error is not None:
            error = preview(error)
            self._emit(ErrorEvent(message=error))
        self._emit(FinishedEvent(finish_reason=reason))
        self._finish_reason = reason
        self._error = error
        self._set_phase("finished", f"finished: {reason}" + (f" ({error})" if error else ""))
        return self._result()

    def _result(self) -> AgentRunResult:
        assert self._finish_reason is not None
        messages = self._state.messages
        if self._hardened:
            # A safety net: the conversation bound keeps the result far below this already.
            messages, _ = bounds.fit_messages(messages, bounds.RESULT_BUDGET_BYTES)
        return AgentRunResult(
            messages=messages,
            finish_reason=self._finish_reason,
            rounds=self._state.round,
            error=self._error,
            usage=self._state.usage,
        )
