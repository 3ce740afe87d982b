"""The worker's count of a call's approvers, as the call runs.

A call the worker's enforced `ask` rule with `approvers` decides runs only when the request
carries (`ToolRequest.votes`) signed approvals of `count` distinct people of those groups: the
worker verifies each signature with its own approvers file (bound to this workflow, run, call and
the arguments that will run), takes each person's groups from that file (never from the vote),
leaves out a vote a signing service signed when the rule asks for own keys, and counts against its
own rule, never the run's, so a run whose state was forged cannot run the call short of its
approvers. The groups the worker's own escalation (`AGENT_ESCALATE_TO`) sent the call to count
besides the rule's; a run's own escalation never does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from runtime.approvers import ApproversFile
from workflows.contract.arguments import arguments_digest
from workflows.contract.rules import PolicyRule
from workflows.gate.policy import Verdict
from workflows.gate.quorum import eligible
from workflows.model import ToolRequest
from workflows.people.signatures import VerifyRequest, decision_of

Shortfall = Callable[[Verdict], str | None]
"""Why an enforced `ask` verdict's approvers are not all there, or None."""


def operator_groups(request: ToolRequest, escalate_to: Sequence[str]) -> list[str]:
    """The groups the call was escalated to that the worker's own AGENT_ESCALATE_TO names."""
    return [g for g in request.escalated_to or [] if g in escalate_to]


def verified_approvers(
    request: ToolRequest,
    arguments: object,
    rule: PolicyRule,
    approvers_file: ApproversFile | None,
    escalate_to: Sequence[str] = (),
) -> list[str]:
    """The distinct people of the rule's groups (as the approvers file has them) whose signed
    approval of this very call verifies."""
    approvers = rule.approvers
    if approvers is None or approvers_file is None or not request.votes:
        return []
    if request.run_key is None:
        return []
    digest = arguments_digest(arguments)
    extra = operator_groups(request, escalate_to)
    found: list[str] = []
    for vote in request.votes:
        if not vote.approved or vote.approver in found:
            continue
        if approvers.own_key and vote.signed_by is not None:
            continue
        verdict = approvers_file.verify(
            VerifyRequest(
                approver=vote.approver,
                workflow_id=request.workflow_id,
                run_id=request.run_key,
                call_id=request.call_id,
                arguments_sha256=digest,
                decision=decision_of(True),
                signed_at=vote.signed_at,
                signature=vote.signature,
                signed_by=vote.signed_by or "",
            )
        )
        if verdict.valid and eligible(verdict.groups or [], approvers, extra):
            found.append(vote.approver)
    return found


def shortfall(
    enforced: Sequence[PolicyRule],
    request: ToolRequest,
    arguments: object,
    approvers_file: ApproversFile | None,
    escalate_to: Sequence[str] = (),
) -> Shortfall:
    """The check of an enforced `ask` verdict: its rule's approvers against the verified votes."""

    def short(verdict: Verdict) -> str | None:
        if verdict.rule is None or verdict.rule >= len(enforced):
            return None
        rule = enforced[verdict.rule]
        if rule.approvers is None:
            return None
        counted = verified_approvers(request, arguments, rule, approvers_file, escalate_to)
        if len(counted) >= rule.approvers.count:
            return None
        every = [*rule.approvers.groups, *operator_groups(request, escalate_to)]
        groups = " or ".join(dict.fromkeys(every))
        own = " each with their own key" if rule.approvers.own_key else ""
        return (
            f"the worker's enforced rule {verdict.rule} needs {rule.approvers.count} approval(s)"
            f" of {groups}{own}, and {len(counted)} verified"
            + (f" ({', '.join(counted)})" if counted else "")
        )

    return short
