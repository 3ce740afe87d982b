"""The approval inbox: search attributes kept current, answers that record who and when, and a
run the Temporal UI can explain (activity summaries, current details)."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.worker import Worker

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import events, start_run, wait_for_phase, wait_until
from workflows.model import AgentRunInput, ApprovalEvent
from workflows.names import AGENT_PENDING_APPROVALS, AGENT_STATUS
from workflows.run.agent import AgentWorkflow


async def search_attributes(client: Client, workflow_id: str) -> tuple[str | None, int | None]:
    description = await client.get_workflow_handle(workflow_id).describe()
    attributes = description.typed_search_attributes
    return attributes.get(AGENT_STATUS), attributes.get(AGENT_PENDING_APPROVALS)


async def test_search_attributes_track_the_approval_wait(client, task_queue):
    fake = FakeAgentActivities(
        replies=[
            calls(
                ("call_1", "run_command", '{"command": "ls"}'),
                ("call_2", "delete_path", '{"path": "logs"}'),
            ),
            text("done"),
        ]
    )
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=fake.activities()
    ):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("clean up"))
        await wait_for_phase(handle, "awaiting_approval")
        assert await search_attributes(client, handle.id) == ("awaiting_approval", 2)

        query = f'AgentStatus="awaiting_approval" AND WorkflowId="{handle.id}"'

        async def listed() -> bool:
            return [w.id async for w in client.list_workflows(query)] == [handle.id]

        await wait_until(listed, timeout=30)

        await handle.signal(
            "tool_approval", {"call_id": "call_1", "approved": True, "approver": "ann"}
        )

        async def one_left() -> bool:
            return await search_attributes(client, handle.id) == ("awaiting_approval", 1)

        await wait_until(one_left)
        await handle.signal("tool_approval", {"call_id": "call_2", "approved": False})
        await handle.result()
        assert await search_attributes(client, handle.id) == ("finished", 0)
        log = await events(handle)
        metadata = await handle.query("__temporal_workflow_metadata")
        history = await handle.fetch_history()

    approvals = [e for e in log if isinstance(e, ApprovalEvent)]
    assert [(a.call_id, a.approved, a.approver) for a in approvals] == [
        ("call_1", True, "ann"),
        ("call_2", False, None),
    ]
    assert approvals[0].at <= approvals[1].at
    assert "finished: stop" in metadata.current_details

    summaries = [
        e.user_metadata.summary.data.decode()
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert '"llm round 0"' in summaries
    assert '"tool run_command call_1"' in summaries
    assert '"llm round 1"' in summaries


async def test_current_details_name_the_pending_calls(client, task_queue):
    fake = FakeAgentActivities(replies=[calls(("call_9", "delete_path", '{"path": "logs"}'))])
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=fake.activities()
    ):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("delete logs"))
        await wait_for_phase(handle, "awaiting_approval")
        metadata = await handle.query("__temporal_workflow_metadata")
        await handle.signal("cancel")
        await handle.result()
    assert "awaiting approval of 1 call(s)" in metadata.current_details
    assert "call_9: delete_path" in metadata.current_details
