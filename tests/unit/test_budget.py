"""The token budget's pure rules: the run's limit under the worker's cap, and why a grant is
refused (it then changes nothing)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from workflows.contract.inputs import TOKENS_RULE, tokens_problem
from workflows.intake import parse_grant
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    AgentState,
    BudgetGrant,
    BudgetState,
    BudgetStatus,
    ChatMessage,
    Usage,
)
from workflows.people.budget import (
    NO_BUDGET,
    base_limit,
    refusal,
    who_may,
)
from workflows.people.signatures import budget_call, grant_decision, grant_request
from workflows.run.handover import handover


@pytest.mark.parametrize(
    ("asked", "cap", "limit"),
    [(None, None, None), (100, None, 100), (None, 50, 50), (100, 50, 50), (10, 50, 10)],
)
def test_a_run_never_asks_for_more_than_the_cap(
    asked: int | None, cap: int | None, limit: int | None
) -> None:
    assert base_limit(asked, cap) == limit


def test_who_may_names_the_groups() -> None:
    assert who_may(["ops"]) == "ops"
    assert who_may(["ops", "admins"]) == "ops or admins"
    assert who_may(["ops", "dev", "admins"]) == "ops, dev or admins"


SIGNED: dict[str, str] = {"signed_at": "2026-12-02T14:00:00.000000Z", "signature": "A" * 43 + "="}
"""A grant's signature as it arrives (the worker checks it afterwards)."""
SPENT = BudgetStatus(used=120, limit=100)
ROOM = BudgetStatus(used=20, limit=100)


def why(grant: BudgetGrant, budget: BudgetStatus | None, **kw: object) -> str | None:
    args: dict[str, object] = {"allowed_groups": [], "finished": False, "stopping": False} | kw
    return refusal(grant, budget, **args)  # type: ignore[arg-type]


def test_grants_that_are_taken() -> None:
    assert why(BudgetGrant(tokens=5), SPENT) is None
    assert why(BudgetGrant(tokens=5), ROOM) is None  # raising it early is allowed
    assert why(BudgetGrant(stop=True), SPENT) is None
    ops = BudgetGrant(tokens=5, approver="olga", groups=["dev", "ops"], **SIGNED)
    assert why(ops, SPENT, allowed_groups=["ops"]) is None


def test_grants_that_are_refused_say_why() -> None:
    assert why(BudgetGrant(tokens=5), None) == NO_BUDGET
    assert why(BudgetGrant(tokens=5), SPENT, finished=True) == "the run has finished"
    dev = BudgetGrant(tokens=5, approver="dave", groups=["dev"], **SIGNED)
    assert why(dev, SPENT, allowed_groups=["ops", "admins"]) == (
        "only ops or admins may grant tokens or stop a run at its budget"
    )
    claimed = BudgetGrant(tokens=5, approver="mallory", groups=["ops"])  # not signed
    assert why(claimed, SPENT, allowed_groups=["ops"]) == (
        "only ops may grant tokens or stop a run at its budget, with a signed grant (their key"
        " in the worker's AGENT_APPROVERS_FILE): groups a grant only claims are not believed"
    )
    assert why(BudgetGrant(stop=True), ROOM) == (
        "the run is not at its token budget (used 20 of 100 tokens): cancel it to stop it"
    )
    assert why(BudgetGrant(tokens=5), SPENT, stopping=True) == (
        "the run is already stopping at its budget"
    )


@pytest.mark.parametrize(
    "payload",
    [{}, {"tokens": 0}, {"tokens": -3}, {"tokens": "5"}, {"tokens": 5, "stop": True},
     {"stop": False}, {"tokens": 5, "extra": 1}, {"tokens": 10**13}, {"stop": "yes"}],
)  # fmt: skip
def test_bad_payloads_are_refused(payload: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        BudgetGrant.model_validate(payload)
    parsed = parse_grant(payload)
    assert parsed.value is None and parsed.error
    assert parsed.error.startswith(("invalid grant", "tokens must be"))


@pytest.mark.parametrize("tokens", [-5, 0, 2.5, "5", True])
def test_a_bad_token_count_gets_the_one_sentence(tokens: object) -> None:
    assert parse_grant({"tokens": tokens}).error == TOKENS_RULE == tokens_problem(tokens)


def test_a_signed_grant_signs_its_decision_over_the_budget_as_it_stands() -> None:
    grant = BudgetGrant(tokens=500, approver="olga", groups=["ops"], **SIGNED)
    request = grant_request(grant, 1_000, workflow_id="W", run_id="R")
    assert (request.call_id, request.arguments_sha256) == ("budget:1000", "")
    assert (request.decision, request.approver, request.signed_by) == ("grant:500", "olga", "")
    assert request.signature == SIGNED["signature"] and request.signed_at == SIGNED["signed_at"]
    assert grant_decision(BudgetGrant(stop=True)) == "stop"
    assert budget_call(1_000) != budget_call(1_500)  # a grant taken cannot be sent again
    with pytest.raises(ValidationError):
        BudgetGrant(tokens=5, approver="olga", signature=SIGNED["signature"])  # no signed_at


def test_a_grant_names_at_most_a_few_short_groups() -> None:
    assert parse_grant({"tokens": 5, "groups": ["g"] * 33}).value is None
    assert parse_grant({"tokens": 5, "groups": ["no spaces"]}).value is None
    assert parse_grant({"tokens": 5, "approver": "x" * 201}).value is None
    assert parse_grant({"tokens": 5, "approver": "ann", "groups": ["ops"]}).value == BudgetGrant(
        tokens=5, approver="ann", groups=["ops"]
    )


def test_the_budget_and_the_tokens_spent_are_handed_to_the_next_generation() -> None:
    state = AgentState(
        messages=[ChatMessage.user("list")],
        options=AgentRunOptions(max_run_tokens=100),
        usage=Usage(prompt_tokens=90, completion_tokens=30),
        budget=BudgetState(granted=50, announced=True),
    )
    handed = AgentRunInput.model_validate_json(handover(state, [], None).model_dump_json())
    assert handed.state is not None
    assert handed.state.budget == BudgetState(granted=50, announced=True)
    assert handed.state.usage.total == 120 and handed.state.options.max_run_tokens == 100
    plain = AgentState(messages=[ChatMessage.user("list")], options=AgentRunOptions())
    assert "budget" not in plain.model_dump()  # a run without a budget carries nothing of it
