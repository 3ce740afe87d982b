"""Approver rules with a real worker (fake model and tools, the real `verify_answer`): a call an
`ask` rule with `approvers` decides runs only after `count` distinct people of those groups
approved it with signed answers. Each refusal has its own test."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.worker import Worker

from activities.plugin import AgentPlugin
from runtime.signing_key import SigningKey
from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import events, of_type, start_run, status, wait_for_phase
from tests.people import module_people, signed_vote
from workflows.contract.arguments import arguments_digest
from workflows.contract.rules import ApprovalPolicy, PolicyRule, WorkerPolicy
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage

PEOPLE = module_people(
    {"alice": ["ops"], "bob": ["dev", "ops"], "carol": ["ops"], "zoe": ["ops"], "mallory": ["dev"]},
    via={"web": ["alice", "bob"]},
)
"""The worker's approvers file: each person with a key of their own, and the web app's signing
service, which may sign for alice and bob."""
FORGER = module_people({"alice": ["ops"]})
"""Another file's alice: a key the worker does not know as hers."""
ARGS = '{"path": "logs"}'
OPS_TWO = {"tool": "delete_path", "decision": "ask", "approvers": {"groups": ["ops"], "count": 2}}


def worker(client: Client, task_queue: str, fake: FakeAgentActivities) -> Worker:
    plugin = AgentPlugin(activities=[*fake.activities(), PEOPLE.verifier().verify_answer])
    return Worker(client, task_queue=task_queue, plugins=[plugin])


def fake(client: Client, **given: Any) -> FakeAgentActivities:
    replies = [calls(("c1", "delete_path", ARGS), ("c2", "delete_path", ARGS)), text("done")]
    return FakeAgentActivities(replies=replies, client=client, **given)


def run_input(*rules: dict[str, Any]) -> AgentRunInput:
    policy = ApprovalPolicy.model_validate({"rules": list(rules)})
    return AgentRunInput(
        messages=[ChatMessage.user("delete logs twice")],
        options=AgentRunOptions(approval_policy=policy),
    )


def vote(
    handle: Any,
    run_id: str,
    who: str,
    *,
    call_id: str = "c1",
    approved: bool = True,
    key: SigningKey | None = None,
    arguments: str = ARGS,
) -> dict[str, Any]:
    """`who`'s answer, signed with their own key (or `key`: another's, or a service's)."""
    return signed_vote(
        key or PEOPLE.key(who), call_id, workflow_id=handle.id, run_id=run_id,
        arguments_sha256=arguments_digest(arguments), approved=approved, approver=who,
    )  # fmt: skip


async def refused(handle: Any, payload: dict[str, Any]) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await handle.execute_update("submit_approval", payload)
    cause = caught.value.cause
    return getattr(cause, "message", str(cause))


async def waiting(client: Client, task_queue: str, run: AgentRunInput) -> tuple[Any, str]:
    handle = await start_run(client, task_queue, run)
    st = await wait_for_phase(handle, "awaiting_approval")
    assert st.run_id is not None
    return handle, st.run_id


async def reject_both(handle: Any, run_id: str) -> None:
    """End the run: an eligible person rejects each call still waiting."""
    for call_id in ("c1", "c2"):
        if call_id in [c.id for c in (await status(handle)).pending_approvals]:
            await handle.execute_update(
                "submit_approval",
                vote(handle, run_id, "zoe", call_id=call_id, approved=False),
            )
    await handle.result()


async def test_two_people_of_ops_approve_and_the_call_runs(client, task_queue):
    activities = fake(client)
    async with worker(client, task_queue, activities):
        handle, run_id = await waiting(client, task_queue, run_input(OPS_TWO))
        await handle.execute_update("submit_approval", vote(handle, run_id, "alice"))
        st = await status(handle)
        [quorum, other] = st.quorums
        assert quorum.call_id == "c1" and quorum.groups == ["ops"] and quorum.needed == 2
        assert quorum.approvers == ["alice"] and other.approvers == []
        assert [c.id for c in st.pending_approvals] == ["c1", "c2"]
        await handle.signal("tool_approval", vote(handle, run_id, "bob"))
        await handle.execute_update(
            "submit_approval", vote(handle, run_id, "carol", call_id="c2", approved=False)
        )
        result = await handle.result()
        evs = await events(handle)
        audit = await handle.query("audit")
    assert result.finish_reason == "stop"
    assert activities.tools_run == ["c1"]
    [request] = activities.tool_requests
    assert [v.approver for v in request.votes or []] == ["alice", "bob"]
    votes = [
        (e.call_id, e.approver, e.approved, e.votes, e.needed)
        for e in of_type(evs, "approval_vote")
    ]
    assert votes == [
        ("c1", "alice", True, 1, 2),
        ("c1", "bob", True, 2, 2),
        ("c2", "carol", False, 0, 2),
    ]
    approvals = of_type(evs, "approval")
    assert [(a.call_id, a.approvers, a.approver) for a in approvals] == [
        ("c1", ["alice", "bob"], "alice, bob"),
        ("c2", ["carol"], "carol"),
    ]
    assert audit["counts"]["votes"] == 3
    assert audit["decisions"][0]["approvers"] == ["alice", "bob"]


