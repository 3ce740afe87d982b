"""No input wedges a run with Temporal's 2 MB payload limit (`PayloadsTooLarge`).

Each case sends what a hostile or unlucky client or model could send — many large messages,
a reply of hundreds of tool calls with large results, huge arguments, approvers and call ids —
and checks that the run closes on its own, that queries answer throughout, and that nothing the
workflow wrote is near the limit. The model and the tools are stand-ins (the subject is the
workflow); the server is the real dev server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from tests.fakes import FakeAgentActivities, base_execute, calls, text
from tests.helpers import events, of_type, start_run, status, wait_for_phase, wait_until, worker_for
from workflows import bounds
from workflows.bounds import MAX_CONVERSATION_BYTES
from workflows.conversation.record import invariant_violations
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    ChatMessage,
    LlmResponse,
    ToolCall,
    Usage,
)
from workflows.run.agent import AgentWorkflow

PAYLOAD_LIMIT = 2 * 1024 * 1024


async def largest_payload(client: Client, handle: WorkflowHandle[Any, Any]) -> int:
    """The largest payload in the latest run's history, in bytes."""
    history = await client.get_workflow_handle(handle.id).fetch_history()
    return max(_largest(event) for event in history.events)


def _largest(message: Message) -> int:
    if isinstance(message, Payload):
        return message.ByteSize()
    largest = 0
    for _, value in message.ListFields():
        if isinstance(value, Message):
            largest = max(largest, _largest(value))
        elif isinstance(value, Mapping) or hasattr(value, "MergeFrom"):
            items = value.values() if isinstance(value, Mapping) else value
            nested = [_largest(item) for item in items if isinstance(item, Message)]
            largest = max([largest, *nested])
    return largest


def many_calls(count: int, name: str = "list_dir", arguments: str = '{"path": "."}') -> Any:
    return LlmResponse(
        message=ChatMessage.assistant(
            "", [ToolCall(id=f"c{i}", name=name, arguments=arguments) for i in range(count)]
        ),
        usage=Usage(),
    )


class BigResults(FakeAgentActivities):
    """Tools that answer with ~15 KB each."""

    def activities(self) -> list[Any]:
        from temporalio import activity

        from workflows import names

        base = super().activities()

        @activity.defn(name=names.ACTIVITY_EXECUTE_TOOL)
        async def execute_tool(request: Any) -> str:
            self.tool_requests.append(request)
            return json.dumps({"ok": True, "data": "y" * 15_000})

        replaced = base_execute(base)
        return [a for a in base if a is not replaced] + [execute_tool]


async def test_many_large_messages_during_an_approval_wait(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("c1", "run_command", '{"command": "ls"}')), text("ok")]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go"))
        await wait_for_phase(handle, "awaiting_approval")
        for _ in range(25):
            await handle.signal("send_message", {"content": "m" * 99_000})
        await wait_until(lambda: _warnings(handle, 1))
        assert (await status(handle)).phase == "awaiting_approval"
        await handle.signal("tool_approval", {"call_id": "c1", "approved": False})
        result = await handle.result()
        log = await events(handle)
    refused = [w.message for w in of_type(log, "warning") if "send_message" in w.message]
    assert refused and "more than 1400000" in refused[0], refused
    assert result.finish_reason == "stop"
    assert invariant_violations(result.messages) == []
    held = [m for m in result.messages if m.role == "user" and m.content.startswith("m")]
    assert 0 < len(held) < 25
    assert len(result.model_dump_json()) < bounds.RESULT_BUDGET_BYTES
    assert 0 < await largest_payload(client, handle) < PAYLOAD_LIMIT


async def test_a_reply_of_200_calls_with_large_results(client, task_queue):
    fake = BigResults(replies=[many_calls(200), text("done")])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go"))
        result = await handle.result()
    tools = [m for m in result.messages if m.role == "tool"]
    assert len(tools) == 200
    assert len(fake.tool_requests) == bounds.MAX_CALLS_PER_REPLY
    assert all("Not run: a reply may run at most 64" in m.content for m in tools[64:])
    assert result.finish_reason == "stop"
    assert invariant_violations(result.messages) == []
    assert 0 < await largest_payload(client, handle) < PAYLOAD_LIMIT


async def test_a_reply_of_2100_calls(client, task_queue):
    fake = FakeAgentActivities(replies=[many_calls(2_100), text("done")])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go"))
        result = await handle.result()
    assert len(fake.tool_requests) == bounds.MAX_CALLS_PER_REPLY
    assert len([m for m in result.messages if m.role == "tool"]) == 2_100
    assert result.finish_reason == "stop"
    assert 0 < await largest_payload(client, handle) < PAYLOAD_LIMIT


