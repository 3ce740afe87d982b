"""AgentWorkflow: the durable tool-calling loop with approval, resume and cancellation (SPEC §3–§6).

One iteration, in priority order: cancel > apply answers (resume) > max rounds > call the model.
The workflow never does I/O: every model call and every tool execution is an activity.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue, RetryPolicy
from temporalio.contrib.workflow_streams import (
    PollInput,
    PollResult,
    PublishEntry,
    PublishInput,
    WorkflowStream,
    WorkflowStreamState,
)
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from workflows import bounds, names
    from workflows.event_log import EventLog, preview
    from workflows.inputs import Parsed, parse_approval, parse_cancel, parse_user_message
    from workflows.model import (
        AgentEvent,
        AgentRunInput,
        AgentRunOptions,
        AgentRunResult,
        AgentStatus,
        ApprovalEvent,
        ApprovalRecord,
        AwaitingApprovalEvent,
        CancelRequest,
        CarriedState,
        ChatMessage,
        ErrorEvent,
        FinishedEvent,
        FinishReason,
        LlmRequest,
        LlmResponse,
        Phase,
        StreamDelta,
        TextDeltaEvent,
        ToolApprovalResponse,
        ToolCall,
        ToolCallEvent,
        ToolRequest,
        ToolResultEvent,
        ToolSpec,
        Usage,
        WarningEvent,
    )
    from workflows.reconstruction import (
        Execute,
        Respond,
        answered_ids,
        bound_text,
        call_ids,
        envelope_error,
        framework_error_message,
        pending_calls,
        plan_resume,
        runnable,
        unique_call_ids,
    )

CANCELLED_MESSAGE = "Agent run cancelled"
APPROVAL_TIMED_OUT = "Approval timed out"
INTERRUPTED_TOOL = f"Cancelled: {CANCELLED_MESSAGE}; the tool may not have run"
TOOL_CONTENT_LIMIT = 16_000
"""A tool message carries at most this many characters (the tools bound their output too)."""
MAX_CONVERSATION_BYTES = bounds.MAX_CONVERSATION_BYTES
MAX_GENERATION_BYTES = 3_500_000
"""Continue as new once a generation's history is this big, even before Temporal suggests it."""
STREAM_CARRIED_ITEMS = 2_000
STREAM_CARRIED_BYTES = 128_000
"""A new generation keeps at most this tail of the live stream (items, encoded bytes)."""
STREAM_PUBLISH_SIGNAL = "__temporal_workflow_stream_publish"
STREAM_POLL_UPDATE = "__temporal_workflow_stream_poll"
MAX_STREAM_POLLERS = 5
"""Live followers may hold at most this many of the stream's long-poll updates at once. Temporal
admits 10 in-flight updates per run; the rest stay free for answers (`submit_approval`). A
follower refused here reads the stream through its poll query instead."""
STREAM_POLLERS_BUSY = "StreamPollersBusy"
MAX_STREAM_ITEM_BYTES = 64_000
"""A stream item published from outside (the model's live text) larger than this is dropped."""
HARDENED = "hardened-loop-1"
"""`workflow.patched` id of the loop that renames reused call ids, never asks a person about a
call that cannot run, bounds replies and batches and checks the conversation's size at start.
Runs recorded before it replay without these rules."""

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


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    first = text.splitlines()[0] if text else ""
    return bounds.shown(f"{type(err).__name__}: {first}" if first else type(err).__name__, 300)


