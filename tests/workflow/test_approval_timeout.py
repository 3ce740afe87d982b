"""Approval timeouts are durable timers: one hour passes in seconds on the real
time-skipping test server, with both policies."""

from __future__ import annotations

import time
from datetime import timedelta

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import event_types, events, of_type, start_run, tool_messages, worker_for
from workflows.model import AgentRunInput, AgentRunOptions

HOUR = 3600


async def test_approval_timeout_cancel(time_skipping_env, task_queue):
    client = time_skipping_env.client
    fake = FakeAgentActivities(replies=[calls(("c1", "delete_path", "{}")), text("never")])
    options = AgentRunOptions(approval_timeout_seconds=HOUR, on_approval_timeout="cancel")
    started = time.monotonic()
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))
        result = await handle.result()
        evs = await events(handle)
    wall = time.monotonic() - started
    print(f"approval timeout (cancel): {wall:.2f}s wall time for a one-hour wait")
    assert wall < 60
    assert result.finish_reason == "cancelled"
    assert result.error == "Approval timed out"
    assert fake.tools_run == [] and len(fake.llm_requests) == 1
    assert evs[-2].type == "error" and evs[-2].message == "Approval timed out"
    assert evs[-1].type == "finished" and evs[-1].finish_reason == "cancelled"
    assert "approval" not in event_types(evs)
    # the workflow clock advanced by at least the timeout
    history = await handle.fetch_history()
    first = history.events[0].event_time.ToDatetime()
    last = history.events[-1].event_time.ToDatetime()
    assert last - first >= timedelta(seconds=HOUR)


async def test_approval_timeout_reject(time_skipping_env, task_queue):
    client = time_skipping_env.client
    fake = FakeAgentActivities(
        replies=[
            calls(
                ("c1", "delete_path", "{}"), ("c2", "run_command", "{}"), ("c3", "list_dir", "{}")
            ),
            text("ok, I will not"),
        ]
    )
    options = AgentRunOptions(approval_timeout_seconds=HOUR, on_approval_timeout="reject")
    started = time.monotonic()
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))
        result = await handle.result()
        evs = await events(handle)
    wall = time.monotonic() - started
    print(f"approval timeout (reject): {wall:.2f}s wall time for a one-hour wait")
    assert wall < 60
    assert result.finish_reason == "stop" and result.error is None
    assert fake.tools_run == ["c3"]  # only the unguarded call ran
    tools = tool_messages(result.messages)
    assert [m.tool_call_id for m in tools] == ["c1", "c2", "c3"]
    assert tools[0].content == "Rejected: Approval timed out"
    assert tools[1].content == "Rejected: Approval timed out"
    assert evs[-1].type == "finished" and evs[-1].finish_reason == "stop"
    assert "error" not in event_types(evs)
    approvals = of_type(evs, "approval")
    assert [(a.call_id, a.approved, a.reason) for a in approvals] == [
        ("c1", False, "Approval timed out"),
        ("c2", False, "Approval timed out"),
    ]
    assert len(of_type(evs, "awaiting_approval")) == 1
    # the answers were recorded on the workflow clock, one hour after the start
    history = await handle.fetch_history()
    start = history.events[0].event_time.ToDatetime(tzinfo=approvals[0].at.tzinfo)
    assert approvals[0].at - start >= timedelta(seconds=HOUR)
