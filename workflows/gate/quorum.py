"""Approver rules: who may answer a call, and how many must.

An `ask` rule may name `approvers: {"groups": [...], "count": N}`. A call it decides runs only
after N distinct people of those groups approved it, each with a signed answer (the worker
verified the signature before the run took it); the same person twice counts once, and one
rejection from an eligible person rejects the call. Anyone else's answer (another group, or
unsigned) is refused with the reason. Groups a call was escalated to are eligible too under a
run's own rule (`Escalated.counted`); under the worker's enforced rule they are not
(`Escalated.withheld`: the worker counts that rule's groups alone), and their answer is refused
at once, saying so.

Pure functions and one small class over the run's state; no Temporal import.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from workflows import bounds
from workflows.contract.rules import Approvers, PolicyRule
from workflows.model import (
    AgentState,
    ApprovalVoteEvent,
    BaseEvent,
    Quorum,
    ToolApprovalResponse,
    ToolCall,
    Vote,
)
from workflows.shown import shorten


@dataclass(frozen=True)
class Escalated:
    """The groups a call was escalated to, as its votes are counted: `counted` may answer it
    besides its rule's groups; `withheld` may not (the worker's enforced rule decides the call,
    and the worker counts that rule's groups alone)."""

    counted: tuple[str, ...] = ()
    withheld: tuple[str, ...] = ()


def only_who_escalated(approvers: Approvers, tool: str, escalated: Escalated) -> str:
    """The refusal's reason, naming an escalation that does not widen the worker's rule:
    `only ops may approve delete_path (the worker's enforced rule: the escalation to oncall
    does not widen it)`."""
    only = only_who(approvers, tool, escalated.counted)
    if not escalated.withheld:
        return only
    groups = ", ".join(escalated.withheld)
    return f"{only} (the worker's enforced rule: the escalation to {groups} does not widen it)"


def eligible_groups(approvers: Approvers, extra_groups: Iterable[str] = ()) -> list[str]:
    """The groups whose people may answer: the rule's, then any extra ones, each once."""
    return list(dict.fromkeys([*approvers.groups, *extra_groups]))


def eligible(groups: Iterable[str], approvers: Approvers, extra_groups: Iterable[str] = ()) -> bool:
    """Whether a person of `groups` may answer a call under `approvers` (`extra_groups`: groups
    the call was escalated to)."""
    return bool(set(groups) & set(eligible_groups(approvers, extra_groups)))


def only_who(approvers: Approvers, tool: str, extra_groups: Iterable[str] = ()) -> str:
    """The refusal's reason: `only ops may approve delete_path`."""
    return f"only {' or '.join(eligible_groups(approvers, extra_groups))} may approve {tool}"


def distinct_approvers(
    votes: Sequence[Vote], approvers: Approvers, extra_groups: Iterable[str] = ()
) -> list[str]:
    """The distinct eligible people who approved, in order (the same person twice counts once)."""
    extra = list(extra_groups)
    names = [v.approver for v in votes if v.approved and eligible(v.groups, approvers, extra)]
    return list(dict.fromkeys(names))


def weaker_rule(
    run_rules: Sequence[PolicyRule], enforced: Sequence[PolicyRule], tools: Iterable[str]
) -> str | None:
    """Why a run's rules would lower an enforced approver rule's count or widen its groups for a
    tool both can match, or None. (An enforced rule comes first and decides, so such a run rule
    could only mislead whoever reads the rules.)"""
    names = list(tools)
    for index, rule in enumerate(run_rules):
        if rule.approvers is None:
            continue
        for number, strict in enumerate(enforced):
            if strict.approvers is None:
                continue
            both = [n for n in names if fnmatch.fnmatchcase(n, rule.tool)]
            both = [n for n in both if fnmatch.fnmatchcase(n, strict.tool)]
            if not both:
                continue
            where = f"rule {index} ({rule.tool})"
            if rule.approvers.count < strict.approvers.count:
                return (
                    f"{where} asks {rule.approvers.count} approver(s) where the worker's enforced"
                    f" rule {number} asks {strict.approvers.count}: a run cannot lower it"
                )
            wider = sorted(set(rule.approvers.groups) - set(strict.approvers.groups))
            if wider:
                return (
                    f"{where} lets {', '.join(wider)} approve where the worker's enforced rule"
                    f" {number} lets only {', '.join(strict.approvers.groups)}: a run cannot"
                    " widen it"
                )
    return None