def _pollers_busy() -> ApplicationError:
    return ApplicationError(
        f"{MAX_STREAM_POLLERS} live followers already wait on this run's stream;"
        " read it with the stream's poll query",
        type=STREAM_POLLERS_BUSY,
        non_retryable=True,
    )


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
        self._messages: list[ChatMessage] = list(input.messages)
        self._sized_count = 0
        self._sized_bytes = 0
        self._options: AgentRunOptions = input.options
        carried = input.continued
        self._round = carried.round if carried else 0
        self._generation = carried.generation if carried else 0
        self._log = EventLog(carried.events, carried.next_seq) if carried else EventLog()
        self._answers: dict[str, ApprovalRecord] = dict(carried.answers) if carried else {}
        self._awaiting_announced = carried.awaiting_announced if carried else False
        self._approval_deadline = carried.approval_deadline if carried else None
        self._awaiting_since = carried.awaiting_since if carried else None
        self._between_turns = carried.between_turns if carried else False
        self._idle_deadline = carried.idle_deadline if carried else None
        self._cancel: CancelRequest | None = carried.cancel if carried else None
        self._held: list[ChatMessage] = list(carried.held_messages) if carried else []
        self._usage = carried.usage if carried else Usage()
        self._specs: dict[str, ToolSpec] | None = (
            {s.name: s for s in carried.tool_specs} if carried and carried.tool_specs else None
        )
        self._seed_mode = carried.seed_mode if carried else False
        self._seed_responses_applied = carried.seed_responses_applied if carried else False
        self._phase: Phase = "running"
        self._finish_reason: FinishReason | None = None
        self._error: str | None = None
        self._inflight: dict[str, workflow.ActivityHandle[Any]] = {}
        self._batch_results: dict[str, str] = {}
        self._batch: list[ToolCall] = []
        self._published: tuple[str, int] | None = None
        self._hardened = workflow.patched(HARDENED)
        self._runnable: dict[str, bool] = {}
        """Whether each call could run at all (derived from the call and the tool specs)."""
        self._polls_in_flight = 0
        # The live view (temporalio.contrib.workflow_streams): every emitted event on the
        # `events` topic; `call_llm` publishes the model's text on `deltas`.
        # The class declares the stream's publish signal too (see `_stream_publish`); the stream
        # insists on registering it itself, so hand the name over to it here.
        workflow.set_signal_handler(STREAM_PUBLISH_SIGNAL, None)
        self._stream = WorkflowStream(prior_state=carried.stream if carried else None)
        self._events_topic = self._stream.topic(names.STREAM_EVENTS)
        # Live followers share the update slots with the answers: bound how many they hold.
        workflow.set_update_handler(
            STREAM_POLL_UPDATE, self._stream_poll, validator=self._validate_stream_poll
        )
        # ...and check what outsiders publish before the stream keeps it.
        workflow.set_signal_handler(STREAM_PUBLISH_SIGNAL, self._stream_publish)

    # ------------------------------------------------------------------ run

    @workflow.run
    async def run(self, input: AgentRunInput) -> AgentRunResult:
        try:
            if self._specs is None:
                specs = await workflow.execute_activity(
                    names.ACTIVITY_LIST_TOOLS,
                    result_type=list[ToolSpec],
                    start_to_close_timeout=timedelta(seconds=30),
                    summary="list the worker's tools",
                )
                self._specs = {s.name: s for s in specs}
            if input.continued is None:
                self._warn_unknown_options()
                size = self._conversation_bytes()
                if self._hardened and size > MAX_CONVERSATION_BYTES:
                    result = self._finish("error", _too_large(size))
                    await self._close_stream()
                    return result
                self._apply_seed_responses()
            result = await self._loop()
            await self._close_stream()
            return result
        except BaseException as err:
            if not _cancellation_of(err) or self._finish_reason is not None:
                raise
            # Temporal's own cancellation (`temporal workflow cancel`): end as SPEC §4.1, then
            # let the execution close as Canceled.
            self._close_interrupted_batch()
            self._finish("cancelled", CANCELLED_MESSAGE)
            await self._close_stream()
            raise

    async def _loop(self) -> AgentRunResult:
        while True:
            # 1. Cancel requested: nothing else runs.
            if self._cancel is not None:
                return self._finish("cancelled", CANCELLED_MESSAGE)
            if self._should_continue_as_new():
                self._stream.detach_pollers()  # live subscribers follow on to the next run
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._continue_as_new()
            # A session between turns (`keep_alive`): wait for the next message.
            if self._between_turns:
                if not await self._wait_for_message():
                    return self._finish("stop")
                continue  # a message (a new turn), a cancel, or continue-as-new
            # 2. Answers to apply (or a batch that needs none): resume from the messages.
            pending = pending_calls(self._messages)
            if pending:
                if self._seed_mode or not self._unanswered(pending):
                    await self._resume(pending)
                    self._round += 1
                    continue
                timed_out = await self._wait_for_answers(pending)
                if timed_out and self._options.on_approval_timeout == "cancel":
                    return self._finish("cancelled", APPROVAL_TIMED_OUT)
                continue
            self._flush_held_messages()
            # 3. Round limit.
            if self._round >= self._options.max_rounds:
                return self._finish("max_rounds")
            # 4. Call the model.
            response = await self._call_llm()
            if response is None:
                if self._finish_reason is not None:
                    return self._result()
                continue  # cancelled in flight: the next iteration ends the run
            if self._cancel is not None or self._messages[-1].tool_calls:
                continue  # the next iteration ends the run, runs the calls or waits for approval
            if self._held:
                continue  # a message arrived while the model was answering: answer it too
            if not self._options.keep_alive:
                return self._finish("stop")
            self._between_turns = True
            if self._options.idle_timeout_seconds is not None:
                self._idle_deadline = workflow.now() + timedelta(
                    seconds=self._options.idle_timeout_seconds
                )

    # ------------------------------------------------------------ the model

    async def _call_llm(self) -> LlmResponse | None:
        size = self._conversation_bytes()
        if size > MAX_CONVERSATION_BYTES:
            self._finish("error", _too_large(size))
            return None
        self._set_phase("running", f"round {self._round}: waiting for the model")
        info = workflow.info()
        request = LlmRequest(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            message_count=len(self._messages),
            round=self._round,
            tools=self._allowed_tools(),
            model=self._options.model,
            temperature=self._options.temperature,
            max_tokens=self._options.max_tokens,
        )
        handle = workflow.start_activity(
            names.ACTIVITY_CALL_LLM,
            request,
            result_type=LlmResponse,
            start_to_close_timeout=timedelta(minutes=10),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=LLM_RETRY,
            summary=f"llm round {self._round}",
        )
        self._inflight["llm"] = handle
        try:
            response: LlmResponse = await handle
        except ActivityError as err:
            if _cancellation_of(err):
                if self._cancel is None:
                    raise  # Temporal's own cancellation: run() ends the run as cancelled
                return None
            self._finish("error", f"LLM call failed: {_failure_detail(err)}")
            return None
        finally:
            self._inflight.pop("llm", None)
        self._usage = self._usage + response.usage
        message = self._assistant_message(response)
        if message.content:
            self._emit(TextDeltaEvent, delta=preview(message.content))
        if self._hardened:
            added = bounds.json_bytes(message)
            if size + added > MAX_CONVERSATION_BYTES:
                self._finish("error", _too_large(size + added, reply=added))
                return None
        self._messages.append(message)
        for call in message.tool_calls or []:
            self._emit(
                ToolCallEvent,
                call_id=call.id,
                name=call.name,
                arguments=bounds.event_arguments(call.arguments),
                requires_approval=self._requires_approval(call),
            )
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
        prefix = f"call_r{self._round}"
        if self._hardened:
            calls = unique_call_ids(
                calls, prefix, call_ids(self._messages), bounds.MAX_CALL_ID_CHARS
            )
        else:
            calls = unique_call_ids(calls, prefix)
        return ChatMessage.assistant(response.message.content, calls)

    # -------------------------------------------------------------- tools

    async def _resume(self, pending: list[ToolCall]) -> None:
        """Run the approved and unguarded calls in parallel, answer the rest, in call order."""
        self._set_phase("running", f"round {self._round}: running {len(pending)} tool call(s)")
        allowed = set(self._allowed_tools())
        steps = plan_resume(
            pending,
            self._answers,
            self._requires_approval,
            lambda name: name in allowed,
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
        self._answers.clear()
        self._seed_mode = False
        self._awaiting_announced = False
        self._awaiting_since = None
        self._approval_deadline = None
        self._flush_held_messages()

    async def _execute(self, step: Execute) -> None:
        call = step.call
        assert self._specs is not None
        spec = self._specs.get(call.name)
        handle = workflow.start_activity(
            names.ACTIVITY_EXECUTE_TOOL,
            ToolRequest(
                workflow_id=workflow.info().workflow_id,
                call_id=call.id,
                name=call.name,
                arguments=step.arguments,
                run_key=workflow.info().first_execution_run_id,
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
                if self._cancel is None:
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
            self._messages.append(ChatMessage.tool(call, content))
            self._emit(ToolResultEvent, call_id=call.id, name=call.name, content=preview(content))
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
        waiting = self._unanswered(pending)
        if not self._awaiting_announced:
            self._emit(AwaitingApprovalEvent, pending=[bounds.event_call(c) for c in waiting])
            self._awaiting_announced = True
            self._awaiting_since = workflow.now()
            if self._options.approval_timeout_seconds is not None:
                self._approval_deadline = workflow.now() + timedelta(
                    seconds=self._options.approval_timeout_seconds
                )
        self._set_phase("awaiting_approval", self._describe_waiting(waiting))
        timeout: float | None = None
        if self._approval_deadline is not None:
            timeout = max(0.0, (self._approval_deadline - workflow.now()).total_seconds())
        try:
            await workflow.wait_condition(
                lambda: (
                    self._cancel is not None
                    or not self._unanswered(pending)
                    or self._should_continue_as_new()
                ),
                timeout=timeout,
                timeout_summary="approval timeout",
            )
        except TimeoutError:
            if self._options.on_approval_timeout == "reject":
                for call in self._unanswered(pending):
                    self._record_answer(
                        ToolApprovalResponse(
                            call_id=call.id, approved=False, reason=APPROVAL_TIMED_OUT
                        )
                    )
            return True
        return False

    async def _wait_for_message(self) -> bool:
        """A session between turns, durably, across continue-as-new (the idle deadline is
        carried). Returns False when the idle timeout ended it; a message starts a new turn."""
        self._set_phase("waiting_for_message", "waiting for the next message")
        timeout: float | None = None
        if self._idle_deadline is not None:
            timeout = max(0.0, (self._idle_deadline - workflow.now()).total_seconds())
        try:
            await workflow.wait_condition(
                lambda: (
                    bool(self._held) or self._cancel is not None or self._should_continue_as_new()
                ),
                timeout=timeout,
                timeout_summary="session idle timeout",
            )
        except TimeoutError:
            return False
        if self._held:
            self._between_turns = False
            self._idle_deadline = None
            self._round = 0
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
        payload, error = self._decode(args, optional=name == names.SIGNAL_CANCEL)
        if error is not None:
            self._warn(f"{name}: {error}; signal ignored")
            return
        handler(payload)

    def _on_tool_approval(self, payload: object) -> None:
        parsed = parse_approval(payload)
        response = self._accept(names.SIGNAL_TOOL_APPROVAL, parsed)
        if response is None:
            return
        problem = self._answer_problem(response.call_id)
        if problem is not None:
            self._warn(f"tool_approval: {problem}; ignored")
            return
        self._record_answer(response)

    def _on_cancel(self, payload: object) -> None:
        request = self._accept(names.SIGNAL_CANCEL, parse_cancel(payload))
        if request is None:
            return
        if self._phase == "finished":
            return
        if self._cancel is not None:
            if request.immediate and not self._cancel.immediate:
                self._cancel = request
                self._cancel_inflight()
            return
        self._cancel = request
        if request.immediate:
            self._cancel_inflight()

    def _on_send_message(self, payload: object) -> None:
        message = self._accept(names.SIGNAL_SEND_MESSAGE, parse_user_message(payload))
        if message is None:
            return
        if self._phase == "finished":
            self._warn("send_message: the run has finished; message ignored")
            return
        size = self._conversation_bytes() + sum(bounds.json_bytes(m) for m in self._held)
        added = bounds.json_bytes(message)
        if size + added > MAX_CONVERSATION_BYTES:
            self._warn(
                f"send_message: a message of {added} bytes would bring the conversation to"
                f" {size + added} bytes, more than {MAX_CONVERSATION_BYTES}; message ignored"
            )
            return
        self._held.append(message)

    @workflow.signal(name=STREAM_PUBLISH_SIGNAL)
    def _stream_publish(self, payload: RawValue) -> None:
        """A publish to the live stream (the model's text, from `call_llm`). Declared on the
        class, and registered again in __init__ after the stream registered its own handler: a
        publish in a run's first activation is decoded before __init__ runs, and must be decoded
        for this handler, not the dynamic one. It takes the payload raw and lets through only
        well-formed `deltas` items: the `events` topic is the workflow's alone, and an item that
        does not decode would otherwise fail every workflow task from then on."""
        try:
            batch = workflow.payload_converter().from_payload(payload.payload, PublishInput)
        except Exception as err:  # an undecodable publish is bad input, not a bug
            self._warn(
                f"stream publish: payload could not be decoded ({_first_line(err)}); ignored"
            )
            return
        kept: list[PublishEntry] = []
        for entry in batch.items:
            problem = self._publish_problem(entry)
            if problem is None:
                kept.append(entry)
            else:
                self._warn(f"stream publish: {problem}; item dropped")
        self._stream._on_publish(
            PublishInput(items=kept, publisher_id=batch.publisher_id, sequence=batch.sequence)
        )

    def _publish_problem(self, entry: PublishEntry) -> str | None:
        topic = entry.topic if isinstance(entry.topic, str) else repr(entry.topic)
        if topic == names.STREAM_EVENTS:
            return f"items on '{names.STREAM_EVENTS}' come from the workflow only"
        if topic != names.STREAM_DELTAS:
            return f"unknown topic '{bounds.shown(topic)}'"
        if not isinstance(entry.data, str) or len(entry.data) > MAX_STREAM_ITEM_BYTES:
            return f"an item must be an encoded payload of at most {MAX_STREAM_ITEM_BYTES} bytes"
        try:
            item = Payload()
            item.ParseFromString(base64.b64decode(entry.data, validate=True))
            workflow.payload_converter().from_payload(item, StreamDelta)
        except Exception as err:  # malformed: base64, protobuf or the delta's shape
            return f"malformed '{topic}' item ({_first_line(err)})"
        return None

    async def _stream_poll(self, payload: PollInput) -> PollResult:
        """The stream's long-poll update, bounded: at most MAX_STREAM_POLLERS at once."""
        if self._polls_in_flight >= MAX_STREAM_POLLERS:
            raise _pollers_busy()  # validated together with others in one activation
        self._polls_in_flight += 1
        try:
            return await self._stream._on_poll(payload)
        finally:
            self._polls_in_flight -= 1

    def _validate_stream_poll(self, payload: PollInput) -> None:
        self._stream._validate_poll(payload)
        if self._polls_in_flight >= MAX_STREAM_POLLERS:
            raise _pollers_busy()

    @workflow.update(name=names.UPDATE_SUBMIT_APPROVAL)
    def submit_approval(self, payload: RawValue) -> list[ToolCall]:
        response = self._validated_approval(payload)
        self._record_answer(response)
        return self._unanswered(pending_calls(self._messages))

    @submit_approval.validator
    def _validate_submit_approval(self, payload: RawValue) -> None:
        self._validated_approval(payload)

    def _validated_approval(self, payload: RawValue) -> ToolApprovalResponse:
        value, error = self._decode([payload], optional=False)
        if error is not None:
            raise ApplicationError(error, type="InvalidApproval", non_retryable=True)
        parsed = parse_approval(value)
        if parsed.value is None:
            raise ApplicationError(str(parsed.error), type="InvalidApproval", non_retryable=True)
        problem = self._answer_problem(parsed.value.call_id)
        if problem is not None:
            raise ApplicationError(problem, type="InvalidApproval", non_retryable=True)
        return parsed.value

    @workflow.query(name=names.QUERY_STATUS)
    def status(self) -> AgentStatus:
        return AgentStatus(
            phase=self._phase,
            round=self._round,
            pending_approvals=self._unanswered(pending_calls(self._messages))
            if self._phase != "finished"
            else [],
            finish_reason=self._finish_reason,
            cancel_requested=self._cancel is not None,
            awaiting_since=self._awaiting_since if self._phase == "awaiting_approval" else None,
        )

    @workflow.query(name=names.QUERY_EVENTS)
    def events(self, after: int = -1) -> list[AgentEvent]:
        return self._log.after(after)

    @workflow.query(name=names.QUERY_MESSAGES)
    def messages(self) -> list[ChatMessage]:
        return self._messages

    # ------------------------------------------------------------ helpers

    def _decode(self, args: Sequence[RawValue], *, optional: bool) -> tuple[object, str | None]:
        if not args:
            return None, None if optional else "no payload given"
        if len(args) > 1:
            return None, f"expected one payload, got {len(args)}"
        try:
            return workflow.payload_converter().from_payload(args[0].payload), None
        except Exception as err:  # any undecodable payload is bad input, not a bug
            return None, f"payload could not be decoded ({_first_line(err)})"

    def _accept(self, signal: str, parsed: Parsed[Any]) -> Any:
        if parsed.error is not None or parsed.value is None:
            self._warn(f"{signal}: {parsed.error}; ignored")
            return None
        if parsed.note:
            self._warn(f"{signal}: {parsed.note}")
        return parsed.value

    def _answer_problem(self, call_id: str) -> str | None:
        """Why an answer for `call_id` cannot be taken now, or None when it can."""
        if self._phase == "finished":
            return "the run has finished"
        shown = bounds.shown(call_id)
        waiting = [c for c in pending_calls(self._messages) if self._requires_approval(c)]
        if call_id in self._answers:
            return f"call '{shown}' was already answered"
        if call_id in {c.id for c in waiting}:
            return None
        if self._hardened and call_id in answered_ids(self._messages):
            return f"call '{shown}' was already answered"
        if not waiting:
            return f"no call is waiting for approval (got an answer for '{shown}')"
        known = bounds.shown(", ".join(c.id for c in waiting), 400)
        return f"unknown call id '{shown}' (waiting: {known})"

    def _record_answer(self, response: ToolApprovalResponse) -> None:
        record = ApprovalRecord(
            call_id=response.call_id,
            approved=response.approved,
            reason=response.reason,
            approver=response.approver,
            at=workflow.now(),
        )
        self._answers[response.call_id] = record
        self._emit(ApprovalEvent, **record.model_dump())
        if self._phase == "awaiting_approval":
            waiting = self._unanswered(pending_calls(self._messages))
            self._set_phase("awaiting_approval", self._describe_waiting(waiting))

    def _apply_seed_responses(self) -> None:
        """Seed-style resume: answers given at start apply at the first iteration; a call that
        needs approval and has no answer is then denied, as in the seed."""
        responses = self._options.tool_approval_responses
        if not responses or self._seed_responses_applied:
            return
        self._seed_responses_applied = True
        for response in responses:
            problem = self._answer_problem(response.call_id)
            if problem is not None:
                self._warn(f"tool_approval_responses: {problem}; ignored")
                continue
            self._record_answer(response)
        self._seed_mode = bool(pending_calls(self._messages))

    def _warn_unknown_options(self) -> None:
        for key in sorted(self._options.model_extra or {}):
            self._warn(f"unknown option '{key}' ignored")

    def _unanswered(self, pending: list[ToolCall]) -> list[ToolCall]:
        return [c for c in pending if self._requires_approval(c) and c.id not in self._answers]

    def _requires_approval(self, call: ToolCall) -> bool:
        spec = (self._specs or {}).get(call.name)
        extra = self._options.approval_required or []
        needed = (spec is not None and spec.requires_approval) or call.name in extra
        return needed and (not self._hardened or self._can_run(call))

    def _can_run(self, call: ToolCall) -> bool:
        """A call that cannot run (unknown or disallowed tool, arguments that are not one JSON
        object a tool takes) is answered at once: it never waits for a person."""
        known = self._runnable.get(call.id)
        if known is None:
            allowed = set(self._allowed_tools())
            known = runnable(call, allowed.__contains__, bounds.MAX_ARGUMENT_CHARS)
            self._runnable[call.id] = known
        return known

    def _allowed_tools(self) -> list[str]:
        names_ = sorted(self._specs or {})
        allow = self._options.tools
        return names_ if allow is None else [n for n in names_ if n in allow]

    def _flush_held_messages(self) -> None:
        if self._held and not pending_calls(self._messages):
            self._messages.extend(self._held)
            self._held = []

    def _cancel_inflight(self) -> None:
        for handle in list(self._inflight.values()):
            handle.cancel()

    def _emit(self, event_type: type[Any], **fields: Any) -> None:
        event = self._log.emit(event_type, self._round, **fields)
        self._events_topic.publish(event)

    async def _close_stream(self) -> None:
        """Release the live stream's waiting subscribers before the run closes (they read the
        rest from the closed run), so no poll update is left unfinished."""
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)

    def _carried_stream(self) -> WorkflowStreamState:
        """The stream state for the next generation: a bounded tail, offsets unchanged."""
        state = self._stream.get_state()
        kept, size = 0, 0
        for item in reversed(state.log):
            size += len(item.data) + len(item.topic)
            if kept >= STREAM_CARRIED_ITEMS or size > STREAM_CARRIED_BYTES:
                break
            kept += 1
        dropped = len(state.log) - kept
        if dropped:
            state.log = state.log[dropped:]
            state.base_offset += dropped
        return state

    def _warn(self, message: str) -> None:
        message = preview(message)
        workflow.logger.warning(message)
        self._emit(WarningEvent, message=message)

    def _describe_waiting(self, waiting: list[ToolCall]) -> str:
        lines = [f"round {self._round}: awaiting approval of {len(waiting)} call(s)"]
        for call in waiting:
            args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
            lines.append(f"- {call.id}: {call.name} {preview(args, 200)}")
        return "\n".join(lines)

    def _set_phase(self, phase: Phase, details: str) -> None:
        self._phase = phase
        workflow.set_current_details(details)
        pending = (
            len(self._unanswered(pending_calls(self._messages)))
            if phase == "awaiting_approval"
            else 0
        )
        if self._published != (phase, pending):
            self._published = (phase, pending)
            workflow.upsert_search_attributes(
                [
                    names.AGENT_STATUS.value_set(phase),
                    names.AGENT_PENDING_APPROVALS.value_set(pending),
                ]
            )

    def _conversation_bytes(self) -> int:
        """The JSON size of the messages, measured once per message (they are append-only)."""
        for message in self._messages[self._sized_count :]:
            self._sized_bytes += len(message.model_dump_json().encode())
        self._sized_count = len(self._messages)
        return self._sized_bytes

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        if info.is_continue_as_new_suggested():
            return True
        if info.get_current_history_size() >= MAX_GENERATION_BYTES:
            return True
        cap = self._options.max_history_events
        return cap is not None and info.get_current_history_length() >= cap

    def _continue_as_new(self) -> None:
        state = CarriedState(
            round=self._round,
            generation=self._generation + 1,
            next_seq=self._log.next_seq,
            events=self._log.carry(),
            answers=self._answers,
            awaiting_announced=self._awaiting_announced,
            awaiting_since=self._awaiting_since,
            between_turns=self._between_turns,
            idle_deadline=self._idle_deadline,
            approval_deadline=self._approval_deadline,
            cancel=self._cancel,
            held_messages=self._held,
            usage=self._usage,
            tool_specs=list((self._specs or {}).values()),
            seed_responses_applied=True,
            seed_mode=self._seed_mode,
            stream=self._carried_stream(),
        )
        options = self._options.model_copy(update={"tool_approval_responses": []})
        workflow.continue_as_new(
            AgentRunInput(messages=self._messages, options=options, continued=state)
        )

    def _finish(self, reason: FinishReason, error: str | None = None) -> AgentRunResult:
        if error is not None:
            error = preview(error)
            self._emit(ErrorEvent, message=error)
        self._emit(FinishedEvent, finish_reason=reason)
        self._finish_reason = reason
        self._error = error
        self._set_phase("finished", f"finished: {reason}" + (f" ({error})" if error else ""))
        return self._result()

    def _result(self) -> AgentRunResult:
        assert self._finish_reason is not None
        messages = self._messages
        if self._hardened:
            # A safety net: the conversation bound keeps the result far below this already.
            messages, _ = bounds.fit_messages(messages, bounds.RESULT_BUDGET_BYTES)
        return AgentRunResult(
            messages=messages,
            finish_reason=self._finish_reason,
            rounds=self._round,
            error=self._error,
            usage=self._usage,
        )