async def test_a_person_of_another_group_is_refused_whatever_groups_the_vote_claims(
    client, task_queue
):
    async with worker(client, task_queue, fake(client)):
        handle, run_id = await waiting(client, task_queue, run_input(OPS_TWO))
        claims_ops = {**vote(handle, run_id, "mallory"), "groups": ["ops"]}
        why = await refused(handle, claims_ops)
        signal = {**vote(handle, run_id, "mallory", call_id="c2"), "groups": ["ops"]}
        await handle.signal("tool_approval", signal)
        await reject_both(handle, run_id)
        evs = await events(handle)
    assert why == "only ops may approve delete_path"
    assert any("only ops may approve delete_path" in w.message for w in of_type(evs, "warning"))
    assert [e.approver for e in of_type(evs, "approval_vote")] == ["zoe", "zoe"]


async def test_an_unsigned_answer_is_refused(client, task_queue):
    async with worker(client, task_queue, fake(client)):
        handle, run_id = await waiting(client, task_queue, run_input(OPS_TWO))
        unsigned = {"call_id": "c1", "approved": True, "approver": "alice", "groups": ["ops"]}
        why = await refused(handle, unsigned)
        await reject_both(handle, run_id)
    assert why.startswith("only ops may approve delete_path") and "not signed" in why


async def test_a_forged_signature_is_refused(client, task_queue):
    async with worker(client, task_queue, fake(client)):
        handle, run_id = await waiting(client, task_queue, run_input(OPS_TWO))
        forged = vote(handle, run_id, "alice", key=FORGER.key("alice"))
        why = await refused(handle, forged)
        st = await status(handle)
        await reject_both(handle, run_id)
    assert "does not verify" in why
    assert st.quorums[0].approvers == []


async def test_a_replayed_signature_is_refused(client, task_queue):
    async with worker(client, task_queue, fake(client)):
        handle, run_id = await waiting(client, task_queue, run_input(OPS_TWO))
        for_c1 = vote(handle, run_id, "alice")
        await handle.execute_update("submit_approval", for_c1)
        why = await refused(handle, {**for_c1, "call_id": "c2"})  # copied to the other call
        st = await status(handle)
        await reject_both(handle, run_id)
    assert "does not verify" in why
    assert [q.approvers for q in st.quorums] == [["alice"], []]


async def test_a_signature_replayed_onto_another_run_or_arguments_is_refused(client, task_queue):
    both = calls(("c1", "delete_path", ARGS), ("c2", "delete_path", ARGS))
    two_runs = FakeAgentActivities(replies=[both, both, text("done"), text("done")], client=client)
    async with worker(client, task_queue, two_runs):
        first, first_run = await waiting(client, task_queue, run_input(OPS_TWO))
        second, second_run = await waiting(client, task_queue, run_input(OPS_TWO))
        for_first = vote(first, first_run, "alice")
        onto_second = {**for_first, "run_id": second_run}
        other_run = await refused(second, onto_second)
        other_arguments = vote(second, second_run, "alice", arguments='{"path": "other"}')
        other_arguments.pop("arguments_sha256")  # the run checks it against the call's own
        other_args = await refused(second, other_arguments)
        st = await status(second)
        await reject_both(first, first_run)
        await reject_both(second, second_run)
    assert "does not verify" in other_run and "does not verify" in other_args
    assert st.quorums[0].approvers == []