def unmeetable(rules: Sequence[PolicyRule], people: dict[str, int], *, origin: str) -> str | None:
    """Why one of `rules` asks for approvers nobody could be: a group no one in the approvers
    file is in, or more people than its groups have (`people`: each group and how many people
    are in it), naming the rule; None when every approver rule can be met."""
    for index, rule in enumerate(rules):
        if rule.approvers is None:
            continue
        groups = rule.approvers.groups
        empty = [g for g in groups if not people.get(g)]
        where = f"rule {index} ({origin}, {rule.tool})"
        if len(empty) == len(groups):
            return (
                f"{where} asks {' or '.join(groups)} to approve, and no one in the approvers"
                " file is in " + ("it" if len(groups) == 1 else "them")
            )
        most = sum(people.get(g, 0) for g in groups)
        if rule.approvers.count > most:
            return (
                f"{where} asks {rule.approvers.count} people of {' or '.join(groups)}, and the"
                f" approvers file has {most}"
            )
    return None


class Votes:
    """The votes of a run's waiting calls under an approver rule (kept in `state.votes`)."""

    def __init__(
        self,
        state: AgentState,
        *,
        emit: Callable[[BaseEvent], None],
        now: Callable[[], datetime],
        escalated: Callable[[str], Escalated] = lambda _call_id: Escalated(),
        groups_verified_late: bool = False,
    ) -> None:
        self._state = state
        self._emit = emit
        self._now = now
        self._escalated = escalated
        self._groups_verified_late = groups_verified_late
        """A vote's groups are the worker's, known once it verified the signature: before that
        only what the vote says of itself is checked (a run started before own keys believed
        the groups a signed answer named, and checked them first)."""
        """The groups a call was escalated to: those eligible besides the rule's, and those
        not (`workflows.people.expiry.escalated_groups`)."""

    def _extra(self, call_id: str) -> tuple[str, ...]:
        return self._escalated(call_id).counted

    def refusal(
        self,
        response: ToolApprovalResponse,
        call: ToolCall,
        approvers: Approvers,
        *,
        verified: bool = True,
    ) -> str | None:
        """Why this answer cannot count for the call, or None: checked before the signature's
        check (`verified` False) and after it."""
        escalated = self._escalated(call.id)
        only = only_who(approvers, call.name, escalated.counted)
        if response.signature is None or response.approver is None:
            return f"{only}, each with a signed answer (this one is not signed)"
        if approvers.own_key and response.signed_by is not None:
            return (
                f"{only}, each signing with their own key: this answer was signed for"
                f" {shorten(response.approver, bounds.ECHO_CHARS)} by the signing service"
                f" '{shorten(response.signed_by, bounds.ECHO_CHARS)}', which this rule does"
                " not take"
            )
        groups_known = verified or not self._groups_verified_late
        if groups_known and not eligible(response.groups or [], approvers, escalated.counted):
            return only_who_escalated(approvers, call.name, escalated)
        if response.remember or response.arguments is not None:
            return (
                f"a call under an approver rule takes neither 'remember' nor 'arguments' ({only})"
            )
        if any(v.approver == response.approver for v in self._state.votes.get(call.id, [])):
            who = shorten(response.approver, bounds.ECHO_CHARS)
            shown = shorten(call.id, bounds.ECHO_CHARS)
            return f"{who} has already answered call '{shown}' (the same person counts once)"
        return None

    def vote(self, response: ToolApprovalResponse, call: ToolCall, approvers: Approvers) -> bool:
        """Take one signed, verified, eligible answer: its `approval_vote` event. True when it
        decides the call (a rejection, or the last approval needed)."""
        assert response.approver is not None and response.signature is not None
        assert response.signed_at is not None
        votes = self._state.votes.setdefault(call.id, [])
        votes.append(
            Vote(
                approver=response.approver,
                groups=list(response.groups or []),
                approved=response.approved,
                at=self._now(),
                signed_at=response.signed_at,
                signature=response.signature,
                signed_by=response.signed_by,
                reason=response.reason,
            )
        )
        approved = self.approvers_of(call.id, approvers)
        self._emit(
            ApprovalVoteEvent(
                call_id=call.id,
                approver=response.approver,
                groups=list(response.groups or []),
                approved=response.approved,
                votes=len(approved),
                needed=approvers.count,
                reason=response.reason,
                signed_by=response.signed_by,
            )
        )
        self._state.audit_counts.votes += 1
        return not response.approved or len(approved) >= approvers.count

    def approvers_of(self, call_id: str, approvers: Approvers) -> list[str]:
        """The distinct eligible people who approved the call so far."""
        votes = self._state.votes.get(call_id, [])
        return distinct_approvers(votes, approvers, self._extra(call_id))

    def reasons(self, call_id: str, names: Sequence[str]) -> dict[str, str | None]:
        """What each of `names` said with their vote on the call (their last vote)."""
        said = {v.approver: v.reason for v in self._state.votes.get(call_id, [])}
        return {name: said.get(name) for name in names}

    def approving(self, call_id: str) -> list[Vote] | None:
        """The votes a call runs with (for the worker's own count), or None: it had none."""
        votes = self._state.votes.get(call_id)
        return [v for v in votes if v.approved] if votes else None

    def status(self, call: ToolCall, approvers: Approvers) -> Quorum:
        approved = self.approvers_of(call.id, approvers)
        return Quorum(
            call_id=call.id,
            tool=call.name,
            groups=eligible_groups(approvers, self._extra(call.id)),
            needed=approvers.count,
            approvers=approved,
            reasons=self.reasons(call.id, approved),
            own_key=approvers.own_key,
        )

    def clear(self) -> None:
        self._state.votes.clear()


