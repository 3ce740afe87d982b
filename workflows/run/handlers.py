"""What each signal and update does once its payload is taken: the checks of its door, and the
owner it hands the value to.

Every payload comes in raw (`Doors` decodes it and checks a sealed one's binding), so one that
does not decode or validate becomes a `warning` (a signal) or a refusal (an update) instead of
being dropped by the SDK with only a log line. An update is checked twice: by its validator,
which refuses it before it enters the history, and by its handler, once, after the only `await`
that can change what the check sees (the worker's verdict on a signed decision). A signal has no
validator: its handler checks and warns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from workflows import bounds, names, shown
from workflows.context import RunContext
from workflows.contract.rules import PolicyRule, PolicyView
from workflows.conversation.record import Conversation
from workflows.gate.approvals import Approvals, Received
from workflows.intake import (
    Parsed,
    describe,
    parse_approval_policy,
    parse_cancel,
    parse_grant,
    parse_reopen,
    parse_user_message,
)
from workflows.model import (
    AnswerValue,
    BudgetGrant,
    BudgetStatus,
    PendingQuestion,
    QuestionAnswer,
    ReopenRequest,
    SubAgentReport,
    ToolApprovalResponse,
    ToolCall,
    WarningEvent,
)
from workflows.people import signatures
from workflows.people.budget import Budget
from workflows.people.expiry import reopen_problem
from workflows.people.questions import Questions
from workflows.run.batch import InFlight
from workflows.run.doors import Doors
from workflows.run.event_log import EVENT_TEXT_LIMIT
from workflows.run.sub_agents import SubAgents
from workflows.run.waits import Waits

Signed = TypeVar("Signed", ToolApprovalResponse, QuestionAnswer, BudgetGrant)


def as_verified(decision: Signed, found: signatures.Verified, *, own_keys: bool) -> Signed:
    """A signed decision as the worker verified it: the signer's groups are its approvers
    file's, and the service that signed, if one did. Only a run started before own keys
    (`own_keys` False), whose recorded verdicts say no groups, keeps the groups the decision
    named; in a run of own keys a verdict without groups gives none."""
    if found.groups is not None:
        groups: list[str] | None = list(found.groups)
    else:
        groups = [] if own_keys else decision.groups
    if isinstance(decision, BudgetGrant):
        groups = groups or []
    return decision.model_copy(update={"groups": groups, "signed_by": found.signed_by})


def budget_changed(signed_for: int, now: BudgetStatus | None) -> str:
    """A grant signed for a budget that changed while it was checked (a copy of a grant that
    took effect): it takes effect once."""
    limit = "no budget" if now is None else f"{now.limit} tokens"
    return (
        f"the budget changed since this grant was signed (it was for a budget of {signed_for}"
        f" tokens; it is {limit} now): a grant takes effect once, sign a new one"
    )


def refused(problem: object, kind: str) -> ApplicationError:
    """An update's refusal: the caller gets `problem` (its type says which door refused it)."""
    return ApplicationError(str(problem), type=kind, non_retryable=True)


