"""AgentWorkflow: the durable tool-calling loop with approval, resume and cancellation.

One iteration, in priority order: cancel > apply answers (resume) > max rounds > call the model.
The workflow never does I/O: every model call and every tool execution is an activity
(`activity_calls`). Its state is one object (`AgentState`), handed to the next generation as it
is at continue-as-new (`state`, `generations`). Each concept has one owner beside the loop: the
messages (`conversation`), the answers and the rules' decisions (`approvals`), a model call
(`model_call`), a session's turns (`turns`), the durable waits (`waits`), what handlers take
(`doors`), the event log, the live stream, what the Temporal UI and the inbox see
(`visibility`); the rules a run follows are read once, into `versions.Rules`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows import activity_calls as calls
    from workflows import bounds, generations, metrics, names, shown
    from workflows.approvals import Approvals
    from workflows.asking import Questions
    from workflows.audit import audit_memo, audit_view, prompt_memo
    from workflows.batch import Batch, InFlight
    from workflows.budget import Budget
    from workflows.compaction import Compactor
    from workflows.conversation import Conversation
    from workflows.conversation_tail import ConversationTail, ConversationTails, TailRequest
    from workflows.doors import Doors
    from workflows.event_log import EVENT_TEXT_LIMIT, EventLog
    from workflows.expiry import reopen_problem, resolve_timeout_policy
    from workflows.inputs import (
        Parsed,
        parse_approval_policy,
        parse_cancel,
        parse_grant,
        parse_reopen,
        parse_user_message,
    )
    from workflows.live_stream import STREAM_PUBLISH_SIGNAL, LiveStream
    from workflows.model import (
        PERSON_PHASES,
        AgentEvent,
        AgentRunInput,
        AgentRunResult,
        AgentState,
        AgentStatus,
        AuditView,
        BaseEvent,
        BudgetGrant,
        BudgetStatus,
        CancelRequest,
        ChatMessage,
        ErrorEvent,
        FinishedEvent,
        FinishReason,
        LlmResponse,
        PendingQuestion,
        Phase,
        ReopenRequest,
        ToolApprovalResponse,
        ToolCall,
        WarningEvent,
    )
    from workflows.model_call import Ended, ModelCall
    from workflows.notices import (
        APPROVAL_TIMED_OUT,
        CANCELLED_MESSAGE,
        cancel_message,
        empty_reply,
        outage_warning,
        repeat_limit_warning,
        round_limit_warning,
    )
    from workflows.notifications import Notifier
    from workflows.reconstruction import plan_resume
    from workflows.rules import PolicyView
    from workflows.seal import (
        START_ROLE,
        was_sealed,
    )
    from workflows.signed_answers import SignedAnswers
    from workflows.signed_questions import signature_problem
    from workflows.state import (
        bounded_handover,
        handed_over,
        handover,
        initial_state,
    )
    from workflows.turns import Turns
    from workflows.versions import Rules
    from workflows.visibility import Visibility
    from workflows.waits import Waits


@workflow.defn(name=names.WORKFLOW_TYPE)
class AgentWorkflow:
    @workflow.init
    def __init__(self, input: AgentRunInput) -> None:
        info = workflow.info()
        self._rules = rules = Rules.of_this_run()
        self._limits = rules.limits
        self._state: AgentState
        continued = info.continued_run_id is not None
        if rules.real_handovers_only:
            continued = handed_over(info.continued_run_id, info.attempt, info.cron_schedule)
        self._state, self._refused = initial_state(
            input,
            continued=continued,
            strict=rules.strict_continuation,
            cron=rules.refuse_cron and bool(info.cron_schedule),
        )
        sealed_only = rules.sealed_inputs_only and not input.arrived_in_plaintext
        self._doors = Doors(
            sealed_only=sealed_only,
            bound=sealed_only and rules.seal_binding and was_sealed(input._sealed_for),
        )
        """Sealed payloads are taken only by the run and handler they were sealed for."""
        if self._doors.bound and self._refused is None and not continued:
            self._refused = self._doors.unbound(input._sealed_for, START_ROLE, first_run=False)
        resolve_timeout_policy(self._state.options, rules)
        self._log = EventLog(self._state)
        self._conversation = Conversation(self._state, self._limits)
        if rules.first_request_inline:
            self._conversation.sources.begin(self._state.messages)
        self._approvals = Approvals(
            self._state,
            self._conversation,
            rules=rules,
            run_id=info.first_execution_run_id,
            emit=self._emit,
            warn=self._warn,
            now=workflow.now,
            after_answer=self._show_waiting,
        )
        self._signed = SignedAnswers(
            self._approvals,
            self._conversation,
            enabled=rules.verify_signed_answers,
            workflow_id=info.workflow_id,
            run_id=info.first_execution_run_id,
        )
        self._questions = Questions(
            self._state,
            self._conversation,
            rules=rules,
            run_id=info.first_execution_run_id,
            emit=self._emit,
            now=workflow.now,
            after_answer=self._show_waiting,
        )
        self._tails = ConversationTails()
        self._compactor = Compactor(
            self._state,
            self._conversation,
            self._emit,
            lambda: self._approvals.offered_specs() + self._questions.offered(),
            self._warn,
            makes_room=rules.compaction_makes_room,
            summary_as_user=rules.summary_as_user,
        )
        self._notifier = Notifier(self._state, self._warn)
        self._turns = Turns(
            self._state,
            self._conversation,
            self._approvals,
            per_turn_limits=rules.per_turn_limits,
            warn=self._warn,
            now=workflow.now,
        )
        self._waits = Waits(
            self._state,
            self._approvals,
            self._notifier,
            self._turns,
            questions=self._questions,
            rules=rules,
            emit=self._emit,
            set_phase=self._set_phase,
            handing_over=self._should_continue_as_new,
        )
        self._visibility = Visibility()
        # Bookkeeping of this generation only (never carried):
        self._phase: Phase = "running"
        self._finish_reason: FinishReason | None = None
        self._error: str | None = None
        self._inflight = InFlight()
        self._model = ModelCall(
            self._state,
            self._conversation,
            self._approvals,
            self._compactor,
            self._inflight,
            rules=rules,
            emit=self._emit,
            warn=self._warn,
            set_phase=self._set_phase,
            offered=self._questions.offered,
            digests=self._tails,
        )
        self._batch = Batch(
            self._conversation,
            self._approvals,
            self._limits,
            self._inflight,
            self._emit,
            cancel_requested=lambda: self._state.cancel is not None,
        )
        self._live = LiveStream(self._state.stream, self._warn, sealed_only=sealed_only)
        self._budget = Budget(
            self._state,
            enabled=rules.token_budget,
            emit=self._emit,
            set_phase=self._set_phase,
            tell=self._notifier.budget_exhausted,
        )

    # ------------------------------------------------------------------ run

    @workflow.run
    async def run(self, input: AgentRunInput) -> AgentRunResult:
        try:
            if self._refused is not None:
                await self._refuse(self._refused)
            result = await self._prepare() or await self._loop()
            await self._handlers_done()
            await self._notifier.finished(result.finish_reason, result.error)
            await self._live.close()
            return result
        except BaseException as err:
            if not calls.is_cancellation(err) or self._finish_reason is not None:
                raise
            # Temporal's own cancellation (`temporal workflow cancel`): end as a cancel signal
            # does, then let the execution close as Canceled.
            self._batch.close_interrupted()
            self._finish("cancelled", CANCELLED_MESSAGE)
            await self._live.close()
            raise

    async def _prepare(self) -> AgentRunResult | None:
        """Read what a run needs once (the worker's tools and rules; carried afterwards) and, in
        the first generation, check the input and let the calls it brings through the gate. A
        result when the run ends right there."""
        state = self._state
        await generations.read_setup(state, self._rules, self._approvals, self._compactor)
        if state.generation > 0:
            return None
        stored = state.setup is not None and state.setup.payload_store
        if self._rules.prompt_in_memo and not stored and (memo := prompt_memo(state)):
            # The runs page's prompt column (never with a store: history holds only references)
            workflow.upsert_memo(memo)
        if problem := self._approvals.policy.unmatchable(state.run_rules):
            await self._refuse(f"Invalid AgentRunInput: options.approval_policy: {problem}")
        for key in sorted(state.options.model_extra or {}):
            self._warn(f"unknown option '{key}' ignored")
        if self._limits.strict_sizes and (problem := self._conversation.too_large()):
            return self._finish("error", problem)
        if self._rules.gate_input_calls:
            # Calls the input brings pass the same gate as the model's: the rules first.
            self._approvals.admit(self._conversation.pending())
        self._approvals.apply_seed(state.options.tool_approval_responses, finished=False)
        return None

    async def _refuse(self, problem: str) -> NoReturn:
        """A run refused at start fails with `InvalidAgentRunInput`. This release's runs first
        end as every run does, so followers, the inbox and the runs page say why: an `error`
        and a `finished` event, the phase `finished`, the reason in the memo."""
        if self._rules.end_before_refusing:
            self._finish("error", problem)
            await self._live.close()
        raise ApplicationError(problem, type="InvalidAgentRunInput", non_retryable=True)

    async def _loop(self) -> AgentRunResult:
        state = self._state
        while True:
            # 1. Cancel requested: nothing else runs.
            if state.cancel is not None:
                return self._finish("cancelled", self._cancel_message(state.cancel))
            if self._should_continue_as_new():
                if (ended := await self._continue_as_new()) is not None:
                    return ended
            # A session between turns (`keep_alive`): wait for the next message.
            if state.session_wait is not None:
                if not await self._waits.for_message(state.session_wait):
                    return self._finish("stop")
                continue  # a message (a new turn), a cancel, or continue-as-new
            # 2. Answers to apply (or a batch that needs none): resume from the messages.
            pending = self._conversation.pending()
            if pending:
                if state.seed_mode or not self._waiting_for_person(pending):
                    past_limit = await self._run_batch(pending)
                    state.round += 1
                    if past_limit:
                        self._turns.end(repeat_limit_warning(state.options.max_repeats))
                    continue
                timed_out = await self._waits.for_answers(pending)
                if timed_out and state.options.on_approval_timeout == "cancel":
                    return self._finish("cancelled", APPROVAL_TIMED_OUT)
                continue
            self._conversation.flush_held()
            # 3. Round limit.
            if state.round >= state.options.max_rounds:
                limit = state.options.max_rounds
                if not self._turns.in_session():
                    if self._rules.round_limit_warning:
                        self._warn(round_limit_warning(state.messages, limit))
                    return self._finish("max_rounds")
                self._turns.end(round_limit_warning(state.messages, limit, session=True))
                continue
            # 4. Call the model (within the token budget, else wait for a person).
            if self._budget.spent():
                if await self._budget.wait(handing_over=self._should_continue_as_new):
                    return self._finish("budget")
                continue
            response = await self._ask_model()
            if response is None:
                if self._finish_reason is not None:
                    return self._result()
                continue  # cancelled in flight: the next iteration ends the run
            if state.cancel is not None or state.messages[-1].tool_calls:
                continue  # the next iteration ends the run, runs the calls or waits for approval
            if state.held_messages:
                continue  # a message arrived while the model was answering: answer it too
            if self._rules.nudge_empty_reply and empty_reply(state.messages[-1]):
                if self._turns.after_empty_reply():
                    return self._finish("stop")
                continue
            if not state.options.keep_alive:
                return self._finish("stop")
            self._turns.await_next()

    # ------------------------------------------------------------ turns

    # ------------------------------------------------------------ the model

    async def _ask_model(self) -> LlmResponse | None:
        """One model call (`ModelCall`). None when the run ended (an error), a session's turn
        ended (the model server out of reach), or a cancel interrupted the call."""
        asked = await self._model.ask()
        if isinstance(asked, Ended):
            if asked.outage and self._rules.outage_ends_turn and self._turns.in_session():
                self._warn(outage_warning(asked.problem))  # a later message asks again
                self._turns.await_next()
                return None
            self._finish("error", asked.problem)
            return None
        return asked

    # -------------------------------------------------------------- tools

    async def _run_batch(self, pending: list[ToolCall]) -> bool:
        """Run the approved and unguarded calls in parallel, answer the rest, in call order.
        True when a session's turn ends here (a call was past the repeat limit)."""
        state = self._state
        self._set_phase("running", f"round {state.round}: running {len(pending)} tool call(s)")
        allowed = set(self._approvals.allowed_tools())
        steps = plan_resume(
            pending,
            state.answers,
            self._approvals.requires_approval,
            allowed.__contains__,
            max_runs=self._limits.max_calls_per_reply,
            max_argument_chars=self._limits.max_argument_chars,
            refuse=self._approvals.refusal if self._rules.refuse_unrunnable_calls else None,
        )
        steps = self._questions.steps(steps)
        past_limit = self._turns.in_session() and self._approvals.repeats.past_limit(pending)
        self._approvals.audit_remembered(steps)
        self._approvals.repeats.count_answers(pending)
        await self._batch.run(pending, steps)
        self._approvals.batch_done()
        self._questions.batch_done()
        state.approval_wait = None
        self._conversation.flush_held()
        return past_limit

    # ----------------------------------------------------------- handlers

    @workflow.signal(dynamic=True)
    async def on_signal(self, name: str, args: Sequence[RawValue]) -> None:
        """All signals come in raw, so a payload that does not decode or validate becomes a
        `warning` event instead of being dropped by the SDK with only a log line."""
        handlers: dict[str, Callable[[object], Awaitable[None] | None]] = {
            names.SIGNAL_TOOL_APPROVAL: self._on_tool_approval,
            names.SIGNAL_CANCEL: self._on_cancel,
            names.SIGNAL_SEND_MESSAGE: self._on_send_message,
            names.SIGNAL_MODEL_UNREACHABLE: self._on_model_unreachable,
        }
        handler = handlers.get(name)
        if handler is None:
            self._warn(f"unknown signal '{shown.shorten(name, bounds.ECHO_CHARS)}' ignored")
            return
        payload, error = self._doors.signal(name, args)
        if error is not None:
            self._warn(f"{name}: {error}; signal ignored")
            return
        handled = handler(payload)
        if inspect.isawaitable(handled):
            await handled  # a signed answer: checked by the worker first

    def _on_tool_approval(self, payload: object) -> Awaitable[None] | None:
        taken = self._approvals.receive(payload, finished=self._finished)
        if taken.note:
            self._warn(f"{names.SIGNAL_TOOL_APPROVAL}: {taken.note}")
        if taken.response is None:
            self._warn(f"{names.SIGNAL_TOOL_APPROVAL}: {taken.problem}; ignored")
            return None
        if self._signed.signed(taken.response):
            return self._take_signed(taken.response)
        self._approvals.answer(taken.response)
        return None

    async def _take_signed(self, response: ToolApprovalResponse) -> None:
        """A signed answer by signal: taken once the worker verified it, else a warning."""
        problem = await self._signed.problem(response, lambda: self._finished)
        if problem is not None:
            self._warn(f"{names.SIGNAL_TOOL_APPROVAL}: {problem}; ignored")
            return
        self._approvals.answer(response)

    def _on_cancel(self, payload: object) -> None:
        request = self._accept(names.SIGNAL_CANCEL, parse_cancel(payload))
        if request is None or self._finished:
            return
        current = self._state.cancel
        if current is not None and (current.immediate or not request.immediate):
            return  # cancel twice: harmless (only an upgrade to immediate changes anything)
        self._state.cancel = request
        if request.immediate:
            self._inflight.cancel_all()

    def _on_send_message(self, payload: object) -> None:
        message = self._accept(names.SIGNAL_SEND_MESSAGE, parse_user_message(payload))
        if message is None:
            return
        if self._finished:
            self._warn("send_message: the run has finished; message ignored")
            return
        problem = self._conversation.hold(message)
        if problem is not None:
            self._warn(f"send_message: {problem}; message ignored")

    def _on_model_unreachable(self, payload: object) -> None:
        """`call_llm` could not reach the model server and will try again: people are told at
        once, every attempt (`{"message": …}`; only while a model call is in flight)."""
        message = payload.get("message") if isinstance(payload, dict) else None
        if not isinstance(message, str) or not message.strip():
            self._warn(f"{names.SIGNAL_MODEL_UNREACHABLE}: no message; ignored")
            return
        if "llm" in self._inflight and not self._finished:
            self._emit(WarningEvent(message=shown.shorten(message, EVENT_TEXT_LIMIT)))  # logged

    @workflow.signal(name=STREAM_PUBLISH_SIGNAL)
    def _stream_publish(self, payload: RawValue) -> None:
        """A publish to the live stream: see `LiveStream.on_publish` (declared on the class so a
        publish in a run's first activation is decoded for this handler)."""
        if (problem := self._doors.stream(payload)) is not None:
            self._warn(f"stream publish: {problem}; ignored")
            return
        self._live.on_publish(payload)

    @workflow.update(name=names.UPDATE_SUBMIT_APPROVAL)
    async def submit_approval(self, payload: RawValue) -> list[ToolCall]:
        response = self._validated_approval(payload)
        if self._signed.signed(response):  # checked by the worker first
            problem = await self._signed.problem(response, lambda: self._finished)
            if problem is not None:
                self._warn(f"{names.UPDATE_SUBMIT_APPROVAL}: {problem}")
                raise ApplicationError(problem, type="InvalidApproval", non_retryable=True)
        self._approvals.answer(response)
        return self._approvals.waiting()

    @submit_approval.validator
    def _validate_submit_approval(self, payload: RawValue) -> None:
        self._validated_approval(payload)

    def _validated_approval(self, payload: RawValue) -> ToolApprovalResponse:
        value, error = self._doors.update(names.UPDATE_SUBMIT_APPROVAL, payload)
        if error is not None:
            raise ApplicationError(error, type="InvalidApproval", non_retryable=True)
        taken = self._approvals.receive(value, finished=self._finished)
        if taken.response is None:
            raise ApplicationError(str(taken.problem), type="InvalidApproval", non_retryable=True)
        return taken.response

    @workflow.update(name=names.UPDATE_SUBMIT_ANSWER)
    async def submit_answer(self, payload: RawValue) -> list[PendingQuestion]:
        """A person's answer to a question the model asked (`ask_user`); returns the questions
        still waiting. A signed answer is checked by the worker first."""
        response, value = self._validated_answer(payload)
        question = self._questions.question(response.call_id)
        if self._rules.verify_signed_answers and response.signature and question:
            info = workflow.info()
            problem = await signature_problem(
                response, question, workflow_id=info.workflow_id, run_id=info.first_execution_run_id
            )
            if problem is not None:
                self._warn(f"{names.UPDATE_SUBMIT_ANSWER}: {problem}")
                raise ApplicationError(problem, type="InvalidAnswer", non_retryable=True)
            response, value = self._validated_answer(payload)  # it still waits after the check
        who = {"approver": response.approver, "groups": response.groups}
        self._questions.answer(response.call_id, value, **who)
        return self._questions.shown()

    @submit_answer.validator
    def _validate_submit_answer(self, payload: RawValue) -> None:
        self._validated_answer(payload)

    def _validated_answer(self, payload: RawValue) -> tuple[Any, Any]:
        value, error = self._doors.update(names.UPDATE_SUBMIT_ANSWER, payload)
        try:
            if error is not None:
                raise ValueError(error)
            return self._questions.receive(value, finished=self._finished)
        except ValueError as err:
            raise ApplicationError(str(err), type="InvalidAnswer", non_retryable=True) from None

    @workflow.update(name=names.UPDATE_REOPEN_APPROVAL)
    async def reopen_approval(self, payload: RawValue) -> AgentStatus:
        """Ask again for an expired call: it waits with a new deadline (a signed request once
        the worker verified it). Returns the status."""
        request = self._validated_reopen(payload)
        if self._signed.signed_reopen(request):
            problem = await self._signed.reopen_problem(request)
            if problem is None:  # still expired and waiting after the check?
                problem = reopen_problem(
                    self._state, self._person_waiting(), request.call_id, finished=self._finished
                )
            if problem is not None:
                self._warn(f"{names.UPDATE_REOPEN_APPROVAL}: {problem}")
                raise ApplicationError(problem, type="InvalidReopen", non_retryable=True)
        self._waits.reopen(request, self._conversation.pending())
        return self.status()

    @reopen_approval.validator
    def _validate_reopen_approval(self, payload: RawValue) -> None:
        self._validated_reopen(payload)

    def _validated_reopen(self, payload: RawValue) -> ReopenRequest:
        value, error = self._doors.update(names.UPDATE_REOPEN_APPROVAL, payload)
        parsed = parse_reopen(value) if error is None else None
        if parsed is None or parsed.value is None:
            why = str(error) if parsed is None else str(parsed.error)
            raise ApplicationError(why, type="InvalidReopen", non_retryable=True)
        waiting = [] if self._finished else self._person_waiting()
        call_id = parsed.value.call_id
        if problem := reopen_problem(self._state, waiting, call_id, finished=self._finished):
            raise ApplicationError(problem, type="InvalidReopen", non_retryable=True)
        return parsed.value

    @workflow.update(name=names.UPDATE_SET_APPROVAL_POLICY)
    def set_approval_policy(self, payload: RawValue) -> PolicyView:
        """Replace the run's rules (remembered ones included); calls waiting for a person that
        the new rules decide are decided at once. Returns the effective rules."""
        self._approvals.set_run_rules(self._validated_policy(payload))
        return self._approvals.policy.view()

    @set_approval_policy.validator
    def _validate_set_approval_policy(self, payload: RawValue) -> None:
        self._validated_policy(payload)

    def _validated_policy(self, payload: RawValue) -> list[Any]:
        if self._finished:
            raise ApplicationError(
                "the run has finished", type="InvalidApprovalPolicy", non_retryable=True
            )
        value, error = self._doors.update(names.UPDATE_SET_APPROVAL_POLICY, payload)
        parsed = parse_approval_policy(value) if error is None else None
        if parsed is None or parsed.value is None:
            why = str(error) if parsed is None else str(parsed.error)
            raise ApplicationError(why, type="InvalidApprovalPolicy", non_retryable=True)
        if problem := self._approvals.policy.unmatchable(parsed.value.rules):
            raise ApplicationError(problem, type="InvalidApprovalPolicy", non_retryable=True)
        return list(parsed.value.rules)

    @workflow.update(name=names.UPDATE_GRANT_BUDGET)
    async def grant_budget(self, payload: RawValue) -> BudgetStatus:
        """More tokens for the run (`{"tokens": N}`), or stop it at its budget (`{"stop":
        true}`); a signed grant is checked by the worker first. The budget after it."""
        grant = self._validated_grant(payload)
        if (problem := await self._budget.signature_problem(grant)) is not None:
            raise ApplicationError(problem, type="InvalidGrant", non_retryable=True)
        return self._budget.grant(self._validated_grant(payload))  # as the run stands now

    @grant_budget.validator
    def _validate_grant_budget(self, payload: RawValue) -> None:
        self._validated_grant(payload)

    def _validated_grant(self, payload: RawValue) -> BudgetGrant:
        value, error = self._doors.update(names.UPDATE_GRANT_BUDGET, payload)
        grant = None
        if error is None:
            parsed = parse_grant(value)
            grant, error = parsed.value, parsed.error
        if grant is not None:
            setup = self._state.setup
            allowed = setup.budget_groups if setup is not None else []
            error = self._budget.refusal(grant, allowed=allowed, finished=self._finished)
        if grant is None or error is not None:
            raise ApplicationError(str(error), type="InvalidGrant", non_retryable=True)
        return grant

    @workflow.query(name=names.QUERY_POLICY)
    def policy(self) -> PolicyView:
        return self._approvals.policy.view()

    @workflow.query(name=names.QUERY_STATUS)
    def status(self) -> AgentStatus:
        state = self._state
        awaiting = self._phase in PERSON_PHASES and state.approval_wait is not None
        waiting = [] if self._finished else self._approvals.waiting()
        return AgentStatus(
            phase=self._phase,
            round=state.round,
            pending_approvals=waiting,
            finish_reason=self._finish_reason,
            cancel_requested=state.cancel is not None,
            awaiting_since=state.approval_wait.since if awaiting and state.approval_wait else None,
            decided=[] if self._finished else self._approvals.decided(),
            run_id=workflow.info().first_execution_run_id,
            expired=[] if self._finished else self._waits.expired_ids(self._conversation.pending()),
            escalations={
                c.id: state.escalations[c.id] for c in waiting if c.id in state.escalations
            },
            approval_deadline=state.approval_wait.deadline
            if awaiting and state.approval_wait
            else None,
            pending_questions=[] if self._finished else self._questions.shown(),
            budget=self._budget.status(),
            quorums=[] if self._finished else self._approvals.quorums(),
        )

    @workflow.query(name=names.QUERY_EVENTS)
    def events(self, after: int = -1) -> list[AgentEvent]:
        return self._log.after(after)

    @workflow.query(name=names.QUERY_MESSAGES)
    def messages(self) -> list[ChatMessage]:
        """The record: every message of the run, compaction markers in place."""
        return self._state.messages

    @workflow.query(name=names.QUERY_AUDIT)
    def audit(self) -> AuditView:
        """Every decision of the run, in order, across continue-as-new."""
        return audit_view(self._state)

    @workflow.query(name=names.QUERY_MODEL_VIEW)
    def model_view(self) -> list[ChatMessage]:
        """What the model is sent now (the record, compacted to fit its window)."""
        return self._compactor.view()

    @workflow.query(name=names.QUERY_CONVERSATION_TAIL)
    def conversation_tail(self, request: TailRequest) -> ConversationTail:
        """Internal (`call_llm`'s): the messages after a prefix the asker holds, if it is ours."""
        messages = self._compactor.view() if request.view else self._state.messages
        return self._tails.answer(request, messages)

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

    def _cancel_message(self, request: CancelRequest) -> str:
        if not self._rules.cancel_reason_in_message:
            return CANCELLED_MESSAGE
        return cancel_message(request)

    def _emit(self, event: BaseEvent) -> None:
        self._live.publish(self._log.emit(event))  # type: ignore[arg-type]

    def _warn(self, message: str) -> None:
        message = shown.shorten(message, EVENT_TEXT_LIMIT)
        workflow.logger.warning(message)
        self._emit(WarningEvent(message=message))

    def _set_phase(self, phase: Phase, details: str) -> None:
        self._phase = phase
        metrics.phase_changed(phase)
        pending = 0
        if phase in PERSON_PHASES:
            asked = self._questions.waiting(self._conversation.pending())
            pending = len(self._approvals.waiting()) + len(asked)
        self._visibility.show(phase, details, pending)

    def _person_waiting(self) -> list[ToolCall]:
        """The calls and the questions' calls waiting for a person now."""
        return self._approvals.waiting() + self._questions.calls(self._conversation.pending())

    def _waiting_for_person(self, pending: list[ToolCall]) -> bool:
        return bool(self._approvals.unanswered(pending) or self._questions.waiting(pending))

    def _show_waiting(self) -> None:
        """After an answer: what the UI and the inbox show of the calls still waiting."""
        if self._phase in PERSON_PHASES:
            self._waits.show(self._conversation.pending())

    def _should_continue_as_new(self) -> bool:
        return generations.history_full(self._state.options.max_history_events)

    async def _handlers_done(self) -> None:
        """Signed answers still being checked are taken (or refused) before the run ends or
        continues (this release's runs; nothing to wait for otherwise)."""
        if self._rules.verify_signed_answers and not workflow.all_handlers_finished():
            await workflow.wait_condition(workflow.all_handlers_finished)

    async def _continue_as_new(self) -> AgentRunResult | None:
        """Hand the state to the next generation (live followers follow on to it). This
        release's runs measure the whole hand-over first and keep it within its budget; the
        result when the run cannot continue (it ends `error` saying why)."""
        await self._handlers_done()
        await self._live.close()
        handed = handover(self._state, self._log.carry(), self._live.carried())
        if self._rules.bounded_handover:
            handed, problem = bounded_handover(handed, self._state.setup)
            if problem is not None:
                return self._finish("error", problem)
        workflow.continue_as_new(handed)

    def _finish(self, reason: FinishReason, error: str | None = None) -> AgentRunResult:
        if error is not None:
            error = shown.shorten(error, EVENT_TEXT_LIMIT)
            self._emit(ErrorEvent(message=error))
        self._emit(FinishedEvent(finish_reason=reason))
        self._finish_reason = reason
        self._error = error
        self._set_phase("finished", f"finished: {reason}" + (f" ({error})" if error else ""))
        if self._rules.audit:
            said = error if self._rules.memo_names_error_and_run else None
            run_id = workflow.info().run_id if self._rules.memo_names_error_and_run else None
            workflow.upsert_memo(audit_memo(self._state, reason, said, run_id))
        return self._result()

    def _result(self) -> AgentRunResult:
        assert self._finish_reason is not None
        reason, strict = self._finish_reason, self._limits.strict_sizes
        return generations.result_of(self._state, reason, self._error, strict_sizes=strict)
