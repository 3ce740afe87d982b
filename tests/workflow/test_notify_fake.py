"""The `notify` stand-in of tests/fakes.py, as the workflow uses it: what it records when a call
waits for a person, nothing when the worker does not notify, and a delivery that fails for its
whole hour ending as a `warning` while the run goes on (an hour passes in seconds on the real
time-skipping test server)."""

from __future__ import annotations

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import events, of_type, start_run, wait_for_phase, wait_until, worker_for
from workflows.model import AgentRunInput, AgentRunOptions, ToolApprovalResponse

HOUR = 3600


async def test_a_waiting_call_is_one_notify_request(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "delete_path", '{"path": "logs"}')), text("done")],
        notifies=True,
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("delete logs"))
        st = await wait_for_phase(handle, "awaiting_approval")
        await wait_until(lambda: fake.notify_requests)
        [request] = fake.notify_requests
        assert request.event == "approval_waiting"
        assert request.workflow_id == handle.id
        assert request.run_id == st.run_id
        assert (request.call_id, request.tool) == ("call_1", "delete_path")
        assert request.arguments == '{"path": "logs"}'
        assert request.waiting_since == st.awaiting_since
        await handle.signal("tool_approval", ToolApprovalResponse(call_id="call_1", approved=True))
        result = await handle.result()
    assert result.finish_reason == "stop"


async def test_a_worker_that_does_not_notify_gets_no_request(client, task_queue):
    fake = FakeAgentActivities(replies=[calls(("call_1", "delete_path", "{}")), text("done")])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("delete it"))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal("tool_approval", ToolApprovalResponse(call_id="call_1", approved=True))
        assert (await handle.result()).finish_reason == "stop"
    assert fake.notify_requests == []


async def test_a_delivery_failing_for_an_hour_is_a_warning_and_the_run_goes_on(
    time_skipping_env, task_queue
):
    client = time_skipping_env.client
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "delete_path", "{}")), text("ok, I will not")],
        notifies=True,
        notify_failures=-1,
    )
    options = AgentRunOptions(approval_timeout_seconds=3 * HOUR, on_approval_timeout="reject")
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))
        result = await handle.result()
        evs = await events(handle)
    assert result.finish_reason == "stop"
    waiting = [r for r in fake.notify_requests if r.event == "approval_waiting"]
    assert len(waiting) > 5  # retried with backoff (1 s doubling up to 5 min) for its hour
    warnings = [w.message for w in of_type(evs, "warning")]
    assert any(
        "approval_waiting for call 'call_1' was not delivered" in w and "HTTP 500" in w
        for w in warnings
    ), warnings


async def test_a_run_at_its_token_budget_is_one_notify_request_and_its_end_another(
    client, task_queue
):
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "list_dir", '{"path": "."}')), text("done")], notifies=True
    )
    options = AgentRunOptions(max_run_tokens=10)  # the first reply reports 15 tokens
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("list", options))
        await wait_for_phase(handle, "budget_exhausted")
        await wait_until(lambda: fake.notify_requests)
        [request] = fake.notify_requests
        assert request.event == "budget_exhausted" and request.workflow_id == handle.id
        assert (request.used, request.limit) == (15, 10) and request.waiting_since is not None
        await handle.execute_update("grant_budget", {"stop": True, "approver": "ann"})
        assert (await handle.result()).finish_reason == "budget"
        await wait_until(lambda: len(fake.notify_requests) == 2)
    assert fake.notify_requests[1].event == "run_finished"
    assert fake.notify_requests[1].finish_reason == "budget"
