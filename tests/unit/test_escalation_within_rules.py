"""An escalation widens only a run's own approver rules: the groups a call was escalated to vote
on it under a run's rule, but not under the worker's enforced one (which the worker counts by
its own groups alone), whose call then refuses their vote at once and whose escalation says who
may answer."""

from __future__ import annotations

from datetime import UTC, datetime

from activities.notify_message import json_body, slack_text
from starter.render import event_line
from workflows.contract.rules import Approvers
from workflows.gate.quorum import (
    Escalated,
    Votes,
    escalated_groups,
    escalation_widens,
    only_who_escalated,
    rule_groups,
)
from workflows.model import (
    AgentState,
    ApprovalEscalatedEvent,
    NotifyRequest,
    ToolApprovalResponse,
    ToolCall,
)

AT = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
SIGNED_AT = "2026-12-02T09:00:00Z"
OPS = Approvers(groups=("ops",), count=1)
CALL = ToolCall(id="c1", name="delete_path", arguments='{"path": "logs"}')


def state() -> AgentState:
    return AgentState.model_validate(
        {"messages": [], "options": {}, "escalations": {"c1": ["oncall"]}}
    )


def test_an_escalation_widens_a_run_rule_but_not_an_enforced_one():
    assert escalation_widens(None)  # a run's rule (or none): the groups may answer
    assert not escalation_widens(OPS)  # the worker's enforced rule: they may not


def test_the_escalated_groups_are_counted_or_withheld():
    s = state()
    assert escalated_groups(s, "c1", None) == Escalated(counted=("oncall",))
    assert escalated_groups(s, "c1", OPS) == Escalated(withheld=("oncall",))
    assert escalated_groups(s, "c2", OPS) == Escalated()


def test_only_an_enforced_rule_names_the_groups_that_alone_may_answer():
    assert rule_groups(OPS) == ["ops"]
    assert rule_groups(None) is None


def test_the_refusal_says_the_escalation_does_not_widen_the_worker_rule():
    assert only_who_escalated(OPS, "delete_path", Escalated()) == (
        "only ops may approve delete_path"
    )
    assert only_who_escalated(OPS, "delete_path", Escalated(withheld=("oncall", "sre"))) == (
        "only ops may approve delete_path (the worker's enforced rule: the escalation to"
        " oncall, sre does not widen it)"
    )
    assert only_who_escalated(OPS, "delete_path", Escalated(counted=("oncall",))) == (
        "only ops or oncall may approve delete_path"
    )


def signed(who: str, groups: list[str]) -> ToolApprovalResponse:
    return ToolApprovalResponse(
        call_id="c1",
        approved=True,
        approver=who,
        groups=groups,
        signed_at=SIGNED_AT,
        signature="A" * 43 + "=",
    )


def test_votes_refuse_a_withheld_group_and_take_a_counted_one():
    s = state()
    withheld = Votes(s, emit=lambda _e: None, now=lambda: AT,
                     escalated=lambda c: escalated_groups(s, c, OPS))  # fmt: skip
    problem = withheld.refusal(signed("olga", ["oncall"]), CALL, OPS)
    assert problem is not None and "the escalation to oncall does not widen it" in problem
    assert withheld.refusal(signed("ann", ["ops"]), CALL, OPS) is None
    assert withheld.status(CALL, OPS).groups == ["ops"]
    counted = Votes(s, emit=lambda _e: None, now=lambda: AT,
                    escalated=lambda c: escalated_groups(s, c, None))  # fmt: skip
    assert counted.refusal(signed("olga", ["oncall"]), CALL, OPS) is None
    assert counted.status(CALL, OPS).groups == ["ops", "oncall"]
    assert counted.vote(signed("olga", ["oncall"]), CALL, OPS)  # counted: it decides


def notify(**fields: object) -> NotifyRequest:
    return NotifyRequest.model_validate(
        {"event": "approval_escalated", "workflow_id": "agent-42", "run_id": "run-1",
         "call_id": "c1", "tool": "delete_path", "arguments": "{}", "waiting_since": AT,
         "groups": ["oncall"], **fields}
    )  # fmt: skip


def test_the_notification_says_who_alone_may_answer():
    plain = notify()
    assert "rule_groups" not in json_body(plain, link=None, include_content=False)
    assert "rule_groups" not in plain.model_dump(mode="json")
    assert "only" not in slack_text(plain, link=None, include_content=False)
    held = notify(rule_groups=["ops"])
    body = json_body(held, link=None, include_content=False)
    assert (body["groups"], body["rule_groups"]) == (["oncall"], ["ops"])
    line = slack_text(held, link=None, include_content=False)
    assert "escalated to `oncall` (only `ops` may answer it: the worker's enforced rule)" in line


def test_the_event_names_the_calls_held_to_their_rule():
    plain = ApprovalEscalatedEvent(call_ids=["c1"], groups=["oncall"], at=AT)
    assert "rule_groups" not in plain.model_dump(mode="json")
    assert event_line(plain).endswith("approval_escalated c1 to oncall")
    held = ApprovalEscalatedEvent(
        call_ids=["c1", "c2"], groups=["oncall"], at=AT, rule_groups={"c1": ["ops"]}
    )
    assert held.model_dump(mode="json")["rule_groups"] == {"c1": ["ops"]}
    assert event_line(held).endswith(
        "approval_escalated c1, c2 to oncall; only ops may answer c1 (the worker's enforced rule)"
    )