# ---- escalation and expiry: who may answer a waiting call


def extra_groups(state: AgentState, call_id: str) -> list[str]:
    """The groups that may answer `call_id` besides those its rule names: the groups it was
    escalated to (none before it waited `approval_escalate_after_seconds`)."""
    return list(state.escalations.get(call_id, []))


def escalation_widens(enforced: Approvers | None, *, operator: bool = False) -> bool:
    """Whether a call's escalation groups may answer it besides its approver rule's groups:
    unless the worker's enforced rule (`enforced`, its approvers) decides the call and the
    escalation is the run's own (its options named the groups); the operator's own escalation
    (the worker's AGENT_ESCALATE_TO, `operator`) widens the operator's rule, and the worker
    counts those groups too."""
    return enforced is None or operator


def escalated_groups(
    state: AgentState, call_id: str, enforced: Approvers | None, *, operator: bool = False
) -> Escalated:
    """The groups `call_id` was escalated to, as its votes are counted: eligible besides its
    rule's groups (`counted`), or not (`withheld`: `enforced` decides it, and the run chose the
    escalation)."""
    groups = tuple(extra_groups(state, call_id))
    if escalation_widens(enforced, operator=operator):
        return Escalated(counted=groups)
    return Escalated(withheld=groups)


def rule_groups(enforced: Approvers | None, *, operator: bool = False) -> list[str] | None:
    """For an escalated call: the groups of the worker's enforced approver rule, the only ones
    that may answer it (the run's escalation does not widen that rule), or None: the escalation
    groups may answer it too."""
    if enforced is None or operator:
        return None
    return list(enforced.groups)


def operator_escalation(state: AgentState) -> bool:
    """Whether the run's escalation is the operator's: its groups are the worker's
    AGENT_ESCALATE_TO (the run's options named none)."""
    setup = state.setup
    return (
        state.options.approval_escalate_to is None and setup is not None and bool(setup.escalate_to)
    )


def approval_problem(state: AgentState, response: ToolApprovalResponse) -> str | None:
    """Why an answer is refused because its call expired, or None: an expired call may be
    rejected, but approved only after it was asked again."""
    if response.approved and response.call_id in state.expired:
        shown = shorten(response.call_id, bounds.ECHO_CHARS)
        return (
            f"call '{shown}' has expired: ask again first (reopen_approval, `Ask again`), or"
            " reject it"
        )
    return None
