"""What-if: every recorded tool call of a run decided again by the product's own gate under a
proposed policy, beside what was decided then. Pure: no Temporal, no I/O (the runs are read by
`starter.what_if_runs`).

The proposed policy is a JSON file `{"enforced"?: [rules], "rules"?: [rules], "defaults"?:
[rules]}`: `enforced` and `defaults` as the worker's (`AGENT_POLICY_FILE`), `rules` as each run's
own (`options.approval_policy`). A list the file gives replaces that part; a list it leaves out
is the run's as it was (the worker's enforced and default rules as the run read them, the run's
own rules as it was started with them). Rules people remembered or set while a run went on are
their answers, not policy, and are never part of it.

Each call is decided by `workflows.gate.policy.evaluate` over `effective_rules(enforced, rules,
defaults)`, with the tool's spec as the run had it (whether it needs approval, its path
parameters and workspace, the run's `approval_required`), exactly as `RunPolicy.evaluate` does
in the workflow; a call that could not run at all (an unknown or disallowed tool, arguments that
are no JSON object) is never decided by a rule there, and is not here. `ask_user` calls are the
model's questions to a person, which no rule decides: they are left out.

Then and now are each one of three decisions: `allow` (ran without asking a person: a rule
allowed it, or its tool needs no approval), `ask` (a person was asked: whatever they answered,
or nobody did), `deny` (a rule refused it). A call changed when the decision differs; another
rule making the same decision is no change. A call with no decision then (it could not run, or
the run's audit no longer holds it) is not compared.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from workflows import bounds
from workflows.contract.rules import ApprovalPolicy, Origin, PolicyRule, Rules, WorkerPolicy
from workflows.gate.policy import effective_rules, evaluate
from workflows.gate.reconstruction import runnable
from workflows.model import AgentState, AuditEntry, ToolCall
from workflows.people.ask_user import ASK_USER
from workflows.shown import visible

Decision = Literal["allow", "ask", "deny", "none"]
"""`none`: no decision to compare (the call could not run, or its decision was not kept)."""


class ProposedPolicy(BaseModel):
    """A what-if policy file: every part optional (a part left out is each run's own)."""

    model_config = ConfigDict(extra="forbid")

    enforced: Rules | None = None
    rules: Rules | None = None
    defaults: Rules | None = None

    @model_validator(mode="after")
    def _bounded(self) -> ProposedPolicy:
        for part in (self.enforced, self.rules, self.defaults):
            if part is not None:
                ApprovalPolicy(rules=part)  # the size every list of rules keeps to
        return self


class PolicyFileError(ValueError):
    """A policy file that does not parse; the message names the file and the line."""


def parse_policy(text: str, name: str) -> ProposedPolicy:
    """The proposed policy in `text` (the file `name`); PolicyFileError naming the line of a JSON
    syntax error, or of the rule (or key) that does not validate."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise PolicyFileError(f"{name}: line {err.lineno}, column {err.colno}: {err.msg}") from None
    except RecursionError:
        raise PolicyFileError(f"{name}: line 1: nested too deeply") from None
    if not isinstance(data, dict):
        line = _line(text, _skip(text, 0))
        raise PolicyFileError(
            f'{name}: line {line}: a policy is a JSON object {{"enforced"?: [rules], "rules"?:'
            ' [rules], "defaults"?: [rules]}'
        )
    try:
        return ProposedPolicy.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        line = _line(text, _position(text, tuple(first["loc"][:2])))
        got = ""
        if first["type"] not in {"missing", "extra_forbidden"} and "input" in first:
            got = f" (got {json.dumps(first['input'], ensure_ascii=False)[:80]})"
        message = first["msg"].removeprefix("Value error, ")
        raise PolicyFileError(
            f"{name}: line {line}: {where or 'the policy'}: {message}{got}"
        ) from None


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _skip(text: str, at: int) -> int:
    match = _WHITESPACE.match(text, at)
    return match.end() if match else at


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _members(text: str, at: int) -> Iterable[tuple[Any, int, int]]:
    """The members of the JSON object or array starting at `at` (valid JSON): (key or index,
    where the key or item starts, where its value starts)."""
    closing = "}" if text[at] == "{" else "]"
    index, at = 0, _skip(text, at + 1)
    while text[at] != closing:
        start = at
        key: Any = index
        if closing == "}":
            key, at = _DECODER.raw_decode(text, at)
            at = _skip(text, _skip(text, at) + 1)  # past the colon
        _, end = _DECODER.raw_decode(text, at)
        yield key, start, at
        index, at = index + 1, _skip(text, end)
        if text[at] == ",":
            at = _skip(text, at + 1)


def _position(text: str, path: tuple[Any, ...]) -> int:
    """Where the member `path` (a top-level key, then an item) starts in the JSON `text`: a
    rule's first character, or a key's."""
    at = _skip(text, 0)
    for depth, part in enumerate(path):
        if text[at] not in "{[":
            return at
        for key, start, value in _members(text, at):
            if key == part:
                if depth == len(path) - 1:
                    return value if isinstance(part, int) else start
                at = value
                break
        else:
            return at
    return at


@dataclass(frozen=True)
class Then:
    """What was decided about a call when the run ran it."""

    decision: Decision
    text: str
    """For people: `allowed by rule 2`, `approved by ann`, `ran without asking`, …"""
    kind: str
    """`text` without names, for the summary: `approved by a person`, `allowed by rule 2`, …"""
    source: str | None = None
    """The audit's `source` (`person`, `policy`, `timeout`, `seed`), or None: no decision."""
    rule: int | None = None
    approver: str | None = None


@dataclass(frozen=True)
class Now:
    """What the proposed policy decides."""

    decision: Decision
    text: str
    rule: int | None = None
    origin: Origin | None = None
    reason: str | None = None


@dataclass(frozen=True)
class CallDecision:
    call: ToolCall
    then: Then
    now: Now

    @property
    def compared(self) -> bool:
        return self.then.decision != "none" and self.now.decision != "none"

    @property
    def changed(self) -> bool:
        return self.compared and self.then.decision != self.now.decision


def _then_of(entries: list[AuditEntry]) -> Then | None:
    decided = [e for e in entries if e.action == "decided"]
    if not decided:
        if any(e.action == "expired" for e in entries):
            return Then("ask", "expired unanswered", "expired unanswered", "timeout")
        return None
    entry = decided[-1]
    verdict = "approved" if entry.approved else "rejected"
    if entry.source == "policy":
        decision: Decision = "allow" if entry.approved else "deny"
        word = "allowed" if entry.approved else "denied"
        text = f"{word} by rule {entry.rule}"
        return Then(decision, text, text, "policy", entry.rule)
    if entry.source == "timeout":
        text = f"{verdict} by the approval timeout"
        return Then("ask", text, text, "timeout")
    if entry.source == "seed":
        text = f"{verdict} by the run's input"
        return Then("ask", text, text, "seed")
    who = ", ".join(entry.approvers or []) or entry.approver
    text = f"{verdict} by {visible(who)}" if who else f"{verdict} by a person"
    return Then("ask", text, f"{verdict} by a person", "person", approver=who)


def _now_of(
    call: ToolCall, state: AgentState, rules: Sequence[PolicyRule], origins: Sequence[Origin]
) -> Now:
    specs = {spec.name: spec for spec in state.tool_specs or []}
    allowed = set(specs) if state.options.tools is None else set(specs) & set(state.options.tools)
    if not runnable(call, allowed.__contains__, bounds.MAX_ARGUMENT_CHARS):
        return Now("none", "no decision: it cannot run (answered at once)")
    spec = specs.get(call.name)
    guarded = (spec is not None and spec.requires_approval) or call.name in (
        state.options.approval_required or []
    )  # the tool's own default, as `Approvals.guarded`
    verdict = evaluate(
        rules,
        call.name,
        call.arguments,
        requires_approval=guarded,
        path_parameters=spec.path_parameters if spec is not None else (),
        path_root=spec.path_root if spec is not None else None,
    )
    if verdict.rule is None:
        return Now(verdict.decision, f"{verdict.decision} (the tool's default)")
    origin = origins[verdict.rule]
    text = f"{verdict.decision} by rule {verdict.rule} ({origin})"
    if verdict.decision == "deny" and verdict.reason:
        text += f": {visible(verdict.reason)}"
    return Now(verdict.decision, text, verdict.rule, origin, verdict.reason)


def decide_again(
    state: AgentState,
    run_rules: Sequence[PolicyRule],
    proposed: ProposedPolicy,
    *,
    open_run: bool = False,
) -> list[CallDecision]:
    """Every tool call in the run's record, in order: what was decided then (its audit), and
    what the proposed policy decides (`run_rules`: the run's own rules as it was started)."""
    worker = state.worker_policy or WorkerPolicy()
    enforced = worker.enforced if proposed.enforced is None else proposed.enforced
    own = list(run_rules) if proposed.rules is None else proposed.rules
    defaults = worker.defaults if proposed.defaults is None else proposed.defaults
    rules = effective_rules(enforced, own, defaults)
    parts: list[tuple[Origin, int]] = [
        ("enforced", len(enforced)),
        ("run", len(own)),
        ("default", len(defaults)),
    ]
    origins = [origin for origin, count in parts for _ in range(count)]
    audit: dict[str, list[AuditEntry]] = {}
    for entry in state.audit:
        audit.setdefault(entry.call_id, []).append(entry)
    answered = {m.tool_call_id for m in state.messages if m.role == "tool"}
    calls = [
        call
        for message in state.messages
        if message.role == "assistant"
        for call in message.tool_calls or []
        if call.name != ASK_USER
    ]
    audited = [i for i, call in enumerate(calls) if call.id in audit]
    kept_from = audited[0] if state.audit_dropped and audited else 0
    if state.audit_dropped and not audited:
        kept_from = len(calls)
    decisions = []
    for index, call in enumerate(calls):
        now = _now_of(call, state, rules, origins)
        then = _then_of(audit.get(call.id, []))
        if then is None:
            then = _undecided(call, now, index < kept_from, call.id in answered, state, open_run)
        decisions.append(CallDecision(call, then, now))
    return decisions


def _undecided(
    call: ToolCall, now: Now, dropped: bool, answered: bool, state: AgentState, open_run: bool
) -> Then:
    """A call the audit holds no decision for."""
    if dropped:
        text = "not in the audit any more (it keeps its newest decisions)"
        return Then("none", text, "not in the audit")
    if now.decision == "none":  # it could not run: no rule decided it then either
        return Then("none", "answered at once (it could not run)", "answered at once")
    if answered:
        return Then("allow", "ran without asking", "ran without asking")
    if call.id in state.asked or (open_run and _guarded(call, state)):
        return Then("ask", "waiting for a person", "waiting for a person")
    if open_run:
        return Then("allow", "running without asking", "ran without asking")
    return Then("none", "never decided (the run ended first)", "never decided")


def _guarded(call: ToolCall, state: AgentState) -> bool:
    spec = next((s for s in state.tool_specs or [] if s.name == call.name), None)
    extra = state.options.approval_required or []
    return (spec is not None and spec.requires_approval) or call.name in extra


NOW_WORDS = {"ask": "would now ask", "allow": "would now be allowed", "deny": "would be denied"}


def summary_line(decisions: Sequence[CallDecision]) -> str:
    """`14 calls: 3 would now ask (allowed by rule 2 then), 1 would be denied (approved by a
    person then), 10 unchanged`."""
    total = len(decisions)
    parts: list[str] = []
    for decision in ("ask", "allow", "deny"):
        group = [d for d in decisions if d.changed and d.now.decision == decision]
        if not group:
            continue
        kinds = Counter(d.then.kind for d in group)
        if len(kinds) == 1:
            why = next(iter(kinds))
        else:
            why = ", ".join(f"{count} {kind}" for kind, count in kinds.most_common())
        parts.append(f"{len(group)} {NOW_WORDS[decision]} ({why} then)")
    parts.append(f"{sum(1 for d in decisions if d.compared and not d.changed)} unchanged")
    left_out = sum(1 for d in decisions if not d.compared)
    if left_out:
        parts.append(f"{left_out} not compared (no decision then or now)")
    return f"{total} call{'' if total == 1 else 's'}: " + ", ".join(parts)
