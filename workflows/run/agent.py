"""AgentWorkflow: the durable tool-calling loop with approval, resume and cancellation.

One iteration, in priority order: cancel > apply answers (resume) > max rounds > call the model.
The workflow never does I/O: every model call and every tool execution is an activity
(`activity_calls`). Its state is one object (`AgentState`), handed to the next generation as it
is at continue-as-new (`handover`, `generations`). Each concept has one owner, handed the run's
context (`RunContext`): the messages (`conversation.record`), the answers and the rules'
decisions (`gate.approvals`), questions, the budget and signatures (`people/`), a model call
(`model_call`), a batch of tool calls (`batch`), a session's turns (`turns`), the durable waits
(`waits`), what the signals and updates take (`handlers`, through `doors`), the event log, the
live stream, what the Temporal UI and the inbox see (`visibility`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows import activity_calls as calls
    from workflows import metrics, names, shown
    from workflows.context import RunContext
    from workflows.contract.rules import PolicyView
    from workflows.contract.seal import START_ROLE, was_sealed
    from workflows.conversation.compaction import Compactor
    from workflows.conversation.record import Conversation
    from workflows.conversation.tail import ConversationTail, ConversationTails, TailRequest
    from workflows.gate.approvals import Approvals
    from workflows.gate.audit import audit_memo, audit_view, prompt_memo
    from workflows.model import (
        PERSON_PHASES,
        AgentEvent,
        AgentRunInput,
        AgentRunResult,
        AgentState,
        AgentStatus,
        AuditView,
        BaseEvent,
        BudgetStatus,
        ChatMessage,
        ErrorEvent,
        FinishedEvent,
        FinishReason,
        ForkedEvent,
        PendingQuestion,
        Phase,
        ToolCall,
        ToolSpec,
        WarningEvent,
    )
    from workflows.people.budget import Budget
    from workflows.people.expiry import resolve_timeout_policy
    from workflows.people.notifications import Notifier
    from workflows.people.questions import Questions
    from workflows.run import generations
    from workflows.run.batch import Batch, InFlight, Resumed
    from workflows.run.doors import Doors
    from workflows.run.event_log import EVENT_TEXT_LIMIT, EventLog
    from workflows.run.handlers import Handlers
    from workflows.run.handover import bounded_handover, handed_over, handover, initial_state
    from workflows.run.live_stream import STREAM_PUBLISH_SIGNAL, LiveStream
    from workflows.run.model_call import Ended, ModelCall
    from workflows.run.sub_agents import SubAgents, not_a_sub_agent
    from workflows.run.turns import Turns
    from workflows.run.visibility import Visibility, status_of
    from workflows.run.waits import Waits
    from workflows.run.wording import (
        APPROVAL_TIMED_OUT,
        CANCELLED_MESSAGE,
        cancel_message,
        empty_reply,
        outage_warning,
        repeat_limit_warning,
        round_limit_warning,
    )
    from workflows.versions import this_run


@workflow.defn(name=names.WORKFLOW_TYPE)
class AgentWorkflow:
    @workflow.init
    def __init__(self, input: AgentRunInput) -> None:
        info = workflow.info()
        patched = this_run()
        self._state: AgentState
        continued = handed_over(info.continued_run_id, info.attempt, info.cron_schedule)
        self._state, self._refused = initial_state(
            input, continued=continued, cron=bool(info.cron_schedule)
        )
        sealed_only = not input.arrived_in_plaintext
        self._doors = Doors(
            sealed_only=sealed_only, bound=sealed_only and was_sealed(input._sealed_for)
        )
        """Sealed payloads are taken only by the run and handler they were sealed for."""
        if self._doors.bound and self._refused is None and not continued:
            self._refused = self._doors.unbound(input._sealed_for, START_ROLE, first_run=False)
        if self._refused is None and not continued:
            self._refused = not_a_sub_agent(self._state.options.parent, info)
        resolve_timeout_policy(self._state.options)
        # Bookkeeping of this generation only (never carried):
        self._phase: Phase = "running"
        self._finish_reason: FinishReason | None = None
        self._error: str | None = None
        self._log = EventLog(self._state)
        self._live = LiveStream(self._state.stream, self._warn, sealed_only=sealed_only)
        self._visibility = Visibility()
        self._inflight = InFlight()
        self._tails = ConversationTails()
        ctx = self._ctx = RunContext(
            state=self._state,
            now=workflow.now,
            workflow_id=info.workflow_id,
            run_id=info.first_execution_run_id,
            emit=self._emit,
            warn=self._warn,
            set_phase=self._set_phase,
            patched=patched,
        )
        self._conversation = conversation = Conversation(self._state)
        conversation.sources.begin(self._state.messages)
        self._approvals = Approvals(ctx, conversation, after_answer=self._show_waiting)
        self._questions = Questions(ctx, conversation, after_answer=self._show_waiting)
        self._compactor = Compactor(ctx, conversation, self._offered)
        self._notifier = Notifier(ctx, approvers=self._approvals.approvers_for)
        self._turns = Turns(ctx, conversation, self._approvals)
        self._budget = Budget(ctx, tell=self._notifier.budget_exhausted)
        self._sub_agents = SubAgents(ctx, self._approvals, budget=self._budget.status)
        self._waits = Waits(
            ctx,
            self._approvals,
            self._questions,
            self._notifier,
            self._turns,
            handing_over=self._should_continue_as_new,
        )
        self._model = ModelCall(
            ctx,
            conversation,
            self._approvals,
            self._compactor,
            self._inflight,
            budget=self._budget,
            offered=lambda: self._questions.offered() + self._sub_agents.specs(),
            digests=self._tails,
        )
        self._batch = Batch(
            ctx,
            conversation,
            self._approvals,
            self._questions,
            self._turns,
            self._inflight,
            self._sub_agents,
        )
        self._handlers = Handlers(
            ctx,
            self._doors,
            conversation,
            self._approvals,
            self._questions,
            self._budget,
            self._waits,
            self._inflight,
            self._sub_agents,
            finished=lambda: self._finished,
        )

    # ------------------------------------------------------------------ run

    @workflow.run
    async def run(self, input: AgentRunInput) -> AgentRunResult:
        try:
            if self._refused is not None:
                await self._refuse(self._refused)
            result = await self._prepare() or await self._loop()
            await self._handlers_done()
            await self._sub_agents.reported()
            await self._notifier.finished(result.finish_reason, result.error)
            await self._live.close()
            return self._sub_agents.with_final_report(result, granted=self._granted())
        except BaseException as err:
            if not calls.is_cancellation(err) or self._finish_reason is not None:
                raise
            # Temporal's own cancellation (`temporal workflow cancel`): end as a cancel signal
            # does, then let the execution close as Canceled.
            self._batch.close_interrupted()
            self._finish("cancelled", CANCELLED_MESSAGE)
            if self._sub_agents.parent is not None:  # no result to carry its end: a signal
                self._tell_parent("finished")
            await self._live.close()
            raise

    async def _prepare(self) -> AgentRunResult | None:
        """Read what a run needs of the worker and, in the first generation, check the input and
        let the calls it brings through the gate. A result when the run ends right there."""
        state = self._state
        if state.generation == 0 and (fork := state.options.forked_from) is not None:
            self._emit(ForkedEvent(forked_from=fork))  # a fork's first event says whence
        await generations.read_setup(
            state, self._approvals, self._compactor, self._sub_agents.specs
        )
        if state.generation > 0:
            return None
        stored = state.setup is not None and state.setup.payload_store
        if not stored and (memo := prompt_memo(state)):
            # The runs page's prompt column (never with a store: history holds only references)
            workflow.upsert_memo(memo)
        if problem := self._approvals.policy.unmatchable(state.run_rules):
            await self._refuse(f"Invalid AgentRunInput: options.approval_policy: {problem}")
        for key in sorted(state.options.model_extra or {}):
            self._warn(f"unknown option '{key}' ignored")
        if problem := self._conversation.too_large():
            return self._finish("error", problem)
        # Calls the input brings pass the same gate as the model's: the rules first.
        self._approvals.admit(self._conversation.pending())
        self._approvals.apply_seed(state.options.tool_approval_responses, finished=False)
        return None

    async def _refuse(self, problem: str) -> NoReturn:
        """A run refused at start fails with `InvalidAgentRunInput`. It first ends as every run
        does, so followers, the inbox and the runs page say why: an `error` and a `finished`
        event, the phase `finished`, the reason in the memo."""
        self._finish("error", problem)
        await self._live.close()
        raise ApplicationError(problem, type="InvalidAgentRunInput", non_retryable=True)

    async def _loop(self) -> AgentRunResult:
        state = self._state
        while True:
            # 1. Cancel requested: nothing else runs.
            if state.cancel is not None:
                return self._finish("cancelled", cancel_message(state.cancel))
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
                    resumed = await self._batch.resume(pending)
                    if resumed is Resumed.HANDED_BACK:
                        continue  # a call waits for a person after all: the same round
                    state.round += 1
                    if resumed is Resumed.PAST_LIMIT:
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
                    self._warn(round_limit_warning(state.messages, limit))
                    return self._finish("max_rounds")
                self._turns.end(round_limit_warning(state.messages, limit, session=True))
                continue
            # 4. Call the model (within the token budget, else wait for a person).
            if self._budget.spent():
                if await self._budget.wait(handing_over=self._should_continue_as_new):
                    return self._finish("budget")
                continue
            asked = await self._model.ask()
            if isinstance(asked, Ended):
                if (
                    asked.outage
                    and state.options.keep_alive
                    and self._ctx.patched.sessions_outlive_outages
                ):
                    self._warn(outage_warning(asked.problem))  # a later message asks again
                    self._turns.await_next()
                    continue
                return self._finish("error", asked.problem)
            if asked is None or state.cancel is not None or state.messages[-1].tool_calls:
                continue  # the next iteration ends the run, runs the calls or waits for approval
            if state.held_messages:
                continue  # a message arrived while the model was answering: answer it too
            if empty_reply(state.messages[-1]):
                if self._turns.after_empty_reply():
                    return self._finish("stop")
                continue
            if not state.options.keep_alive:
                return self._finish("stop")
            self._turns.await_next()

    # ----------------------------------------------------------- handlers

    @workflow.signal(dynamic=True)
    async def on_signal(self, name: str, args: Sequence[RawValue]) -> None:
        """All signals come in raw (`Handlers.signal`)."""
        await self._handlers.signal(name, args)

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
        """A person's answer; returns the calls still waiting. A signed one is checked by the
        worker first."""
        return await self._handlers.submit_approval(payload)

    @submit_approval.validator
    def _validate_submit_approval(self, payload: RawValue) -> None:
        self._handlers.approval(payload)

    @workflow.update(name=names.UPDATE_SUBMIT_ANSWER)
    async def submit_answer(self, payload: RawValue) -> list[PendingQuestion]:
        """A person's answer to a question the model asked (`ask_user`); returns the questions
        still waiting. A signed answer is checked by the worker first."""
        return await self._handlers.submit_answer(payload)

    @submit_answer.validator
    def _validate_submit_answer(self, payload: RawValue) -> None:
        self._handlers.answer(payload)

    @workflow.update(name=names.UPDATE_REOPEN_APPROVAL)
    async def reopen_approval(self, payload: RawValue) -> AgentStatus:
        """Ask again for an expired call: it waits with a new deadline (a signed request once
        the worker verified it). Returns the status."""
        await self._handlers.reopen_approval(payload)
        return self.status()

    @reopen_approval.validator
    def _validate_reopen_approval(self, payload: RawValue) -> None:
        self._handlers.reopen(payload)

    @workflow.update(name=names.UPDATE_SET_APPROVAL_POLICY)
    def set_approval_policy(self, payload: RawValue) -> PolicyView:
        """Replace the run's rules (remembered ones included); calls waiting for a person that
        the new rules decide are decided at once. Returns the effective rules."""
        return self._handlers.set_policy(payload)

    @set_approval_policy.validator
    def _validate_set_approval_policy(self, payload: RawValue) -> None:
        self._handlers.policy(payload)

    @workflow.update(name=names.UPDATE_GRANT_BUDGET)
    async def grant_budget(self, payload: RawValue) -> BudgetStatus:
        """More tokens for the run (`{"tokens": N}`), or stop it at its budget (`{"stop":
        true}`); a signed grant is checked by the worker first. The budget after it."""
        return await self._handlers.grant_budget(payload)

    @grant_budget.validator
    def _validate_grant_budget(self, payload: RawValue) -> None:
        self._handlers.grant(payload)

    # ------------------------------------------------------------ queries

    @workflow.query(name=names.QUERY_POLICY)
    def policy(self) -> PolicyView:
        return self._approvals.policy.view()

    @workflow.query(name=names.QUERY_STATUS)
    def status(self) -> AgentStatus:
        done = self._finished
        return status_of(
            self._state,
            self._phase,
            self._finish_reason,
            run_id=self._ctx.run_id,
            waiting=[] if done else self._approvals.waiting(),
            decided=[] if done else self._approvals.decided(),
            expired=[] if done else self._waits.expired_ids(self._conversation.pending()),
            questions=[] if done else self._questions.shown(),
            quorums=[] if done else self._approvals.quorums(),
            budget=self._budget.status(),
            sub_agents=self._sub_agents.statuses(),
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

    def _offered(self) -> list[ToolSpec]:
        """Every tool the model is offered: the worker's this run allows, and the workflow's."""
        return self._approvals.offered_specs() + self._questions.offered()

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
        if self._sub_agents.report_due(phase):  # a sub-agent tells its parent where it stands
            self._tell_parent(phase)

    def _tell_parent(self, phase: Phase) -> None:
        done = phase == "finished"
        self._sub_agents.schedule_report(
            phase,
            pending_approvals=[] if done else self._approvals.waiting(),
            pending_questions=[] if done else self._questions.shown(),
            granted=self._granted(),
            finish_reason=self._finish_reason,
        )

    def _granted(self) -> int:
        """The tokens people granted this run (and its sub-agents), for its parent."""
        budget = self._state.budget
        return 0 if budget is None else budget.granted

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
        continues."""
        if not workflow.all_handlers_finished():
            await workflow.wait_condition(workflow.all_handlers_finished)

    async def _continue_as_new(self) -> AgentRunResult | None:
        """Hand the state to the next generation (live followers follow on to it), measured
        whole and kept within its budget; the result when the run cannot continue (it ends
        `error` saying why)."""
        await self._handlers_done()
        await self._sub_agents.reported()
        await self._live.close()
        handed = handover(self._state, self._log.carry(), self._live.carried())
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
        workflow.upsert_memo(audit_memo(self._state, reason, error, workflow.info().run_id))
        return generations.result_of(self._state, reason, error)
