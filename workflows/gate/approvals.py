"""Approvals: the one owner of a run's answers.

Every call enters the run through `admit` (a model's reply, or the calls a run's input brings):
the rules decide it (`run_policy`: the worker's enforced rules, the run's, the worker's
defaults) or a person must. Every answer enters through `receive` (the `tool_approval` signal, the
`submit_approval` update, `tool_approval_responses` given at start), which applies the same
checks whatever the door, and is recorded by `answer` (a person's, a rule's, the timeout's or a
seeded one), which also applies an edit (`edits`, through the rules again) and `remember`.

No I/O: the workflow hands in the clock and where events go (`metrics` counts only in a run).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from workflows import bounds, metrics
from workflows.context import RunContext
from workflows.contract.arguments import arguments_digest
from workflows.contract.rules import Approvers, PolicyRule
from workflows.contract.tool_results import cut_off_message
from workflows.conversation.record import Conversation
from workflows.gate.audit import record_decision, record_remembered
from workflows.gate.edits import Edit, edited_call
from workflows.gate.policy import Verdict
from workflows.gate.quorum import (
    Escalated,
    Votes,
    approval_problem,
    escalated_groups,
    operator_escalation,
    rule_groups,
)
from workflows.gate.reconstruction import Respond, Step, runnable
from workflows.gate.remember import remember, remembered_rule
from workflows.gate.repeats import Repeats, already_rejected_message
from workflows.gate.run_policy import RunPolicy
from workflows.intake import parse_approval
from workflows.model import (
    ApprovalEvent,
    ApprovalRecord,
    ApprovalSource,
    BaseEvent,
    Quorum,
    ToolApprovalResponse,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
)
from workflows.shown import shorten

CHANGED_SINCE_SHOWN = "the call changed since it was shown"

Emit = Callable[[BaseEvent], None]


@dataclass(frozen=True)
class Received:
    """An answer as a door took it: the response, or why it was refused; `note` says what was
    changed on the way in (a reason cut to size)."""

    response: ToolApprovalResponse | None = None
    problem: str | None = None
    note: str | None = None


class Approvals:
    def __init__(
        self,
        ctx: RunContext,
        conversation: Conversation,
        *,
        after_answer: Callable[[], None] = lambda: None,
    ) -> None:
        self._state = state = ctx.state
        self._conversation = conversation
        self._run_id = ctx.run_id
        self._emit = ctx.emit
        self._warn = ctx.warn
        self._now = ctx.now
        self._after_answer = after_answer
        self._own_keys = ctx.patched.own_keys
        """Called after every answer is recorded (the workflow refreshes what people see)."""
        self._specs: dict[str, ToolSpec] = {s.name: s for s in state.tool_specs or []}
        self._runnable: dict[str, bool] = {}
        """Whether each call could run at all (a cache: derived from the call and the specs)."""
        self.policy = RunPolicy(state)
        """The run's effective rules and what they say about a call."""
        self.votes = Votes(
            state,
            emit=ctx.emit,
            now=ctx.now,
            escalated=self._escalated,
            groups_verified_late=ctx.patched.own_keys,
        )
        """The signed votes of calls under an approver rule (`workflows.gate.quorum`); the groups a
        call was escalated to may vote on it too, unless the worker's enforced rule decides it
        (`workflows.gate.quorum.escalated_groups`)."""
        self.repeats = Repeats(state, remember_who=ctx.patched.sessions_outlive_outages)
        self._audit_remembered = ctx.patched.sessions_outlive_outages

    # ---- the worker's tools

    def know_tools(self, specs: list[ToolSpec]) -> None:
        """The worker's tools, once its setup was read (they are kept in the state)."""
        self._state.tool_specs = specs
        self._specs = {s.name: s for s in specs}

    def spec(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    def offered_specs(self) -> list[ToolSpec]:
        """The specs of the tools the model is offered (what the request carries)."""
        allowed = set(self.allowed_tools())
        return [s for s in self._specs.values() if s.name in allowed]

    def allowed_tools(self) -> list[str]:
        """The tools this run may use: the worker's, less those the run's allow-list leaves out."""
        names = sorted(self._specs)
        allow = self._state.options.tools
        return names if allow is None else [n for n in names if n in allow]

    # ---- who must answer

    def guarded(self, call: ToolCall) -> bool:
        """The tool's own default: its spec requires approval, or the run's `approval_required`
        names it."""
        spec = self._specs.get(call.name)
        extra = self._state.options.approval_required or []
        return (spec is not None and spec.requires_approval) or call.name in extra

    def requires_approval(self, call: ToolCall) -> bool:
        """Whether the call runs only with an answer (a person's or a rule's)."""
        state = self._state
        needed = self.guarded(call) or call.id in state.asked or call.id in state.answers
        return needed and self.can_run(call)

    def can_run(self, call: ToolCall) -> bool:
        """A call that cannot run (unknown or disallowed tool, arguments that are not one JSON
        object a tool takes, the same call again past the repeat limit) is answered at once: it
        never waits for a person."""
        known = self._runnable.get(call.id)
        if known is None:
            allowed = set(self.allowed_tools())
            known = runnable(call, allowed.__contains__, bounds.MAX_ARGUMENT_CHARS)
            known = known and self.repeats.refusal(call) is None
            self._runnable[call.id] = known
        return known

    def verdict(self, call: ToolCall) -> Verdict | None:
        """What the rules say about a call; None for a call that cannot run at all."""
        if not self.can_run(call):
            return None
        return self._evaluate(call)

    def _evaluate(self, call: ToolCall) -> Verdict:
        """The rules' decision (`RunPolicy.evaluate`)."""
        spec = self._specs.get(call.name)
        return self.policy.evaluate(call, spec, requires_approval=self.guarded(call))

    def approvers_for(self, call: ToolCall) -> Approvers | None:
        """The approvers the rule deciding this call names, or None."""
        verdict = self._evaluate(call)
        if verdict.decision != "ask" or verdict.rule is None:
            return None
        return self.policy.effective()[verdict.rule].approvers

    def enforced_approvers(self, call: ToolCall) -> Approvers | None:
        """The approvers of the worker's enforced rule that decides this call, or None (another
        rule decides it, or none names approvers)."""
        worker = self._state.worker_policy
        if worker is None:
            return None
        verdict = self._evaluate(call)
        if (
            verdict.decision != "ask"
            or verdict.rule is None
            or verdict.rule >= len(worker.enforced)
        ):
            return None
        return worker.enforced[verdict.rule].approvers

    def _escalated(self, call_id: str) -> Escalated:
        """The groups a waiting call was escalated to, as its votes are counted."""
        call = self._conversation.pending_call(call_id)
        enforced = None if call is None else self.enforced_approvers(call)
        return escalated_groups(self._state, call_id, enforced, operator=self._operator())

    def rule_groups(self, call: ToolCall) -> list[str] | None:
        """For an escalated call: the only groups that may answer it (its enforced rule's), or
        None (`workflows.people.expiry.rule_groups`)."""
        return rule_groups(self.enforced_approvers(call), operator=self._operator())

    def _operator(self) -> bool:
        """Whether the run's escalation is the operator's own (which widens the operator's
        enforced rule once the call is escalated)."""
        return self._own_keys and operator_escalation(self._state)

    def escalated_by_operator(self, call_id: str) -> list[str] | None:
        """The groups a call was escalated to by the operator's own escalation (the worker
        counts them with its enforced rule as the call runs), or None."""
        groups = self._state.escalations.get(call_id)
        return list(groups) if groups and self._operator() else None

    def quorums(self) -> list[Quorum]:
        """The waiting calls under an approver rule: who may answer, the approvals so far."""
        found = ((call, self.approvers_for(call)) for call in self.waiting())
        return [self.votes.status(call, needed) for call, needed in found if needed is not None]

    def set_run_rules(self, rules: Sequence[PolicyRule]) -> None:
        """Replace the run's rules; the calls waiting for a person that they decide now are
        decided at once."""
        self._state.run_rules = list(rules)
        self.decide_waiting()

    # ---- calls entering the run: the one gate

    def admit(self, calls: Sequence[ToolCall], *, from_text: bool = False) -> None:
        """New calls (a reply's, or those a run's input brings): the `tool_call` events, then
        what the rules decide (recorded as answers of the `policy`); the rest wait for a person."""
        verdicts = {call.id: self.verdict(call) for call in calls}
        for call in calls:
            verdict = verdicts[call.id]
            if verdict is not None and verdict.decision == "ask" and verdict.rule is not None:
                self._state.asked.append(call.id)
        for call in calls:
            verdict = verdicts[call.id]
            self._emit(
                ToolCallEvent(
                    call_id=call.id,
                    name=call.name,
                    arguments=bounds.event_arguments(call.arguments),
                    requires_approval=verdict is not None and verdict.decision == "ask",
                    from_text=True if from_text else None,
                )
            )
        for call in calls:
            if (refusal := self.repeats.refusal(call)) is not None:
                echoed = shorten(call.id, bounds.ECHO_CHARS)
                self._warn(f"call '{echoed}' {call.name}: {refusal.warning}")
        for call in calls:
            self._decide_by_rule(call, verdicts[call.id])

    def decide_waiting(self) -> None:
        """After the rules changed: the calls waiting for a person that they decide now. An
        expired call is not among them: it waits for a person to ask again (a rule set or
        remembered since never decides it)."""
        for call in self.waiting():
            if self._own_keys and call.id in self._state.expired:
                continue
            self._decide_by_rule(call, self.verdict(call))

    def _decide_by_rule(self, call: ToolCall, verdict: Verdict | None) -> None:
        """A rule's `allow` or `deny` is an answer like a person's (source `policy`)."""
        if verdict is None or verdict.rule is None or verdict.decision == "ask":
            return
        approved = verdict.decision == "allow"
        self.answer(
            ToolApprovalResponse(
                call_id=call.id, approved=approved, reason=None if approved else verdict.reason
            ),
            source="policy",
            rule=verdict.rule,
        )

    # ---- answers

    def unanswered(self, pending: list[ToolCall]) -> list[ToolCall]:
        """The pending calls a person must still answer."""
        answers = self._state.answers
        return [c for c in pending if self.requires_approval(c) and c.id not in answers]

    def waiting(self) -> list[ToolCall]:
        """The calls of the conversation waiting for a person now."""
        return self.unanswered(self._conversation.pending())

    def approved_by(self, call_id: str) -> ApprovalSource | None:
        """Who approved a call about to run, for the worker (its enforced `ask` needs a
        person); None: it runs without an approval."""
        record = self._state.answers.get(call_id)
        return record.source if record is not None and record.approved else None

    def reserved_for_person(self, call_id: str) -> bool:
        """Whether an enforced `ask` rule sends this waiting call to a person: only a person's
        answer satisfies it, not a seeded one."""
        call = self._conversation.pending_call(call_id)
        worker = self._state.worker_policy
        if call is None or worker is None:
            return False
        verdict = self._evaluate(call)
        return (
            verdict.decision == "ask"
            and verdict.rule is not None
            and verdict.rule < len(worker.enforced)
        )

    def decided(self) -> list[ApprovalRecord]:
        return list(self._state.answers.values())

    def receive(self, payload: object, *, finished: bool) -> Received:
        """An answer through any door: parsed (`parse`), then checked against the run as it
        stands (`check`), before its signature's check."""
        taken = self.parse(payload)
        if taken.response is None:
            return taken
        return self.check(taken.response, finished=finished, note=taken.note, verified=False)

    def parse(self, payload: object) -> Received:
        """An answer validated and bounded (`parse_approval`); nothing about the run checked.
        The groups an unsigned answer claims are dropped: a person's groups are the worker's
        approvers file's, known only from a signature's check."""
        if isinstance(payload, ToolApprovalResponse):
            payload = payload.model_dump(mode="json")
        parsed = parse_approval(payload)
        if parsed.value is None:
            return Received(problem=parsed.error or "invalid tool approval")
        response = parsed.value
        if self._own_keys and response.signature is None and response.groups is not None:
            response = response.model_copy(update={"groups": None})
        return Received(response=response, note=parsed.note)

    def check(
        self,
        response: ToolApprovalResponse,
        *,
        finished: bool,
        note: str | None = None,
        verified: bool = True,
    ) -> Received:
        """Whether a parsed answer can be taken now: for the call that was shown (`run_id`,
        `arguments_sha256`), for a call waiting now, from someone who may answer it (their
        groups are known once `verified`: the worker checked the signature)."""
        if response.run_id is not None and response.run_id != self._run_id:
            other = f"{CHANGED_SINCE_SHOWN} (it belongs to another run)"
            return Received(problem=other, note=note)
        problem = self.problem(response.call_id, finished=finished)
        if problem is None:
            problem = approval_problem(self._state, response)
        if problem is not None:
            return Received(problem=problem, note=note)
        call = self._conversation.pending_call(response.call_id)
        if response.arguments_sha256 is not None:
            if call is not None and arguments_digest(call.arguments) != response.arguments_sha256:
                return Received(problem=f"{CHANGED_SINCE_SHOWN} (its arguments differ)", note=note)
        if call is not None and (needed := self.approvers_for(call)) is not None:
            refusal = self.votes.refusal(response, call, needed, verified=verified)
            if refusal is not None:
                return Received(problem=refusal, note=note)
        return Received(response=response, note=note)

    def problem(self, call_id: str, *, finished: bool) -> str | None:
        """Why an answer for `call_id` cannot be taken now, or None when it can."""
        if finished:
            return "the run has finished"
        shown = shorten(call_id, bounds.ECHO_CHARS)
        pending = self._conversation.pending()
        guarded = [c for c in pending if self.requires_approval(c)]
        if call_id in self._state.answers:
            return f"call '{shown}' was already answered"
        if call_id in {c.id for c in guarded}:
            return None
        if self._conversation.answered(call_id):
            return f"call '{shown}' was already answered"
        if not guarded:
            return f"no call is waiting for approval (got an answer for '{shown}')"
        known = shorten(", ".join(c.id for c in guarded), 400)
        return f"unknown call id '{shown}' (waiting: {known})"

    def answer(
        self,
        response: ToolApprovalResponse,
        *,
        source: ApprovalSource = "person",
        rule: int | None = None,
    ) -> None:
        """Record an answer (taken through `receive`, or a rule's or the timeout's): its event,
        the edited call, a remembered rule. A person's answer to a call under an approver rule
        is a vote: the call is answered once the votes decide it."""
        call = self._conversation.pending_call(response.call_id)
        needed = self.approvers_for(call) if source == "person" and call is not None else None
        approvers: list[str] | None = None
        reasons: dict[str, str | None] | None = None
        if call is not None and needed is not None:
            if not self.votes.vote(response, call, needed):
                self._after_answer()
                return
            approvers = self.votes.approvers_of(call.id, needed) if response.approved else None
            approvers = approvers or [response.approver or ""]
            reasons = self.votes.reasons(call.id, approvers)
            response = response.model_copy(update={"approver": ", ".join(approvers)})
        edit = None
        if response.approved and response.arguments is not None and call is not None:
            edit = edited_call(call, response.arguments)
            if self._refuse_edit(response, edit):
                self._after_answer()
                return
            self._conversation.replace_call(edit.call)
            self._runnable.pop(call.id, None)  # the call changed: work out again if it can run
        record = ApprovalRecord(
            call_id=response.call_id,
            approved=response.approved,
            reason=response.reason,
            approver=response.approver,
            at=self._now(),
            source=source,
            rule=rule,
            groups=response.groups,
            signed_at=response.signed_at,
            signature=response.signature,
            approvers=approvers,
            reasons=reasons,
            signed_by=response.signed_by,
        )
        self._record(record, edit, call)
        if response.remember and call is not None:
            self._state.run_rules = remember(
                self._state.run_rules, remembered_rule(call.name, response)
            )
            self.decide_waiting()
        self._after_answer()

    def _refuse_edit(self, response: ToolApprovalResponse, edit: Edit) -> bool:
        """Edited arguments are a new call: a rule that denies them answers the call
        `Rejected: {reason}` instead (a person's approval never loosens a rule)."""
        verdict = self._evaluate(edit.call)
        if verdict.decision != "deny" or verdict.rule is None:
            return False
        record = ApprovalRecord(
            call_id=response.call_id,
            approved=False,
            reason=verdict.reason,
            approver=response.approver,
            at=self._now(),
            source="policy",
            rule=verdict.rule,
        )
        self._record(record, edit, edit.call)
        return True

    def _record(self, record: ApprovalRecord, edit: Edit | None, call: ToolCall | None) -> None:
        self._state.answers[record.call_id] = record
        metrics.approval_recorded(record, self._state.approval_wait)
        if call is not None:
            ran = edit.call if edit is not None else call
            record_decision(self._state, ran, record, edited=edit is not None)
        self._emit(
            ApprovalEvent(
                **record.model_dump(),
                arguments=None if edit is None else bounds.event_arguments(edit.call.arguments),
                original_arguments=(
                    None if edit is None else bounds.event_arguments(edit.original_arguments)
                ),
            )
        )

    def apply_seed(self, responses: Sequence[ToolApprovalResponse], *, finished: bool) -> None:
        """Answers given at start (`tool_approval_responses`) apply at the first iteration,
        through the same door as a person's (recorded with source `seed`); a call that needs
        approval and has no answer is then denied."""
        if not responses:
            return
        for given in responses:
            self._seed(given, finished=finished)
        self._state.seed_mode = bool(self._conversation.pending())

    def _seed(self, given: ToolApprovalResponse, *, finished: bool) -> None:
        """One answer given at start, through the door a person's takes (source `seed`)."""
        taken = self.receive(given, finished=finished)
        if taken.note:
            self._warn(f"tool_approval_responses: {taken.note}")
        if taken.response is None:
            self._warn(f"tool_approval_responses: {taken.problem}; ignored")
            return
        response = taken.response
        waiting = self._conversation.pending_call(response.call_id)
        if waiting is not None and self.approvers_for(waiting) is not None:
            shown = shorten(response.call_id, bounds.ECHO_CHARS)
            self._warn(f"tool_approval_responses: call '{shown}' is for its approvers; ignored")
            return
        if self.reserved_for_person(response.call_id):
            call = shorten(response.call_id, bounds.ECHO_CHARS)
            why = "is for a person to answer (an enforced rule asks); ignored"
            self._warn(f"tool_approval_responses: call '{call}' {why}")
            return
        self.answer(response, source="seed")

    def refusal(self, call: ToolCall, arguments_error: str | None) -> str | None:
        """What a call that must not run is answered instead: the repeat limit, or arguments cut
        off at the token limit (told in terms the model can act on)."""
        repeat = self.repeats.refusal(call)
        if repeat is not None:
            return repeat.content
        if arguments_error is not None and call.id in self._state.cut_off:
            return cut_off_message(self._state.cut_off[call.id])
        return None

    def audit_remembered(self, steps: Sequence[Step]) -> None:
        """The calls of a batch answered with a person's no remembered for the turn (nobody was
        asked) join the audit, as the calls people answered do."""
        if not self._audit_remembered:
            return
        for step in steps:
            if not isinstance(step, Respond) or step.call.id in self._state.answers:
                continue
            no = self.repeats.remembered(step.call)
            if no is None or step.content != already_rejected_message(step.call, no.reason):
                continue
            record_remembered(self._state, step.call, no.approver, no.reason, self._now())

    def batch_done(self) -> None:
        """The pending calls all have their tool messages: their answers are spent."""
        self._state.answers.clear()
        self.votes.clear()
        self._state.seed_mode = False
        self._state.cut_off.clear()
        self._state.asked.clear()
        self._state.expired.clear()
        self._state.escalations.clear()