async def test_a_large_reply_to_a_large_prompt_is_checked_after_the_call(client, task_queue):
    prompt = "p" * 1_390_000
    fake = FakeAgentActivities(replies=[text("r" * 750_000)])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt(prompt))
        result = await handle.result()
        log = await events(handle)
    assert len(fake.llm_requests) == 1
    assert result.finish_reason == "error"
    assert result.error is not None and "Conversation too large: the model's reply" in result.error
    assert [m.role for m in result.messages] == ["user"]
    assert [e.type for e in log][-2:] == ["error", "finished"]
    # The start input is the largest payload (the walk does find payloads).
    assert 1_390_000 < await largest_payload(client, handle) < PAYLOAD_LIMIT


async def test_huge_arguments_are_answered_not_run_and_survive_continue_as_new(client, task_queue):
    huge = json.dumps({"command": "x" * 450_000})
    fake = FakeAgentActivities(
        replies=[
            LlmResponse(
                message=ChatMessage.assistant(
                    "",
                    [
                        ToolCall(id="a", name="run_command", arguments=huge),
                        ToolCall(id="b", name="run_command", arguments=huge),
                        ToolCall(id="c", name="run_command", arguments='{"command": "ls"}'),
                    ],
                )
            ),
            text("done"),
        ]
    )
    options = AgentRunOptions(max_history_events=100)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go", options))
        waiting = await wait_for_phase(handle, "awaiting_approval")
        # The calls that cannot run never wait for a person.
        assert [c.id for c in waiting.pending_approvals] == ["c"]
        for i in range(45):  # grow the history past 100 events: continue-as-new while waiting
            await handle.signal("tool_approval", {"call_id": f"nope-{i}", "approved": True})
        await wait_until(lambda: _generations(client, handle.id, 2), timeout=60)
        await handle.signal("tool_approval", {"call_id": "c", "approved": True})
        result = await handle.result()
    assert [r.call_id for r in fake.tool_requests] == ["c"]
    tools = {m.tool_call_id: m.content for m in result.messages if m.role == "tool"}
    assert "more than the 100000 a tool takes" in tools["a"]
    assert "more than the 100000 a tool takes" in tools["b"]
    assert result.finish_reason == "stop"
    assert 0 < await largest_payload(client, handle) < PAYLOAD_LIMIT


async def test_a_huge_approver_and_huge_call_ids_are_cut(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("c1", "run_command", '{"command": "ls"}')), text("ok")]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go"))
        await wait_for_phase(handle, "awaiting_approval")
        for _ in range(3):
            await handle.signal("tool_approval", {"call_id": "i" * 1_200_000, "approved": True})
        await wait_until(lambda: _warnings(handle, 3))
        await handle.signal(
            "tool_approval", {"call_id": "c1", "approved": True, "approver": "a" * 1_100_000}
        )
        result = await handle.result()
        log = await events(handle)
    warnings = [w.message for w in of_type(log, "warning")]
    assert len(warnings) == 4
    assert all(len(w) < 1_000 for w in warnings), [len(w) for w in warnings]
    assert "approver for c1 cut to 200 characters" in warnings[3]
    approval = of_type(log, "approval")[0]
    assert approval.approver == "a" * bounds.MAX_APPROVER_CHARS
    assert result.finish_reason == "stop"
    assert 0 < await largest_payload(client, handle) < PAYLOAD_LIMIT


async def _warnings(handle: WorkflowHandle[Any, Any], count: int) -> list[Any] | None:
    found = of_type(await events(handle), "warning")
    return found if len(found) >= count else None


async def _generations(client: Client, workflow_id: str, count: int) -> bool:
    runs = [w async for w in client.list_workflows(f'WorkflowId="{workflow_id}"')]
    return len(runs) >= count


# ---- No single payload nears Temporal's 2 MB limit: a conversation too big to send to the model


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


async def test_a_reply_whose_arguments_are_nested_too_deeply_is_answered(client, task_queue):
    deep = '{"a":' * 3_000 + "1" + "}" * 3_000
    fake = FakeAgentActivities(replies=[calls(("c1", "run_command", deep)), text("done")])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go"))
        result = await asyncio.wait_for(handle.result(), 30)
    assert fake.tool_requests == []
    tools = [m.content for m in result.messages if m.role == "tool"]
    assert "Invalid tool arguments: nested too deeply" in tools[0]
    assert result.finish_reason == "stop"
