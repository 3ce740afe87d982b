"""AgentWorkflow on the dev server with fake activities: approvals, rejections, mixed batches,
resume with answers given at start, max rounds, the `submit_approval` update and the queries."""

from __future__ import annotations

import json

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import (
    event_types,
    events,
    messages,
    of_type,
    start_run,
    status,
    tool_messages,
    wait_for_phase,
    worker_for,
)
from workflows.conversation.record import invariant_violations
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    ChatMessage,
    ToolApprovalResponse,
    ToolCall,
)


async def test_approve_runs_the_tool_and_records_who_and_when(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "delete_path", '{"path": "logs"}')), text("deleted")],
        client=client,
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("delete logs"))
        st = await wait_for_phase(handle, "awaiting_approval")
        assert st.round == 0 and not st.cancel_requested and st.finish_reason is None
        assert st.awaiting_since is not None
        assert st.pending_approvals == [
            ToolCall(id="call_1", name="delete_path", arguments='{"path": "logs"}')
        ]
        await handle.signal(
            "tool_approval", {"call_id": "call_1", "approved": True, "approver": "ann"}
        )
        result = await handle.result()
        evs = await events(handle)
        final = await status(handle)
    assert result.finish_reason == "stop" and result.error is None
    assert result.rounds == 1
    assert result.usage.prompt_tokens == 20 and result.usage.completion_tokens == 10
    assert fake.tools_run == ["call_1"]
    assert fake.tool_requests[0].arguments == {"path": "logs"}
    assert fake.tool_requests[0].workflow_id == handle.id
    assert [e.seq for e in evs] == list(range(len(evs)))
    (approval,) = of_type(evs, "approval")
    assert approval.approver == "ann" and approval.approved is True and approval.at is not None
    (call_ev,) = of_type(evs, "tool_call")
    assert call_ev.requires_approval is True and call_ev.name == "delete_path"
    (awaiting,) = of_type(evs, "awaiting_approval")
    assert [c.id for c in awaiting.pending] == ["call_1"]
    assert final.phase == "finished" and final.finish_reason == "stop"
    assert final.pending_approvals == []
    # the model's second request saw the tool result right after its call
    assert len(fake.llm_prefixes) == 2
    second = fake.llm_prefixes[1]
    assert [m.role for m in second] == ["user", "assistant", "tool"]
    assert second[2].tool_call_id == "call_1" and second[2].name == "delete_path"
    assert "ran delete_path call_1" in second[2].content
    assert invariant_violations(result.messages, allow_open_tail=False) == []


@pytest.mark.parametrize(
    ("reason", "expected"),
    [("not today", "Rejected: not today"), (None, "Rejected: User denied")],
)
async def test_reject_feeds_the_rejection_to_the_model(client, task_queue, reason, expected):
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "run_command", '{"command": "rm -rf /"}')), text("ok")],
        client=client,
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("clean up"))
        await wait_for_phase(handle, "awaiting_approval")
        payload: dict[str, object] = {"call_id": "call_1", "approved": False}
        if reason is not None:
            payload["reason"] = reason
        await handle.signal("tool_approval", payload)
        result = await handle.result()
        evs = await events(handle)
    assert result.finish_reason == "stop"
    assert fake.tools_run == []
    (tool_msg,) = tool_messages(result.messages)
    assert tool_msg.content == expected
    assert tool_msg.tool_call_id == "call_1" and tool_msg.name == "run_command"
    assert fake.llm_prefixes[1][-1] == tool_msg
    (res,) = of_type(evs, "tool_result")
    assert res.content == expected
    (approval,) = of_type(evs, "approval")
    assert approval.approved is False and approval.reason == reason


async def test_mixed_batch_results_in_call_order(client, task_queue):
    fake = FakeAgentActivities(
        replies=[
            calls(
                ("c_a", "run_command", '{"command": "ls"}'),
                ("c_b", "list_dir", '{"path": "."}'),
                ("c_c", "delete_path", '{"path": "logs"}'),
            ),
            text("done"),
        ],
        client=client,
        tool_delay=0.3,
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("tidy"))
        st = await wait_for_phase(handle, "awaiting_approval")
        # the unguarded call does not wait for approval and is not listed
        assert [c.id for c in st.pending_approvals] == ["c_a", "c_c"]
        # answer out of order
        await handle.signal("tool_approval", {"call_id": "c_c", "approved": False, "reason": "no"})
        st = await status(handle)
        assert [c.id for c in st.pending_approvals] == ["c_a"]
        await handle.signal("tool_approval", {"call_id": "c_a", "approved": True})
        result = await handle.result()
    assert sorted(fake.tools_run) == ["c_a", "c_b"]
    tools = tool_messages(result.messages)
    assert [m.tool_call_id for m in tools] == ["c_a", "c_b", "c_c"]
    assert tools[2].content == "Rejected: no"
    assert "ran run_command c_a" in tools[0].content
    assert "ran list_dir c_b" in tools[1].content
    assert invariant_violations(result.messages, allow_open_tail=False) == []
    assert [m.tool_call_id for m in fake.llm_prefixes[1] if m.role == "tool"] == [
        "c_a",
        "c_b",
        "c_c",
    ]