async def test_a_vote_through_a_service_is_refused_under_an_own_key_rule(client, task_queue):
    own_key = {**OPS_TWO, "approvers": {"groups": ["ops"], "count": 2, "own_key": True}}
    activities = fake(client)
    async with worker(client, task_queue, activities):
        handle, run_id = await waiting(client, task_queue, run_input(own_key))
        through = vote(handle, run_id, "alice", key=PEOPLE.key("web"))
        why = await refused(handle, through)
        await handle.signal("tool_approval", vote(handle, run_id, "bob", key=PEOPLE.key("web")))
        await handle.execute_update("submit_approval", vote(handle, run_id, "alice"))
        st = await status(handle)
        await reject_both(handle, run_id)
        evs = await events(handle)
    assert through["signed_by"] == "web"
    assert why == (
        "only ops may approve delete_path, each signing with their own key: this answer was"
        " signed for alice by the signing service 'web', which this rule does not take"
    )
    assert any("signing service 'web'" in w.message for w in of_type(evs, "warning"))
    assert st.quorums[0].approvers == ["alice"]
    assert activities.tools_run == []


async def test_the_same_person_twice_counts_once(client, task_queue):
    activities = fake(client)
    async with worker(client, task_queue, activities):
        handle, run_id = await waiting(client, task_queue, run_input(OPS_TWO))
        await handle.execute_update("submit_approval", vote(handle, run_id, "alice"))
        why = await refused(handle, vote(handle, run_id, "alice"))  # signed anew
        st = await status(handle)
        await reject_both(handle, run_id)
    assert "alice has already answered call 'c1'" in why
    assert st.quorums[0].approvers == ["alice"] and "c1" in [c.id for c in st.pending_approvals]
    assert activities.tools_run == []


async def test_one_eligible_rejection_rejects(client, task_queue):
    activities = fake(client)
    async with worker(client, task_queue, activities):
        handle, run_id = await waiting(client, task_queue, run_input(OPS_TWO))
        await handle.execute_update("submit_approval", vote(handle, run_id, "alice"))
        no = vote(handle, run_id, "bob", approved=False)
        await handle.execute_update("submit_approval", {**no, "reason": "not now"})
        late = await refused(handle, vote(handle, run_id, "carol"))
        await reject_both(handle, run_id)
        evs = await events(handle)
    assert "already answered" in late
    first = of_type(evs, "approval")[0]
    assert (first.call_id, first.approved, first.approvers, first.reason) == (
        "c1",
        False,
        ["bob"],
        "not now",
    )
    assert activities.tools_run == []


ENFORCED = WorkerPolicy(enforced=[PolicyRule.model_validate(OPS_TWO)])


@pytest.mark.parametrize(
    ("approvers", "why"),
    [
        (
            {"groups": ["ops"], "count": 1},
            "asks 1 approver(s) where the worker's enforced rule 0 asks 2",
        ),
        (
            {"groups": ["ops", "dev"], "count": 2},
            "lets dev approve where the worker's enforced rule 0 lets only ops",
        ),
    ],
)
async def test_a_run_rule_cannot_lower_or_widen_an_enforced_one(client, task_queue, approvers, why):
    activities = fake(client, worker_rules=ENFORCED)
    weaker = {"tool": "delete_*", "decision": "ask", "approvers": approvers}
    async with worker(client, task_queue, activities):
        started = await start_run(client, task_queue, run_input(weaker))
        with pytest.raises(WorkflowFailureError) as caught:
            await started.result()
        assert why in str(caught.value.cause)
        handle, run_id = await waiting(client, task_queue, run_input())
        with pytest.raises(WorkflowUpdateFailedError) as set_refused:
            await handle.execute_update("set_approval_policy", {"rules": [weaker]})
        assert why in str(set_refused.value.cause)
        assert (await handle.query("policy"))["rules"] == [
            {**OPS_TWO, "origin": "enforced", "when": None, "reason": None}
        ]
        await reject_both(handle, run_id)


async def test_approvers_only_with_ask(client, task_queue):
    async with worker(client, task_queue, fake(client)):
        handle, run_id = await waiting(client, task_queue, run_input(OPS_TWO))
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await handle.execute_update(
                "set_approval_policy",
                {
                    "rules": [
                        {
                            "tool": "delete_path",
                            "decision": "allow",
                            "approvers": {"groups": ["ops"]},
                        }
                    ]
                },
            )
        await reject_both(handle, run_id)
    assert "'approvers' is only taken with decision \"ask\", not 'allow'" in str(caught.value.cause)
