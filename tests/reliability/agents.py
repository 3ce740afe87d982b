"""Shared pieces of the reliability suites: an in-process worker with the real activities (the
scripted model or an OpenAI-compatible endpoint), run starters, and the checks every test ends
with (the run finished, queries still answer, the ordering invariant holds)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from runtime.settings import Settings
from tests.helpers import events, messages, status, wait_until
from worker import run_worker
from workflows.conversation.record import invariant_violations
from workflows.model import (
    AgentEvent,
    AgentRunInput,
    AgentRunOptions,
    AgentRunResult,
    ChatMessage,
    ToolCall,
)
from workflows.run.agent import AgentWorkflow


@dataclass
class InProcessWorker:
    client: Client
    task_queue: str
    workspace: Path

    async def start(
        self, prompt: str, workflow_id: str | None = None, **options: Any
    ) -> WorkflowHandle[AgentWorkflow, AgentRunResult]:
        run_input = AgentRunInput(
            messages=[ChatMessage.user(prompt)], options=AgentRunOptions(**options)
        )
        return await self.client.start_workflow(
            AgentWorkflow.run,
            run_input,
            id=workflow_id or f"rel-{uuid.uuid4().hex[:12]}",
            task_queue=self.task_queue,
        )


@asynccontextmanager
async def in_process_worker(
    client: Client,
    workspace: Path,
    state_dir: Path,
    *,
    llm_base_url: str | None = None,
    stream: bool = True,
    command_timeout: float = 30.0,
) -> AsyncIterator[InProcessWorker]:
    """`worker.run_worker` (the real activities) in this process, on a fresh task queue."""
    queue = f"rel-{uuid.uuid4().hex[:10]}"
    settings = Settings(
        llm_base_url=llm_base_url,
        llm_api_key="sk-reliability-test" if llm_base_url else None,
        llm_model="fake-model",
        workspace=workspace,
        command_timeout_seconds=command_timeout,
        llm_stream=stream,
        state_dir=state_dir,
        llm_timeout_seconds=30.0,
    )
    stop = asyncio.Event()
    ready = asyncio.Event()
    task = asyncio.create_task(
        run_worker(client, settings, queue=queue, stop=stop, ready=lambda _: ready.set())
    )
    try:
        await asyncio.wait_for(ready.wait(), 30)
        yield InProcessWorker(client, queue, workspace)
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


# ---------------------------------------------------------------- observing runs


async def warnings_after(handle: WorkflowHandle[Any, Any], after: int) -> list[str]:
    return [e.message for e in await events(handle, after) if e.type == "warning"]


async def wait_warnings(
    handle: WorkflowHandle[Any, Any], after: int, count: int = 1, timeout: float = 15.0
) -> list[str]:
    async def check() -> list[str] | None:
        found = await warnings_after(handle, after)
        return found if len(found) >= count else None

    result: list[str] = await wait_until(check, timeout)
    return result


async def last_seq(handle: WorkflowHandle[Any, Any]) -> int:
    items = await events(handle)
    return items[-1].seq if items else -1


async def pending_ids(handle: WorkflowHandle[Any, Any]) -> list[str]:
    return [c.id for c in (await status(handle)).pending_approvals]


async def wait_pending(handle: WorkflowHandle[Any, Any], timeout: float = 30.0) -> list[ToolCall]:
    async def check() -> list[ToolCall] | None:
        current = await status(handle)
        if current.phase == "awaiting_approval" and current.pending_approvals:
            return current.pending_approvals
        return None

    result: list[ToolCall] = await wait_until(check, timeout, interval=0.1)
    return result


async def result_of(
    handle: WorkflowHandle[AgentWorkflow, AgentRunResult], timeout: float = 60.0
) -> AgentRunResult:
    return await asyncio.wait_for(handle.result(), timeout)


def open_calls(history: Sequence[ChatMessage]) -> list[str]:
    return invariant_violations(list(history), allow_open_tail=False)


async def finished_well(
    handle: WorkflowHandle[AgentWorkflow, AgentRunResult],
    expected: str = "stop",
    timeout: float = 60.0,
) -> tuple[AgentRunResult, list[AgentEvent]]:
    """The run ends with `expected`, still answers every query afterwards, and its history keeps
    the invariant with no open tail (cancelled runs may keep an unanswered tail)."""
    result = await result_of(handle, timeout)
    assert result.finish_reason == expected, (result.finish_reason, result.error)
    current = await status(handle)
    assert current.phase == "finished" and current.finish_reason == expected
    history = await messages(handle)
    log = await events(handle)
    assert log and log[-1].type == "finished"
    assert [e.seq for e in log] == list(range(log[0].seq, log[0].seq + len(log)))
    assert invariant_violations(history, allow_open_tail=expected == "cancelled") == []
    return result, log


def openai_to_chat(messages_json: Sequence[dict[str, Any]]) -> list[ChatMessage]:
    """An OpenAI request's `messages` as ChatMessages (for the invariant check)."""
    converted: list[ChatMessage] = []
    for item in messages_json:
        calls = None
        if item.get("tool_calls"):
            calls = [
                ToolCall(
                    id=str(c.get("id")),
                    name=str((c.get("function") or {}).get("name")),
                    arguments=(c.get("function") or {}).get("arguments", "{}"),
                )
                for c in item["tool_calls"]
            ]
        converted.append(
            ChatMessage(
                role=item["role"],
                content=item.get("content") or "",
                name=item.get("name"),
                tool_calls=calls,
                tool_call_id=item.get("tool_call_id"),
            )
        )
    return converted


def approval_json(call_id: str, approved: Any = True, **extra: Any) -> str:
    return json.dumps({"call_id": call_id, "approved": approved, **extra}, ensure_ascii=False)
