"""What a fork takes of the original's first options: its own rules and settings, never an
answer given at start, an option the workflow does not know, or a sub-agent's parent."""

from __future__ import annotations

from starter.fork import fork_options
from workflows.contract.rules import ApprovalPolicy
from workflows.model import (
    AgentRunOptions,
    ForkedFrom,
    SubAgentOf,
    ToolApprovalResponse,
)

PROVENANCE = ForkedFrom(workflow_id="w", run_id="r", round=1)


def test_a_fork_keeps_the_runs_own_rules_and_settings() -> None:
    policy = ApprovalPolicy.model_validate({"rules": [{"tool": "delete_path", "decision": "deny"}]})
    original = AgentRunOptions(max_rounds=7, approval_policy=policy)
    forked = fork_options(original, PROVENANCE)
    assert forked.max_rounds == 7
    assert forked.approval_policy == policy
    assert forked.forked_from == PROVENANCE


def test_a_fork_drops_answers_unknown_options_and_a_parent() -> None:
    original = AgentRunOptions.model_validate(
        {
            "tool_approval_responses": [
                ToolApprovalResponse(call_id="c", approved=True).model_dump()
            ],
            "from_the_future": 1,
            "parent": SubAgentOf(workflow_id="p", run_id="pr", call_id="c").model_dump(),
        }
    )
    forked = fork_options(original, PROVENANCE)
    assert forked.tool_approval_responses == []
    assert forked.model_extra == {}
    assert forked.parent is None
