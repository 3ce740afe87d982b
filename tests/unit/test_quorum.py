"""Approver rules' pure parts: who is eligible (escalation groups too), distinct approvers, a run
rule that would weaken an enforced one, and what a rule with approvers may say."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from starter.render import quorum_text, rule_line
from workflows.contract.rules import Approvers, PolicyEntry, PolicyRule
from workflows.gate.quorum import distinct_approvers, eligible, only_who, weaker_rule
from workflows.model import Quorum, Vote

OPS = Approvers(groups=("ops",), count=2)


def vote(who: str, groups: list[str], approved: bool = True) -> Vote:
    now = datetime.now(UTC)
    return Vote(
        approver=who, groups=groups, approved=approved, at=now, signed_at="x", signature="y"
    )


def test_eligibility_is_any_shared_group_and_takes_extra_groups():
    assert eligible(["ops", "dev"], OPS)
    assert not eligible(["dev"], OPS) and not eligible([], OPS)
    assert eligible(["sec"], OPS, extra_groups=["sec"])  # escalated to sec
    assert only_who(OPS, "delete_path") == "only ops may approve delete_path"
    assert only_who(OPS, "delete_path", ["sec"]) == "only ops or sec may approve delete_path"


def test_the_same_person_counts_once_and_only_eligible_approvals_count():
    votes = [vote("alice", ["ops"]), vote("alice", ["ops"]), vote("mallory", ["dev"]),
             vote("bob", ["ops"], approved=False), vote("carol", ["ops"])]  # fmt: skip
    assert distinct_approvers(votes, OPS) == ["alice", "carol"]
    assert distinct_approvers(votes, OPS, ["dev"]) == ["alice", "mallory", "carol"]


def rule(tool: str, groups: tuple[str, ...], count: int) -> PolicyRule:
    return PolicyRule(tool=tool, decision="ask", approvers=Approvers(groups=groups, count=count))


@pytest.mark.parametrize(
    ("run", "problem"),
    [
        (rule("delete_path", ("ops",), 2), None),
        (rule("delete_path", ("ops",), 3), None),
        (rule("delete_*", ("ops",), 1), "asks 1 approver(s) where the worker's enforced rule 0 asks 2"),
        (rule("*", ("ops", "dev"), 2), "lets dev approve where the worker's enforced rule 0 lets only ops"),
        (rule("read_file", ("dev",), 1), None),  # another tool: no overlap
    ],
)  # fmt: skip
def test_a_run_rule_cannot_weaken_an_enforced_approver_rule(run, problem):
    enforced = [rule("delete_path", ("ops",), 2)]
    found = weaker_rule([run], enforced, ["delete_path", "read_file"])
    assert (found is None) if problem is None else (problem in str(found))


def test_approvers_only_with_ask_and_within_bounds():
    for decision in ("allow", "deny"):
        with pytest.raises(ValidationError, match="only taken with decision"):
            PolicyRule.model_validate(
                {"tool": "t", "decision": decision, "approvers": {"groups": ["ops"]}}
            )
    bads: list[dict[str, object]] = [
        {"groups": []},
        {"groups": ["ops"], "count": 0},
        {"groups": ["o p s"]},
        {"groups": ["ops"], "count": "2"},
        {"groups": ["ops"], "extra": 1},
    ]
    for bad in bads:
        with pytest.raises(ValidationError):
            PolicyRule.model_validate({"tool": "t", "decision": "ask", "approvers": bad})
    assert PolicyRule.model_validate(
        {"tool": "t", "decision": "ask", "approvers": {"groups": ["ops"]}}
    ).approvers == Approvers(groups=("ops",), count=1)
    assert "approvers" not in PolicyRule(tool="t", decision="ask").model_dump()


def test_what_people_read():
    quorum = Quorum(call_id="c1", tool="delete_path", groups=["ops"], needed=2, approvers=["alice"])
    assert quorum_text(quorum) == "1 of 2 approvals: alice; who may answer: ops"
    entry = PolicyEntry(**rule("delete_path", ("ops", "sec"), 2).model_dump(), origin="enforced")
    assert rule_line(entry) == "enforced ask   delete_path by 2 of ops or sec"
