"""LLM failures on the dev server with fake activities: non-retryable errors end the
run with `finish_reason: error` (the workflow itself does not fail), retryable ones are retried."""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import event_types, events, of_type, start_run, status, worker_for
from workflows.model import AgentRunInput


async def test_non_retryable_llm_error_finishes_with_error(client, task_queue):
    fake = FakeAgentActivities(
        replies=[ApplicationError("401 Unauthorized: bad key", non_retryable=True)]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        result = await handle.result()
        evs = await events(handle)
        st = await status(handle)
        desc = await handle.describe()
    assert len(fake.llm_requests) == 1  # not retried
    assert result.finish_reason == "error"
    assert result.error is not None and "401 Unauthorized: bad key" in result.error
    assert event_types(evs) == ["error", "finished"]
    assert of_type(evs, "error")[0].message == result.error
    assert of_type(evs, "finished")[0].finish_reason == "error"
    assert st.phase == "finished" and st.finish_reason == "error"
    assert desc.status is not None and desc.status.name == "COMPLETED"


async def test_llm_error_after_a_tool_round(client, task_queue):
    fake = FakeAgentActivities(
        replies=[
            calls(("a", "list_dir", "{}")),
            ApplicationError("404 model not found", non_retryable=True),
        ]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        result = await handle.result()
    assert result.finish_reason == "error" and result.rounds == 1
    assert fake.tools_run == ["a"]
    assert result.error is not None and "404 model not found" in result.error


async def test_retryable_llm_error_is_retried(client, task_queue):
    fake = FakeAgentActivities(replies=[ApplicationError("503 overloaded"), text("fine")])

    # the fake returns the reply at the attempt's index: the retry reads the second reply
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        result = await handle.result()
    assert len(fake.llm_requests) == 2
    assert result.finish_reason == "stop"
    assert result.messages[-1].content == "fine"
