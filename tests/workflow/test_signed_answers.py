"""Signed answers with a real worker: the workflow asks the worker's `verify_answer` to check
each signed answer before it takes it. A forged signature, a signature copied to another call or
bound to another run is refused with the reason; a good one is taken and recorded."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.worker import Worker

from activities.plugin import AgentPlugin
from runtime.approvers import AnswerVerifier
from runtime.signing_key import SigningKey, signed_answer
from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import events, of_type, start_run, wait_for_phase
from tests.people import module_people
from workflows.contract.arguments import arguments_digest
from workflows.model import AgentRunInput, ToolApprovalResponse

PEOPLE = module_people({"alice": ["ops", "dev"]})
KEY = PEOPLE.key("alice")
FORGER = module_people({"alice": ["ops", "dev"]})
"""Another file's alice: a key the worker does not know as hers."""
ARGS = '{"path": "logs"}'


def signed_worker(client: Client, task_queue: str, fake: FakeAgentActivities) -> Worker:
    """A worker whose `verify_answer` reads PEOPLE's approvers file."""
    verifier = PEOPLE.verifier()
    plugin = AgentPlugin(activities=[*fake.activities(), verifier.verify_answer])
    return Worker(client, task_queue=task_queue, plugins=[plugin])


def signed(call_id: str, run_id: str, *, key: SigningKey = KEY, **given: Any) -> dict[str, Any]:
    response = ToolApprovalResponse(call_id=call_id, approved=given.pop("approved", True))
    answer = signed_answer(
        key,
        response,
        approver="alice",
        workflow_id=given.pop("workflow_id"),
        run_id=run_id,
        arguments_sha256=arguments_digest(ARGS),
    )
    return answer.model_dump(mode="json")


async def two_calls_waiting(client: Client, task_queue: str) -> tuple[Any, str]:
    handle = await start_run(client, task_queue, AgentRunInput.from_prompt("delete logs twice"))
    st = await wait_for_phase(handle, "awaiting_approval")
    assert st.run_id is not None
    return handle, st.run_id


def fake_two_calls(client: Client) -> FakeAgentActivities:
    return FakeAgentActivities(
        replies=[
            calls(("c1", "delete_path", ARGS), ("c2", "delete_path", ARGS)),
            text("done"),
        ],
        client=client,
    )


async def refused(handle: Any, payload: dict[str, Any]) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await handle.execute_update("submit_approval", payload)
    return str(caught.value.cause)


async def test_a_good_signature_is_taken_and_recorded_with_the_files_groups(client, task_queue):
    fake = fake_two_calls(client)
    async with signed_worker(client, task_queue, fake):
        handle, run_id = await two_calls_waiting(client, task_queue)
        claims = {**signed("c1", run_id, workflow_id=handle.id), "groups": ["admin"]}
        await handle.execute_update("submit_approval", claims)
        await handle.signal("tool_approval", signed("c2", run_id, workflow_id=handle.id))
        result = await handle.result()
        evs = await events(handle)
    assert result.finish_reason == "stop"
    assert sorted(fake.tools_run) == ["c1", "c2"]
    approvals = of_type(evs, "approval")
    assert [a.call_id for a in approvals] == ["c1", "c2"]
    for approval in approvals:
        assert approval.approver == "alice" and approval.groups == ["dev", "ops"]
        assert approval.signature and approval.signed_at


async def test_a_forged_signature_is_refused(client, task_queue):
    fake = fake_two_calls(client)
    forger = FORGER.key("alice")
    async with signed_worker(client, task_queue, fake):
        handle, run_id = await two_calls_waiting(client, task_queue)
        forged = signed("c1", run_id, workflow_id=handle.id, key=forger)
        why = await refused(handle, forged)
        made_up = {**signed("c2", run_id, workflow_id=handle.id)}
        made_up["signature"] = base64.b64encode(b"\0" * 64).decode()
        await handle.signal("tool_approval", made_up)
        await handle.signal("tool_approval", {"call_id": "c1", "approved": False})  # unsigned
        await handle.signal("tool_approval", {"call_id": "c2", "approved": False})
        await handle.result()
        evs = await events(handle)
    assert "does not verify" in why
    warnings = [w.message for w in of_type(evs, "warning")]
    assert any("submit_approval" in w and "does not verify" in w for w in warnings)
    assert any("tool_approval" in w and "does not verify" in w for w in warnings)
    assert [(a.call_id, a.approved, a.signature) for a in of_type(evs, "approval")] == [
        ("c1", False, None),
        ("c2", False, None),
    ]
    assert fake.tools_run == []


async def test_a_signature_replayed_on_another_call_is_refused(client, task_queue):
    fake = fake_two_calls(client)
    async with signed_worker(client, task_queue, fake):
        handle, run_id = await two_calls_waiting(client, task_queue)
        for_c1 = signed("c1", run_id, workflow_id=handle.id)
        why = await refused(handle, {**for_c1, "call_id": "c2"})
        as_reject = {**for_c1, "approved": False}  # the same signature, another decision
        why_decision = await refused(handle, as_reject)
        await handle.execute_update("submit_approval", for_c1)
        why_again = await refused(handle, for_c1)  # the same answer a second time
        await handle.signal("tool_approval", {"call_id": "c2", "approved": False})
        await handle.result()
    assert "does not verify" in why and "does not verify" in why_decision
    assert "already answered" in why_again
    assert fake.tools_run == ["c1"]


async def test_a_signature_for_another_run_or_workflow_is_refused(client, task_queue):
    fake = fake_two_calls(client)
    async with signed_worker(client, task_queue, fake):
        handle, run_id = await two_calls_waiting(client, task_queue)
        other_run = signed("c1", "another-run", workflow_id=handle.id)
        why_run = await refused(handle, {**other_run, "run_id": run_id})
        other_workflow = signed("c1", run_id, workflow_id="agent-another")
        why_workflow = await refused(handle, other_workflow)
        await handle.signal("tool_approval", {"call_id": "c1", "approved": False})
        await handle.signal("tool_approval", {"call_id": "c2", "approved": False})
        await handle.result()
    assert "does not verify" in why_run and "does not verify" in why_workflow
    assert fake.tools_run == []


async def test_a_worker_without_the_approvers_file_refuses_signed_answers(client, task_queue):
    fake = fake_two_calls(client)
    plugin = AgentPlugin(activities=[*fake.activities(), AnswerVerifier(None).verify_answer])
    async with Worker(client, task_queue=task_queue, plugins=[plugin]):
        handle, run_id = await two_calls_waiting(client, task_queue)
        why = await refused(handle, signed("c1", run_id, workflow_id=handle.id))
        await handle.signal("tool_approval", {"call_id": "c1", "approved": True})  # unsigned
        await handle.signal("tool_approval", {"call_id": "c2", "approved": True})
        await handle.result()
    assert "has no AGENT_APPROVERS_FILE" in why
    assert sorted(fake.tools_run) == ["c1", "c2"]
