"""Small helpers shared by the workflow tests: start a run, wait for a phase, read events."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from temporalio.client import Client, WorkflowHandle

from workflows.model import AgentEvent, AgentRunInput, AgentRunResult, AgentStatus, ChatMessage
from workflows.run.agent import AgentWorkflow


async def start_run(
    client: Client, task_queue: str, run_input: AgentRunInput, workflow_id: str | None = None
) -> WorkflowHandle[AgentWorkflow, AgentRunResult]:
    return await client.start_workflow(
        AgentWorkflow.run,
        run_input,
        id=workflow_id or f"agent-{uuid.uuid4()}",
        task_queue=task_queue,
    )


async def status(handle: WorkflowHandle[Any, Any]) -> AgentStatus:
    return await handle.query("status", result_type=AgentStatus)


async def events(handle: WorkflowHandle[Any, Any], after: int = -1) -> list[AgentEvent]:
    return await handle.query("events", after, result_type=list[AgentEvent])


async def messages(handle: WorkflowHandle[Any, Any]) -> list[ChatMessage]:
    return await handle.query("messages", result_type=list[ChatMessage])


async def wait_until(check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.1) -> Any:
    """Poll an async or sync check until it returns something truthy."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval)


async def wait_for_phase(
    handle: WorkflowHandle[Any, Any], phase: str, timeout: float = 20.0
) -> AgentStatus:
    async def check() -> AgentStatus | None:
        current = await status(handle)
        return current if current.phase == phase else None

    result: AgentStatus = await wait_until(check, timeout)
    return result


def event_types(items: list[AgentEvent]) -> list[str]:
    return [e.type for e in items]


def worker_for(client: Client, task_queue: str, fake: Any, **kwargs: Any) -> Any:
    """A Worker running AgentWorkflow with the fake activities of `fake` (a FakeAgentActivities),
    built through the agent's plugin like every production worker (so with its heartbeat
    tuning)."""
    from temporalio.worker import Worker

    from activities.plugin import AgentPlugin

    return Worker(
        client,
        task_queue=task_queue,
        plugins=[AgentPlugin(activities=fake.activities())],
        **kwargs,
    )


def of_type(items: list[AgentEvent], kind: str) -> list[Any]:
    """The events of one type, in order."""
    return [e for e in items if e.type == kind]


def tool_messages(history: list[ChatMessage]) -> list[ChatMessage]:
    return [m for m in history if m.role == "tool"]


async def history_length(client: Client, workflow_id: str) -> int:
    """The events in the run's history now (a read that leaves it as it is)."""
    description = await client.get_workflow_handle(workflow_id).describe()
    return description.raw_description.workflow_execution_info.history_length
