"""Remember: an answer that becomes a rule of the run (`remember` on an answer).

Pure; no Temporal import.
"""

from __future__ import annotations

from collections.abc import Sequence

from workflows.contract.rules import MAX_RULE_REASON_CHARS, PolicyRule
from workflows.gate.policy import literal_glob
from workflows.model import ToolApprovalResponse


def remembered_rule(tool: str, answer: ToolApprovalResponse) -> PolicyRule:
    """The rule an answer with `remember` adds: always allow (or deny) this tool in this run."""
    reason = answer.reason
    if reason is not None:
        reason = reason[:MAX_RULE_REASON_CHARS]
    return PolicyRule(
        tool=literal_glob(tool), decision="allow" if answer.approved else "deny", reason=reason
    )


def remember(run_rules: Sequence[PolicyRule], rule: PolicyRule) -> list[PolicyRule]:
    """The run's rules with `rule` at the front. A later rule with the same `tool` can never
    decide again (the new rule, without `when`, matches every call it would), so it is dropped:
    the list stays as long as the tools remembered, however often people answer."""
    return [rule, *(r for r in run_rules if r.tool != rule.tool)]
