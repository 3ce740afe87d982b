"""The worker's count of a call's approvers, as the call runs.

A call the worker's enforced `ask` rule with `approvers` decides runs only when the request
carries (`ToolRequest.votes`) signed approvals of `count` distinct people of those groups: the
worker verifies each signature with its own `AGENT_APPROVER_KEY` (bound to this workflow, run,
call and the arguments that will run) and counts against its own rule, never the run's, so a
run whose state was forged cannot run the call short of its approvers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from runtime.approver_key import ApproverKey
from workflows.contract.arguments import arguments_digest
from workflows.contract.rules import PolicyRule
from workflows.gate.policy import Verdict
from workflows.gate.quorum import eligible
from workflows.model import ToolRequest
from workflows.people.signatures import SignedFields, canonical_groups, decision_of

Shortfall = Callable[[Verdict], str | None]
"""Why an enforced `ask` verdict's approvers are not all there, or None."""


def verified_approvers(
    request: ToolRequest, arguments: object, rule: PolicyRule, key: ApproverKey | None
) -> list[str]:
    """The distinct people of the rule's groups whose signed approval of this very call
    verifies."""
    approvers = rule.approvers
    if approvers is None or key is None or not request.votes or request.run_key is None:
        return []
    digest = arguments_digest(arguments)
    found: list[str] = []
    for vote in request.votes:
        if not vote.approved or not eligible(vote.groups, approvers):
            continue
        fields = SignedFields(
            approver=vote.approver,
            groups=canonical_groups(vote.groups),
            workflow_id=request.workflow_id,
            run_id=request.run_key,
            call_id=request.call_id,
            arguments_sha256=digest,
            decision=decision_of(True),
            signed_at=vote.signed_at,
        )
        if key.verifies(fields, vote.signature) and vote.approver not in found:
            found.append(vote.approver)
    return found


def shortfall(
    enforced: Sequence[PolicyRule],
    request: ToolRequest,
    arguments: object,
    key: ApproverKey | None,
) -> Shortfall:
    """The check of an enforced `ask` verdict: its rule's approvers against the verified votes."""

    def short(verdict: Verdict) -> str | None:
        if verdict.rule is None or verdict.rule >= len(enforced):
            return None
        rule = enforced[verdict.rule]
        if rule.approvers is None:
            return None
        counted = verified_approvers(request, arguments, rule, key)
        if len(counted) >= rule.approvers.count:
            return None
        groups = " or ".join(rule.approvers.groups)
        return (
            f"the worker's enforced rule {verdict.rule} needs {rule.approvers.count} approval(s)"
            f" of {groups}, and {len(counted)} verified"
            + (f" ({', '.join(counted)})" if counted else "")
        )

    return short
