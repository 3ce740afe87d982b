"""No single payload nears Temporal's 2 MB limit: a conversation too big to send to the model
ends the run with a clear `error` instead of a failed workflow task."""

from __future__ import annotations

from temporalio.worker import Worker

from tests.fakes import FakeAgentActivities, text
from tests.helpers import events, start_run
from workflows.agent import MAX_CONVERSATION_BYTES, AgentWorkflow
from workflows.model import AgentRunInput


async def test_oversized_conversation_ends_with_a_clear_error(client, task_queue):
    fake = FakeAgentActivities(replies=[text("never sent")])
    prompt = "x" * (MAX_CONVERSATION_BYTES + 1000)
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=fake.activities()
    ):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt(prompt))
        result = await handle.result()
        log = await events(handle)
    assert result.finish_reason == "error"
    assert result.error is not None and result.error.startswith("Conversation too large")
    assert [e.type for e in log] == ["error", "finished"]
    assert fake.llm_requests == []
