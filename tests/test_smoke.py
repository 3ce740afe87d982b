from __future__ import annotations

from temporalio.worker import Worker

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import event_types, events, start_run, wait_for_phase
from workflows.agent import AgentWorkflow
from workflows.model import AgentRunInput


async def test_approve_then_stop(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "run_command", '{"command": "ls"}')), text("done")]
    )
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=fake.activities()
    ):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("delete logs"))
        st = await wait_for_phase(handle, "awaiting_approval")
        assert [c.id for c in st.pending_approvals] == ["call_1"]
        await handle.signal(
            "tool_approval", {"call_id": "call_1", "approved": True, "approver": "ann"}
        )
        result = await handle.result()
        types = event_types(await events(handle))
    assert result.finish_reason == "stop"
    assert fake.tools_run == ["call_1"]
    assert types == [
        "tool_call",
        "awaiting_approval",
        "approval",
        "tool_result",
        "text_delta",
        "finished",
    ], types