async def test_unguarded_calls_run_without_waiting(client, task_queue):
    fake = FakeAgentActivities(
        replies=[
            calls(("a", "list_dir", {"path": "."}), ("b", "read_file", '{"path": "x"}')),
            calls(("a", "read_file", "{}")),  # reused id in the next round
            text("done"),
        ]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("look"))
        result = await handle.result()
        evs = await events(handle)
    assert result.finish_reason == "stop" and result.rounds == 2
    assert fake.tools_run == ["a", "b", "a"] or sorted(fake.tools_run[:2]) == ["a", "b"]
    assert len(fake.tools_run) == 3
    assert "awaiting_approval" not in event_types(evs)
    assert invariant_violations(result.messages, allow_open_tail=False) == []


async def test_approval_required_option_guards_extra_tools(client, task_queue):
    fake = FakeAgentActivities(replies=[calls(("a", "list_dir", "{}")), text("done")])
    options = AgentRunOptions(approval_required=["list_dir"])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))
        st = await wait_for_phase(handle, "awaiting_approval")
        assert [c.id for c in st.pending_approvals] == ["a"]
        await handle.signal("tool_approval", {"call_id": "a", "approved": True})
        result = await handle.result()
    assert fake.tools_run == ["a"] and result.finish_reason == "stop"


async def test_unknown_tool_and_bad_arguments_are_reported_to_the_model(client, task_queue):
    fake = FakeAgentActivities(
        replies=[
            calls(
                ("a", "frobnicate", "{}"), ("b", "list_dir", "{not json"), ("c", "explode", "{}")
            ),
            text("done"),
        ],
        specs=[
            *FakeAgentActivities().specs,
            *[
                s.model_copy(update={"name": "explode"})
                for s in FakeAgentActivities().specs
                if s.name == "list_dir"
            ],
        ],
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        result = await handle.result()
    assert result.finish_reason == "stop"
    tools = tool_messages(result.messages)
    assert [m.tool_call_id for m in tools] == ["a", "b", "c"]
    assert tools[0].content == "Tool 'frobnicate' not found"
    bad_args = json.loads(tools[1].content)
    assert bad_args["ok"] is False and bad_args["data"] is None
    assert bad_args["error"].startswith("Invalid tool arguments: ")
    failed = json.loads(tools[2].content)
    assert failed["ok"] is False and failed["data"] is None
    assert failed["error"].startswith("Framework error: ")
    assert "boom" in failed["error"]
    assert fake.tools_run == ["c"]  # only the known tool with good arguments ran


async def test_tools_allow_list(client, task_queue):
    fake = FakeAgentActivities(replies=[calls(("a", "read_file", "{}")), text("done")])
    options = AgentRunOptions(tools=["list_dir"])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))
        result = await handle.result()
    assert fake.llm_requests[0].tools == ["list_dir"]
    assert fake.tools_run == []
    assert tool_messages(result.messages)[0].content == "Tool 'read_file' not found"


async def test_max_rounds(client, task_queue):
    loop = [calls((f"c{i}", "list_dir", "{}")) for i in range(10)]
    fake = FakeAgentActivities(replies=loop)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(
            client, task_queue, AgentRunInput.from_prompt("x", AgentRunOptions(max_rounds=3))
        )
        result = await handle.result()
        evs = await events(handle)
    assert result.finish_reason == "max_rounds"
    assert result.rounds == 3 and result.error is None
    assert len(fake.llm_requests) == 3 and len(fake.tools_run) == 3
    assert [r.round for r in fake.llm_requests] == [0, 1, 2]
    assert evs[-1].type == "finished" and evs[-1].finish_reason == "max_rounds"
    assert "error" not in event_types(evs)


async def test_max_rounds_zero_never_calls_the_model(client, task_queue):
    fake = FakeAgentActivities(replies=[text("never")])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(
            client, task_queue, AgentRunInput.from_prompt("x", AgentRunOptions(max_rounds=0))
        )
        result = await handle.result()
    assert result.finish_reason == "max_rounds" and result.rounds == 0
    assert fake.llm_requests == []


