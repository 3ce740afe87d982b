"""The worker counts a call's approvers again as it runs: `execute_tool` (the real activity) runs a
call its enforced `ask` rule with `approvers` decides only when the request carries verified,
signed approvals of that many distinct people of those groups, whatever the run's state says."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.agent_activities import AgentActivities
from activities.tools import build_default_registry
from runtime.approver_key import ApproverKey
from runtime.settings import Settings
from workflows.contract.arguments import arguments_digest
from workflows.contract.rules import WorkerPolicy
from workflows.model import ToolRequest, Vote
from workflows.people.signatures import SignedFields, signed_at_text

RAW = os.urandom(32)
KEY = ApproverKey(RAW)
ARGS = {"path": "logs"}
RULE = {"tool": "delete_path", "decision": "ask", "approvers": {"groups": ["ops"], "count": 2}}


@pytest.fixture
def acts(tmp_path: Path) -> AgentActivities:
    workspace = tmp_path / "ws"
    (workspace / "logs").mkdir(parents=True)
    settings = Settings(
        llm_base_url=None,
        llm_api_key=None,
        llm_model="scripted",
        workspace=workspace,
        state_dir=tmp_path / "state",
        approver_key=RAW,
    )
    policy = WorkerPolicy.model_validate({"enforced": [RULE]})
    registry = build_default_registry(workspace)
    return AgentActivities(cast(Client, None), settings, registry, policy=policy)


def signed_vote(
    who: str, groups: list[str], *, key: ApproverKey = KEY, call_id: str = "c1"
) -> Vote:
    at = signed_at_text(datetime.now(UTC))
    fields = SignedFields(
        who, tuple(sorted(groups)), "wf-1", "run-1", call_id, arguments_digest(ARGS), "approve", at
    )
    return Vote(
        approver=who,
        groups=sorted(groups),
        approved=True,
        at=datetime.now(UTC),
        signed_at=at,
        signature=key.sign(fields),
    )


async def execute(acts: AgentActivities, votes: list[Vote] | None) -> str:
    request = ToolRequest(
        workflow_id="wf-1",
        call_id="c1",
        name="delete_path",
        arguments=ARGS,
        run_key="run-1",
        answered_by="person",
        votes=votes,
    )
    result: str = await ActivityEnvironment().run(acts.execute_tool, request)
    return result


NEEDS = "Rejected: the worker's enforced rule 0 needs 2 approval(s) of ops, and"


@pytest.mark.parametrize(
    ("votes", "counted"),
    [
        (None, "0 verified"),
        ([signed_vote("alice", ["ops"], key=ApproverKey(os.urandom(32))),
          signed_vote("bob", ["ops"], key=ApproverKey(os.urandom(32)))], "0 verified"),
        ([signed_vote("alice", ["ops"]), signed_vote("alice", ["ops"])], "1 verified (alice)"),
        ([signed_vote("alice", ["ops"]), signed_vote("mallory", ["dev"])], "1 verified (alice)"),
        ([signed_vote("alice", ["ops"]), signed_vote("bob", ["ops"], call_id="c9")],
         "1 verified (alice)"),
    ],
    ids=["no-votes", "forged", "same-person-twice", "wrong-group", "replayed-from-another-call"],
)  # fmt: skip
async def test_a_forged_or_short_quorum_never_runs(acts, votes, counted):
    content = await execute(acts, votes)
    assert content == f"{NEEDS} {counted}"
    assert (acts._settings.workspace / "logs").exists()


async def test_two_verified_approvers_run_the_call(acts):
    content = await execute(
        acts, [signed_vote("alice", ["ops"]), signed_vote("bob", ["dev", "ops"])]
    )
    assert '"ok": true' in content or '"ok":true' in content, content
    assert not (acts._settings.workspace / "logs").exists()
