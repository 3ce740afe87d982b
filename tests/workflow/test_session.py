"""Sessions (`keep_alive`): a run becomes a conversation that waits for `send_message` between
turns, counts rounds per turn, ends on cancel (always `cancelled`) or on the idle timeout."""

from __future__ import annotations

from temporalio.worker import Worker

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import (
    event_types,
    events,
    messages,
    start_run,
    status,
    wait_for_phase,
    wait_until,
)
from workflows.conversation.record import invariant_violations
from workflows.model import AgentRunInput, AgentRunOptions
from workflows.run.agent import AgentWorkflow


async def test_session_waits_for_messages_and_counts_rounds_per_turn(client, task_queue):
    fake = FakeAgentActivities(
        replies=[
            calls(("call_1", "list_dir", '{"path": "."}')),
            text("There are two folders."),
            text("Hello again."),
        ]
    )
    run_input = AgentRunInput.from_prompt(
        "what is here?", AgentRunOptions(keep_alive=True, max_rounds=3)
    )
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=fake.activities()
    ):
        handle = await start_run(client, task_queue, run_input)
        first = await wait_for_phase(handle, "waiting_for_message")
        assert first.round == 1  # one tool round in the first turn
        await handle.signal("send_message", {"content": "thanks, anything else?"})
        await wait_until(lambda: len(fake.llm_requests) == 3)
        second = await wait_for_phase(handle, "waiting_for_message")
        assert second.round == 0  # a new turn starts counting again
        history = await messages(handle)
        assert [m.role for m in history] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
        ]
        assert history[4].content == "thanks, anything else?"
        await handle.signal("cancel", {"reason": "done for today"})
        result = await handle.result()
        log = await events(handle)
    assert result.finish_reason == "cancelled"
    assert result.error == "Agent run cancelled: done for today"
    assert event_types(log)[-2:] == ["error", "finished"]
    assert invariant_violations(result.messages) == []


async def test_message_sent_during_approval_wait_is_held_until_after_the_tool_messages(
    client, task_queue
):
    fake = FakeAgentActivities(
        replies=[
            calls(("call_1", "run_command", '{"command": "ls"}'), ("call_2", "list_dir", "{}")),
            text("done"),
        ]
    )
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=fake.activities()
    ):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go"))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal("send_message", {"content": "and be careful"})
        assert [m.role for m in await messages(handle)] == ["user", "assistant"]
        await handle.signal("tool_approval", {"call_id": "call_1", "approved": True})
        result = await handle.result()
    roles = [m.role for m in result.messages]
    assert roles == ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert result.messages[4].content == "and be careful"
    assert invariant_violations(result.messages, allow_open_tail=False) == []


async def test_session_idle_timeout_ends_the_session(time_skipping_env):
    client = time_skipping_env.client
    fake = FakeAgentActivities(replies=[text("Hi.")])
    run_input = AgentRunInput.from_prompt(
        "hello", AgentRunOptions(keep_alive=True, idle_timeout_seconds=6 * 3600)
    )
    async with Worker(
        client, task_queue="session-idle", workflows=[AgentWorkflow], activities=fake.activities()
    ):
        handle = await start_run(client, "session-idle", run_input)
        result = await handle.result()
        final = await status(handle)
    assert result.finish_reason == "stop"
    assert final.phase == "finished"


async def test_a_session_waiting_between_turns_continues_as_new_and_keeps_waiting(
    client, task_queue
):
    fake = FakeAgentActivities(replies=[text("Hi."), text("Welcome back.")])
    run_input = AgentRunInput.from_prompt(
        "hello", AgentRunOptions(keep_alive=True, max_history_events=100)
    )
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=fake.activities()
    ):
        handle = await start_run(client, task_queue, run_input)
        await wait_for_phase(handle, "waiting_for_message")
        # Ignored answers grow the history while the session is idle, until it continues as new.
        for i in range(60):
            await handle.signal("tool_approval", {"call_id": f"x{i}", "approved": True})

        async def generations() -> int:
            return len([w async for w in client.list_workflows(f'WorkflowId="{handle.id}"')])

        await wait_until(lambda: generations_at_least(generations, 2), timeout=30)
        still = await wait_for_phase(handle, "waiting_for_message")
        assert len(fake.llm_requests) == 1  # the new generation did not call the model by itself
        await handle.signal("send_message", {"content": "I am back"})
        await wait_until(lambda: len(fake.llm_requests) == 2)
        await wait_for_phase(handle, "waiting_for_message")
        await handle.signal("cancel")
        result = await handle.result()
    assert still.round == 0
    assert [m.content for m in result.messages] == ["hello", "Hi.", "I am back", "Welcome back."]
    assert result.finish_reason == "cancelled"


async def generations_at_least(count, minimum: int) -> bool:
    return await count() >= minimum