async def test_seed_style_resume_at_start(client, task_queue):
    assistant = ChatMessage.assistant(
        "I will do three things",
        [
            ToolCall(id="s1", name="run_command", arguments='{"command": "ls"}'),
            ToolCall(id="s2", name="delete_path", arguments='{"path": "a"}'),
            ToolCall(id="s3", name="delete_path", arguments='{"path": "b"}'),
            ToolCall(id="s4", name="list_dir", arguments="{}"),
        ],
    )
    run_input = AgentRunInput(
        messages=[ChatMessage.user("do it"), assistant],
        options=AgentRunOptions(
            tool_approval_responses=[
                ToolApprovalResponse(call_id="s1", approved=True, approver="bob"),
                ToolApprovalResponse(call_id="s2", approved=False, reason="keep a"),
                ToolApprovalResponse(call_id="nope", approved=True),
            ]
        ),
    )
    fake = FakeAgentActivities(replies=[text("summary")], client=client)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input)
        result = await handle.result()
        evs = await events(handle)
    assert result.finish_reason == "stop"
    assert sorted(fake.tools_run) == ["s1", "s4"]
    tools = tool_messages(result.messages)
    assert [m.tool_call_id for m in tools] == ["s1", "s2", "s3", "s4"]
    assert tools[1].content == "Rejected: keep a"
    assert tools[2].content == "Rejected: User denied"
    warnings = [e.message for e in of_type(evs, "warning")]
    assert len(warnings) == 1 and "nope" in warnings[0], warnings
    assert "awaiting_approval" not in event_types(evs)
    assert [e.call_id for e in of_type(evs, "approval")] == ["s1", "s2"]
    assert fake.llm_prefixes[0][-4:] == tools
    assert invariant_violations(result.messages, allow_open_tail=False) == []


async def test_seed_responses_without_pending_calls_warn(client, task_queue):
    run_input = AgentRunInput(
        messages=[ChatMessage.user("hi")],
        options=AgentRunOptions(
            tool_approval_responses=[ToolApprovalResponse(call_id="x", approved=True)]
        ),
    )
    fake = FakeAgentActivities(replies=[text("hello")])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input)
        result = await handle.result()
        evs = await events(handle)
    assert result.finish_reason == "stop"
    assert event_types(evs) == ["warning", "text_delta", "finished"]


async def test_submit_approval_update(client, task_queue):
    fake = FakeAgentActivities(
        replies=[
            calls(("u1", "run_command", "{}"), ("u2", "delete_path", "{}")),
            text("done"),
        ]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_for_phase(handle, "awaiting_approval")
        before = await events(handle)

        for bad in (
            {"call_id": "zzz", "approved": True},
            {"call_id": "u1", "approved": "yes"},
            {"call_id": "u1"},
            ["u1", True],
            None,
        ):
            with pytest.raises(WorkflowUpdateFailedError):
                await handle.execute_update("submit_approval", bad)
        # rejected updates leave no trace in the events and change nothing
        assert await events(handle) == before
        assert [c.id for c in (await status(handle)).pending_approvals] == ["u1", "u2"]

        remaining = await handle.execute_update(
            "submit_approval",
            {"call_id": "u1", "approved": True, "approver": "ops"},
            result_type=list[ToolCall],
        )
        assert [c.id for c in remaining] == ["u2"]
        with pytest.raises(WorkflowUpdateFailedError) as info:
            await handle.execute_update("submit_approval", {"call_id": "u1", "approved": False})
        assert "already answered" in str(info.value.cause)
        remaining = await handle.execute_update(
            "submit_approval", {"call_id": "u2", "approved": False}, result_type=list[ToolCall]
        )
        assert remaining == []
        result = await handle.result()
        # a closed workflow takes no updates at all (the server refuses)
        with pytest.raises(RPCError, match="already completed"):
            await handle.execute_update("submit_approval", {"call_id": "u2", "approved": True})
    assert fake.tools_run == ["u1"]
    tools = tool_messages(result.messages)
    assert [m.content for m in tools][1] == "Rejected: User denied"


async def test_events_after_filter_and_messages_query(client, task_queue):
    fake = FakeAgentActivities(replies=[calls(("a", "list_dir", "{}")), text("bye")])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        result = await handle.result()
        all_events = await events(handle)
        assert len(all_events) >= 4
        assert await events(handle, 1) == all_events[2:]
        assert await events(handle, len(all_events) - 1) == []
        assert await events(handle, 10_000) == []
        assert await events(handle, -5) == all_events
        # the plain query with no argument is `after = -1`
        raw = await handle.query("events")
        assert len(raw) == len(all_events)
        assert await messages(handle) == result.messages
