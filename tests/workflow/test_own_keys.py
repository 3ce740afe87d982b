"""What follows from people signing with their own keys, with a real worker (fake model, the real
`verify_answer` over an approvers file) and raw updates from a plain Temporal client: a signed
grant takes effect once however many copies one workflow task carries, and a run's approver
rule no one in the worker's approvers file could meet is refused at start, saying why."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.worker import Worker

from activities.plugin import AgentPlugin
from runtime.signing_key import signed_grant
from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import events, of_type, start_run, wait_for_phase
from tests.people import module_people
from workflows.contract.rules import ApprovalPolicy
from workflows.model import AgentRunInput, AgentRunOptions, BudgetGrant, BudgetStatus, Usage

PEOPLE = module_people({"olga": ["ops"], "ann": ["ops"], "dave": ["dev"]})


def worker(client: Client, task_queue: str, fake: FakeAgentActivities) -> Worker:
    plugin = AgentPlugin(activities=[*fake.activities(), PEOPLE.verifier().verify_answer])
    return Worker(client, task_queue=task_queue, plugins=[plugin])


async def test_a_signed_grant_sent_four_times_in_one_task_takes_effect_once(client, task_queue):
    listing = calls(("c1", "list_dir", '{"path": "."}')).model_copy(
        update={"usage": Usage(prompt_tokens=50, completion_tokens=10)}
    )
    fake = FakeAgentActivities(replies=[listing, text("done")])
    options = AgentRunOptions(max_run_tokens=50)
    async with worker(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("list", options))
        paused = await wait_for_phase(handle, "budget_exhausted")
    assert paused.budget is not None and paused.budget.limit == 50 and paused.run_id is not None
    grant = signed_grant(
        PEOPLE.key("olga"), BudgetGrant(tokens=50), approver="olga", workflow_id=handle.id,
        run_id=paused.run_id, limit=50,
    ).model_dump(mode="json")  # fmt: skip
    # No worker runs: the four copies wait at the server, and the next workflow task carries
    # them all.
    copies = [
        asyncio.create_task(handle.execute_update("grant_budget", grant, result_type=BudgetStatus))
        for _ in range(4)
    ]
    await asyncio.sleep(1.5)
    assert not any(copy.done() for copy in copies)
    async with worker(client, task_queue, fake):
        outcomes = await asyncio.gather(*copies, return_exceptions=True)
        result = await handle.result()
        evs = await events(handle)
    taken = [o for o in outcomes if isinstance(o, BudgetStatus)]
    refused = [o for o in outcomes if isinstance(o, WorkflowUpdateFailedError)]
    assert len(taken) == 1 and len(refused) == 3, outcomes
    assert (taken[0].limit, taken[0].granted) == (100, 50)
    for refusal in refused:  # each copy verified, then found the budget it was signed for gone
        assert str(refusal.cause) == (
            "InvalidGrant: the budget changed since this grant was signed (it was for a budget of"
            " 50 tokens; it is 100 tokens now): a grant takes effect once, sign a new one"
        )
    [granted] = of_type(evs, "budget_granted")
    assert (granted.tokens, granted.limit, granted.approver) == (50, 100, "olga")
    assert result.finish_reason == "stop"


def rule_of(groups: list[str], count: int = 1) -> ApprovalPolicy:
    rule = {
        "tool": "delete_path",
        "decision": "ask",
        "approvers": {"groups": groups, "count": count},
    }
    return ApprovalPolicy.model_validate({"rules": [rule]})


@pytest.mark.parametrize(
    ("policy", "why"),
    [
        (
            rule_of(["opps"]),
            "rule 0 (run, delete_path) asks opps to approve, and no one in the approvers file"
            " is in it",
        ),
        (
            rule_of(["ops", "dev"], count=4),
            "rule 0 (run, delete_path) asks 4 people of ops or dev, and the approvers file has 3",
        ),
    ],
)
async def test_a_run_rule_no_one_could_meet_is_refused_at_start(
    client, task_queue, policy: ApprovalPolicy, why: str
):
    fake = FakeAgentActivities(replies=[text("never asked")])
    fake.setup = {"approver_groups": PEOPLE.approvers.group_sizes()}
    async with worker(client, task_queue, fake):
        started = await start_run(
            client,
            task_queue,
            AgentRunInput.from_prompt("x", AgentRunOptions(approval_policy=policy)),
        )
        with pytest.raises(WorkflowFailureError) as caught:
            await started.result()
        met = await start_run(
            client, task_queue,
            AgentRunInput.from_prompt("x", AgentRunOptions(approval_policy=rule_of(["ops"], 2))),
        )  # fmt: skip
        assert (await met.result()).finish_reason == "stop"
    assert why in str(caught.value.cause)
    assert fake.llm_requests and len(fake.llm_requests) == 1  # only the run that could be met
