"""The workflow's argument: a bare prompt works, and input that does not validate fails the run
at once with a clear message (instead of a workflow task that fails forever)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowFailureError
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from tests.fakes import FakeAgentActivities, text
from workflows.model import AgentRunResult
from workflows.run.agent import AgentWorkflow


async def test_a_plain_prompt_is_a_user_message(client, task_queue):
    fake = FakeAgentActivities(replies=[text("hi")])
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=fake.activities()
    ):
        result = await client.execute_workflow(
            "AgentWorkflow",
            "hello there",
            id=f"agent-{uuid.uuid4()}",
            task_queue=task_queue,
            result_type=AgentRunResult,
        )
    assert [(m.role, m.content) for m in result.messages] == [
        ("user", "hello there"),
        ("assistant", "hi"),
    ]


@pytest.mark.parametrize(
    ("bad_input", "expected"),
    [
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({"messages": [], "options": {"max_rounds": -1}}, "options.max_rounds"),
        ({"options": {}}, "messages: Field required"),
        (42, "Invalid AgentRunInput"),
    ],
)
async def test_invalid_input_fails_the_run_with_a_clear_error(
    client, task_queue, bad_input, expected
):
    fake = FakeAgentActivities()
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=fake.activities()
    ):
        with pytest.raises(WorkflowFailureError) as caught:
            await client.execute_workflow(
                "AgentWorkflow", bad_input, id=f"agent-{uuid.uuid4()}", task_queue=task_queue
            )
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "InvalidAgentRunInput"
    assert cause.message.startswith("Invalid AgentRunInput: ")
    assert expected in cause.message
    assert fake.llm_requests == []


def _nested_input(depth: int) -> RawValue:
    """A start input whose options hold a value nested `depth` levels deep, as raw JSON (the
    client's own converter refuses to write it)."""
    nested = '{"a":' * depth + '"x"' + "}" * depth
    text = '{"messages": [{"role": "user", "content": "hi"}], "options": {"x": ' + nested + "}}"
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=text.encode()))


@pytest.mark.parametrize("depth", [300, 5_000])
async def test_deeply_nested_input_fails_the_run_with_a_clear_error(client, task_queue, depth):
    fake = FakeAgentActivities()
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=fake.activities()
    ):
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(
                client.execute_workflow(
                    "AgentWorkflow",
                    _nested_input(depth),
                    id=f"agent-{uuid.uuid4()}",
                    task_queue=task_queue,
                ),
                30,
            )
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "InvalidAgentRunInput"
    assert "nested too deeply" in cause.message
    assert fake.llm_requests == []
