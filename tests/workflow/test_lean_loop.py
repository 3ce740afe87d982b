"""What this release's loop writes to history beside its rounds: the worker's setup is read by the
worker running the run (a local activity's marker), not by an activity task and the workflow task
that follows it."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import worker_for
from workflows import names
from workflows.model import AgentRunInput, AgentRunOptions
from workflows.run.agent import AgentWorkflow


async def test_the_setup_is_a_marker_and_the_run_still_knows_the_workers_tools(client, task_queue):
    fake = FakeAgentActivities(replies=[calls(("c1", "list_dir", '{"path": "."}')), text("done")])
    run_input = AgentRunInput.from_prompt("look", AgentRunOptions(tools=["list_dir"]))
    async with worker_for(client, task_queue, fake):
        handle = await client.start_workflow(
            AgentWorkflow.run, run_input, id=f"lean-{task_queue}", task_queue=task_queue
        )
        result = await handle.result()
        history = await handle.fetch_history()
    assert result.finish_reason == "stop"
    assert fake.tools_run == ["c1"]  # the setup's tools were known: the call ran
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled == [
        names.ACTIVITY_CALL_LLM,
        names.ACTIVITY_EXECUTE_TOOL,
        names.ACTIVITY_CALL_LLM,
    ]
    markers = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
    assert any(
        e.marker_recorded_event_attributes.marker_name == "core_local_activity" for e in markers
    )
    tasks = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    ]
    assert len(tasks) == 4  # start (setup and the first model call), after each activity
