"""The worker counts a call's approvers again as it runs: `execute_tool` (the real activity) runs a
call its enforced `ask` rule with `approvers` decides only when the request carries verified,
signed approvals of that many distinct people of those groups (as its approvers file has them),
whatever the run's state says."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.agent_activities import AgentActivities
from activities.tools import build_default_registry
from runtime.settings import Settings
from runtime.signing_key import SigningKey
from tests.people import module_people
from workflows.contract.arguments import arguments_digest
from workflows.contract.rules import WorkerPolicy
from workflows.model import ToolRequest, Vote
from workflows.people.signatures import SignedFields, signed_at_text

PEOPLE = module_people(
    {"alice": ["ops"], "bob": ["dev", "ops"], "mallory": ["dev"], "olga": ["oncall"]},
    via={"web": ["alice", "bob"]},
)
FORGER = module_people({"alice": ["ops"], "bob": ["ops"]})
"""Keys the worker does not know as alice's and bob's."""
ARGS = {"path": "logs"}
RULE = {"tool": "delete_path", "decision": "ask", "approvers": {"groups": ["ops"], "count": 2}}
OWN_KEY_RULE = {
    "tool": "delete_path",
    "when": {"path": "secrets"},
    "decision": "ask",
    "approvers": {"groups": ["ops"], "count": 2, "own_key": True},
}


@pytest.fixture
def acts(tmp_path: Path) -> AgentActivities:
    workspace = tmp_path / "ws"
    (workspace / "logs").mkdir(parents=True)
    (workspace / "secrets").mkdir()
    settings = Settings(
        llm_base_url=None,
        llm_api_key=None,
        llm_model="scripted",
        workspace=workspace,
        state_dir=tmp_path / "state",
        escalate_to=("oncall",),
    )
    policy = WorkerPolicy.model_validate({"enforced": [OWN_KEY_RULE, RULE]})
    registry = build_default_registry(workspace)
    return AgentActivities(
        cast(Client, None), settings, registry, policy=policy, approvers=PEOPLE.approvers
    )


def signed_vote(
    who: str,
    *,
    key: SigningKey | None = None,
    call_id: str = "c1",
    claims: list[str] | None = None,
    arguments: object = ARGS,
) -> Vote:
    """`who`'s approval signed with their own key (or `key`), claiming `claims` as groups (the
    worker believes none of it)."""
    key = key or PEOPLE.key(who)
    at = signed_at_text(datetime.now(UTC))
    fields = SignedFields(
        who, "wf-1", "run-1", call_id, arguments_digest(arguments), "approve", at,
        key.service or "",
    )  # fmt: skip
    return Vote(
        approver=who,
        groups=claims or ["ops"],
        approved=True,
        at=datetime.now(UTC),
        signed_at=at,
        signature=key.sign(fields),
        signed_by=key.service,
    )


async def execute(
    acts: AgentActivities,
    votes: list[Vote] | None,
    *,
    tool: str = "delete_path",
    arguments: object = ARGS,
    escalated_to: list[str] | None = None,
) -> str:
    request = ToolRequest(
        workflow_id="wf-1",
        call_id="c1",
        name=tool,
        arguments=arguments,
        run_key="run-1",
        answered_by="person",
        votes=votes,
        escalated_to=escalated_to,
    )
    result: str = await ActivityEnvironment().run(acts.execute_tool, request)
    return result


NEEDS = "Rejected: the worker's enforced rule 1 needs 2 approval(s) of ops, and"


@pytest.mark.parametrize(
    ("votes", "counted"),
    [
        (None, "0 verified"),
        ([signed_vote("alice", key=FORGER.key("alice")),
          signed_vote("bob", key=FORGER.key("bob"))], "0 verified"),
        ([signed_vote("alice"), signed_vote("alice")], "1 verified (alice)"),
        ([signed_vote("alice"), signed_vote("mallory", claims=["ops"])], "1 verified (alice)"),
        ([signed_vote("alice"), signed_vote("bob", call_id="c9")], "1 verified (alice)"),
        ([signed_vote("alice"), signed_vote("bob", arguments={"path": "."})],
         "1 verified (alice)"),
        ([signed_vote("alice"), signed_vote("mallory", key=PEOPLE.key("web"))],
         "1 verified (alice)"),
    ],
    ids=["no-votes", "forged", "same-person-twice", "claims-a-group-the-file-does-not-give",
         "replayed-from-another-call", "replayed-onto-other-arguments",
         "through-a-service-not-allowed-for-them"],
)  # fmt: skip
async def test_a_forged_or_short_quorum_never_runs(acts, votes, counted):
    content = await execute(acts, votes)
    assert content == f"{NEEDS} {counted}"
    assert (acts._settings.workspace / "logs").exists()


async def test_two_verified_approvers_run_the_call(acts):
    content = await execute(acts, [signed_vote("alice"), signed_vote("bob", claims=["dev"])])
    assert '"ok": true' in content or '"ok":true' in content, content
    assert not (acts._settings.workspace / "logs").exists()


def ran(content: str) -> bool:
    return '"ok": true' in content or '"ok":true' in content


async def test_votes_through_a_service_do_not_count_for_an_own_key_rule(acts):
    arguments = {"path": "secrets"}
    through = [
        signed_vote(who, key=PEOPLE.key("web"), arguments=arguments) for who in ("alice", "bob")
    ]
    refused = await execute(acts, through, arguments=arguments)
    assert refused == (
        "Rejected: the worker's enforced rule 0 needs 2 approval(s) of ops each with their own"
        " key, and 0 verified"
    )
    own = [signed_vote(who, arguments=arguments) for who in ("alice", "bob")]
    assert ran(await execute(acts, own, arguments=arguments))
    assert not (acts._settings.workspace / "secrets").exists()


async def test_the_workers_own_escalation_widens_its_rule_and_no_other_does(acts):
    votes = [signed_vote("alice"), signed_vote("olga", claims=["ops"])]
    assert (await execute(acts, votes)).endswith("1 verified (alice)")
    by_run = [signed_vote("alice"), signed_vote("mallory")]
    not_the_workers = await execute(acts, by_run, escalated_to=["dev"])
    assert not_the_workers.endswith("1 verified (alice)")
    assert ran(await execute(acts, votes, escalated_to=["oncall"]))