class Handlers:
    def __init__(
        self,
        ctx: RunContext,
        doors: Doors,
        conversation: Conversation,
        approvals: Approvals,
        questions: Questions,
        budget: Budget,
        waits: Waits,
        inflight: InFlight,
        sub_agents: SubAgents,
        *,
        finished: Callable[[], bool],
    ) -> None:
        self._ctx = ctx
        self._state = ctx.state
        self._doors = doors
        self._conversation = conversation
        self._approvals = approvals
        self._questions = questions
        self._budget = budget
        self._waits = waits
        self._inflight = inflight
        self._sub_agents = sub_agents
        self._finished = finished

    # ---- signals

    async def signal(self, name: str, args: Sequence[RawValue]) -> None:
        """A signal, taken raw: decoded and bound by its door, then handled by its name."""
        handlers = {
            names.SIGNAL_TOOL_APPROVAL: self._tool_approval,
            names.SIGNAL_CANCEL: self._cancel,
            names.SIGNAL_SEND_MESSAGE: self._send_message,
            names.SIGNAL_MODEL_UNREACHABLE: self._model_unreachable,
            names.SIGNAL_SUB_AGENT_REPORT: self._sub_agent_report,
        }
        handler = handlers.get(name)
        if handler is None:
            self._ctx.warn(f"unknown signal '{shown.shorten(name, bounds.ECHO_CHARS)}' ignored")
            return
        payload, error = self._doors.signal(name, args)
        if error is not None:
            self._ctx.warn(f"{name}: {error}; signal ignored")
            return
        await handler(payload)

    def _accept(self, signal: str, parsed: Parsed[Any]) -> Any:
        if parsed.error is not None or parsed.value is None:
            self._ctx.warn(f"{signal}: {parsed.error}; ignored")
            return None
        if parsed.note:
            self._ctx.warn(f"{signal}: {parsed.note}")
        return parsed.value

    async def _tool_approval(self, payload: object) -> None:
        """An answer by signal: a signed one is taken once the worker verified it."""
        taken = self._approvals.receive(payload, finished=self._finished())
        if taken.note:
            self._ctx.warn(f"{names.SIGNAL_TOOL_APPROVAL}: {taken.note}")
        if taken.response is None:
            self._ctx.warn(f"{names.SIGNAL_TOOL_APPROVAL}: {taken.problem}; ignored")
            return
        response = taken.response
        if response.signature is not None:
            signed = await self._verified_approval(response)
            if isinstance(signed, str):
                self._ctx.warn(f"{names.SIGNAL_TOOL_APPROVAL}: {signed}; ignored")
                return
            response = signed
            checked = self._approvals.check(response, finished=self._finished())
            if checked.response is None:
                self._ctx.warn(f"{names.SIGNAL_TOOL_APPROVAL}: {checked.problem}; ignored")
                return
        self._approvals.answer(response)

    async def _cancel(self, payload: object) -> None:
        request = self._accept(names.SIGNAL_CANCEL, parse_cancel(payload))
        if request is None or self._finished():
            return
        current = self._state.cancel
        if current is not None and (current.immediate or not request.immediate):
            return  # cancel twice: harmless (only an upgrade to immediate changes anything)
        self._state.cancel = request
        if request.immediate:
            self._inflight.cancel_all()
        await self._sub_agents.cancel(request)  # every sub-agent still running, with the reason

    async def _send_message(self, payload: object) -> None:
        message = self._accept(names.SIGNAL_SEND_MESSAGE, parse_user_message(payload))
        if message is None:
            return
        if self._finished():
            self._ctx.warn("send_message: the run has finished; message ignored")
            return
        problem = self._conversation.hold(message)
        if problem is not None:
            self._ctx.warn(f"send_message: {problem}; message ignored")

    async def _sub_agent_report(self, payload: object) -> None:
        """A sub-agent tells where it stands (`SubAgentReport`)."""
        try:
            report = SubAgentReport.model_validate(payload)
        except ValidationError as err:
            self._ctx.warn(f"{names.SIGNAL_SUB_AGENT_REPORT}: invalid report: {describe(err)}")
            return
        if (problem := self._sub_agents.take_report(report)) is not None:
            self._ctx.warn(f"{names.SIGNAL_SUB_AGENT_REPORT}: {problem}; ignored")

    async def _model_unreachable(self, payload: object) -> None:
        """`call_llm` could not reach the model server and will try again: people are told at
        once, every attempt (`{"message": …}`; only while a model call is in flight)."""
        message = payload.get("message") if isinstance(payload, dict) else None
        if not isinstance(message, str) or not message.strip():
            self._ctx.warn(f"{names.SIGNAL_MODEL_UNREACHABLE}: no message; ignored")
            return
        if "llm" in self._inflight and not self._finished():
            self._ctx.emit(WarningEvent(message=shown.shorten(message, EVENT_TEXT_LIMIT)))

    # ---- submit_approval

    def approval(self, payload: RawValue) -> ToolApprovalResponse:
        """The validator: the answer, checked as the run stands; refused with the reason."""
        taken = self._approvals.parse(self._decoded(names.UPDATE_SUBMIT_APPROVAL, payload))
        if taken.response is not None:
            verified = taken.response.signature is None
            taken = self._approvals.check(
                taken.response, finished=self._finished(), verified=verified
            )
        if taken.response is None:
            raise refused(taken.problem, "InvalidApproval")
        return taken.response

    async def submit_approval(self, payload: RawValue) -> list[ToolCall]:
        taken = self._approvals.parse(self._decoded(names.UPDATE_SUBMIT_APPROVAL, payload))
        if taken.response is not None and taken.response.signature is not None:
            signed = await self._verified_approval(taken.response)
            if isinstance(signed, str):
                self._ctx.warn(f"{names.UPDATE_SUBMIT_APPROVAL}: {signed}")
                raise refused(signed, "InvalidApproval")
            taken = Received(response=signed)
        if taken.response is not None:
            taken = self._approvals.check(taken.response, finished=self._finished())
        if taken.response is None:
            raise refused(taken.problem, "InvalidApproval")
        self._approvals.answer(taken.response)
        return self._approvals.waiting()

    async def _verified_approval(
        self, response: ToolApprovalResponse
    ) -> ToolApprovalResponse | str:
        """The worker's verdict on a signed answer for the call waiting under its id: the
        answer with the signer's groups as the worker's approvers file has them, or why it is
        refused."""
        echoed = shown.shorten(response.call_id, bounds.ECHO_CHARS)
        call = self._conversation.pending_call(response.call_id)
        if call is None:
            return f"call '{echoed}' is not waiting for an answer"
        request = signatures.approval_request(
            response, call, workflow_id=self._ctx.workflow_id, run_id=self._ctx.run_id
        )
        found = await signatures.verdict(request, f"the answer for call '{echoed}'")
        return (
            found
            if isinstance(found, str)
            else as_verified(response, found, own_keys=self._ctx.patched.own_keys)
        )

    # ---- submit_answer

    def answer(self, payload: RawValue) -> tuple[QuestionAnswer, AnswerValue]:
        """The validator: a question's answer and its value, checked as the run stands."""
        try:
            return self._questions.receive(
                self._decoded(names.UPDATE_SUBMIT_ANSWER, payload, "InvalidAnswer"),
                finished=self._finished(),
            )
        except ValueError as err:
            raise refused(err, "InvalidAnswer") from None

    async def submit_answer(self, payload: RawValue) -> list[PendingQuestion]:
        value = self._decoded(names.UPDATE_SUBMIT_ANSWER, payload, "InvalidAnswer")
        try:
            response = self._questions.parse(value)
        except ValueError as err:
            raise refused(err, "InvalidAnswer") from None
        question = self._questions.question(response.call_id)
        if response.signature and question:
            request = signatures.answer_request(
                response,
                question.call_id,
                question.arguments_sha256,
                workflow_id=self._ctx.workflow_id,
                run_id=self._ctx.run_id,
            )
            echoed = shown.shorten(response.call_id, bounds.ECHO_CHARS)
            found = await signatures.verdict(request, f"the answer for question '{echoed}'")
            if isinstance(found, str):
                self._ctx.warn(f"{names.UPDATE_SUBMIT_ANSWER}: {found}")
                raise refused(found, "InvalidAnswer")
            response = as_verified(response, found, own_keys=self._ctx.patched.own_keys)
        elif self._ctx.patched.own_keys:
            response = response.model_copy(update={"groups": None})
        try:
            response, answer = self._questions.check(response, finished=self._finished())
        except ValueError as err:
            raise refused(err, "InvalidAnswer") from None
        self._questions.answer(
            response.call_id, answer, approver=response.approver, groups=response.groups
        )
        return self._questions.shown()

    # ---- reopen_approval

    def reopen(self, payload: RawValue) -> ReopenRequest:
        """The validator: asking again, only for a call or question that waits, expired."""
        request = self._parsed_reopen(payload)
        if problem := self._reopen_problem(request.call_id):
            raise refused(problem, "InvalidReopen")
        return request

    def _parsed_reopen(self, payload: RawValue) -> ReopenRequest:
        parsed = parse_reopen(self._decoded(names.UPDATE_REOPEN_APPROVAL, payload, "InvalidReopen"))
        if parsed.value is None:
            raise refused(parsed.error, "InvalidReopen")
        return parsed.value

    def _reopen_problem(self, call_id: str) -> str | None:
        finished = self._finished()
        waiting = [] if finished else self.person_waiting()
        return reopen_problem(self._state, waiting, call_id, finished=finished)

    async def reopen_approval(self, payload: RawValue) -> None:
        request = self._parsed_reopen(payload)
        if request.signature is not None:
            problem = await self._verified_reopen(request)
            if problem := problem or self._reopen_problem(request.call_id):
                self._ctx.warn(f"{names.UPDATE_REOPEN_APPROVAL}: {problem}")
                raise refused(problem, "InvalidReopen")
        elif problem := self._reopen_problem(request.call_id):
            raise refused(problem, "InvalidReopen")
        self._waits.reopen(request, self._conversation.pending())

    async def _verified_reopen(self, request: ReopenRequest) -> str | None:
        echoed = shown.shorten(request.call_id, bounds.ECHO_CHARS)
        call = self._conversation.pending_call(request.call_id)
        if call is None:
            return f"call '{echoed}' is not waiting for an answer"
        check = signatures.reopen_request(
            request, call, workflow_id=self._ctx.workflow_id, run_id=self._ctx.run_id
        )
        found = await signatures.verdict(check, f"asking again for call '{echoed}'")
        return found if isinstance(found, str) else None

    # ---- set_approval_policy

    def policy(self, payload: RawValue) -> list[PolicyRule]:
        """The validator (and, with no await between, the handler's one check)."""
        if self._finished():
            raise refused("the run has finished", "InvalidApprovalPolicy")
        value = self._decoded(names.UPDATE_SET_APPROVAL_POLICY, payload, "InvalidApprovalPolicy")
        parsed = parse_approval_policy(value)
        if parsed.value is None:
            raise refused(parsed.error, "InvalidApprovalPolicy")
        if problem := self._approvals.policy.unmatchable(parsed.value.rules):
            raise refused(problem, "InvalidApprovalPolicy")
        return list(parsed.value.rules)

    def set_policy(self, payload: RawValue) -> PolicyView:
        self._approvals.set_run_rules(self.policy(payload))
        return self._approvals.policy.view()

    # ---- grant_budget

    def grant(self, payload: RawValue) -> BudgetGrant:
        """The validator: a grant, checked against the budget as it stands."""
        return self._checked_grant(self._parsed_grant(payload))

    def _parsed_grant(self, payload: RawValue) -> BudgetGrant:
        parsed = parse_grant(self._decoded(names.UPDATE_GRANT_BUDGET, payload, "InvalidGrant"))
        if parsed.value is None:
            raise refused(parsed.error, "InvalidGrant")
        return parsed.value

    def _checked_grant(self, grant: BudgetGrant, *, verified: bool = False) -> BudgetGrant:
        setup = self._state.setup
        allowed = setup.budget_groups if setup is not None else []
        groups_unknown = self._ctx.patched.own_keys and not verified
        if groups_unknown and grant.signature is not None:
            allowed = []  # the signer's groups are known once the worker verified it
        if error := self._budget.refusal(grant, allowed=allowed, finished=self._finished()):
            raise refused(error, "InvalidGrant")
        return grant

    async def grant_budget(self, payload: RawValue) -> BudgetStatus:
        grant = self._parsed_grant(payload)
        budget = self._budget.status()
        if self._ctx.patched.own_keys and grant.signature is None:
            grant = grant.model_copy(update={"groups": []})
        if grant.signature is not None and budget is not None:
            request = signatures.grant_request(
                grant, budget.limit, workflow_id=self._ctx.workflow_id, run_id=self._ctx.run_id
            )
            found = await signatures.verdict(request, "the grant")
            if isinstance(found, str):
                raise refused(found, "InvalidGrant")
            grant = as_verified(grant, found, own_keys=self._ctx.patched.own_keys)
            now = self._budget.status()
            if self._ctx.patched.own_keys and (now is None or now.limit != budget.limit):
                raise refused(budget_changed(budget.limit, now), "InvalidGrant")
        # As the run stands after the check:
        return self._budget.grant(self._checked_grant(grant, verified=True))

    # ---- decoding

    def _decoded(self, update: str, payload: RawValue, kind: str = "InvalidApproval") -> object:
        """An update's one payload (decoded, its seal's binding checked), or its refusal."""
        value, error = self._doors.update(update, payload)
        if error is not None:
            raise refused(error, kind)
        return value

    # ---- what waits

    def person_waiting(self) -> list[ToolCall]:
        """The calls and the questions' calls waiting for a person now."""
        pending = self._conversation.pending()
        return self._approvals.waiting() + self._questions.calls(pending)
