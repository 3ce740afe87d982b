"""Sub-agents on the dev server with a real worker: a `delegate` call runs a child
`AgentWorkflow` under the same people, rules and budget, and its answer is the call's result.
The model is scripted per run (the parent and each child by workflow id); the tools are fakes."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.service import RPCError

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import (
    event_types,
    events,
    start_run,
    status,
    wait_for_phase,
    wait_until,
    worker_for,
)
from workflows import names
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    AgentRunResult,
    ChatMessage,
    ForkedFrom,
    LlmRequest,
    LlmResponse,
    SubAgentOf,
    ToolApprovalResponse,
)
from workflows.run.sub_agents import DELEGATE


class ByRun:
    """The model's replies, scripted per run: the parent's by its own id, a sub-agent's by the
    `delegate` call's id (the suffix of its workflow id)."""

    def __init__(self, parent: list[LlmResponse], **children: list[LlmResponse]) -> None:
        self.scripts = {"": parent, **children}
        self.seen: dict[str, list[LlmRequest]] = {}

    def __call__(self, request: LlmRequest) -> LlmResponse:
        key = request.workflow_id.rsplit(".", 1)[1] if "." in request.workflow_id else ""
        asked = self.seen.setdefault(key, [])
        asked.append(request)
        script = self.scripts.get(key, [])
        return script[len(asked) - 1] if len(asked) <= len(script) else text("(nothing more)")


def fake_with(script: ByRun, **kwargs: Any) -> FakeAgentActivities:
    return FakeAgentActivities(replies=[script] * 100, **kwargs)


def delegate(call_id: str, task: str, **more: Any) -> tuple[str, str, str]:
    return (call_id, DELEGATE, json.dumps({"task": task, **more}))


def run_input(prompt: str = "Look through the logs", **options: Any) -> AgentRunInput:
    return AgentRunInput(
        messages=[ChatMessage.system("You are careful."), ChatMessage.user(prompt)],
        options=AgentRunOptions(sub_agents=True, **options),
    )


async def started(handle: Any) -> Any:
    """The child's handle once Temporal has it (a query before its start finds no workflow)."""

    async def exists() -> bool:
        try:
            await handle.describe()
        except RPCError:
            return False
        return True

    await wait_until(exists)
    return handle


def tool_result(messages: list[ChatMessage], call_id: str) -> dict[str, Any]:
    found = next(m for m in messages if m.role == "tool" and m.tool_call_id == call_id)
    return json.loads(found.content)


async def test_a_delegate_call_runs_a_child_whose_answer_is_its_result(client, task_queue):
    script = ByRun(
        [calls(delegate("call_1", "Count the errors in logs/app.log")), text("There are 3.")],
        call_1=[text("I counted 3 errors.")],
    )
    fake = fake_with(script)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input())
        result = await handle.result()
        kinds = event_types(await events(handle))
    child = f"{handle.id}.call_1"
    assert result.finish_reason == "stop"
    data = tool_result(result.messages, "call_1")
    assert data == {
        "ok": True,
        "error": None,
        "data": {"answer": "I counted 3 errors.", "workflow_id": child,
                 "finish_reason": "stop", "tokens": 15},
    }  # fmt: skip
    # The child's conversation: the parent's system prompt, then the task.
    first = script.seen["call_1"][0]
    assert first.workflow_id == child and first.tools and DELEGATE in first.tools
    assert kinds.index("sub_agent_started") < kinds.index("sub_agent_finished")
    described = await client.get_workflow_handle(child).describe()
    assert described.status == WorkflowExecutionStatus.COMPLETED
    assert described.parent_id == handle.id


async def test_a_childs_delete_asks_the_same_people_and_the_parent_shows_it(client, task_queue):
    script = ByRun(
        [calls(delegate("call_1", "Delete the logs folder")), text("Done.")],
        call_1=[calls(("c1", "delete_path", '{"path": "logs"}')), text("Deleted.")],
    )
    fake = fake_with(script)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input())
        child = await started(client.get_workflow_handle(f"{handle.id}.call_1"))
        waiting = await wait_for_phase(child, "awaiting_approval")
        assert waiting.parent == SubAgentOf(
            workflow_id=handle.id, run_id=handle.result_run_id or "",
            call_id="call_1", depth=1, task="Delete the logs folder",
        )  # fmt: skip

        async def parent_shows_it() -> Any:
            now = await status(handle)
            agents = now.sub_agents
            return now.phase == "waiting_for_sub_agents" and agents and agents[0].pending_approvals

        await wait_until(parent_shows_it)
        assert "sub_agent_waiting" in event_types(await events(handle))
        assert fake.tool_requests == []
        await child.execute_update(
            names.UPDATE_SUBMIT_APPROVAL,
            ToolApprovalResponse(call_id="c1", approved=True, approver="ann"),
        )
        result = await handle.result()
        audit = await handle.query(names.QUERY_AUDIT)
    assert [r.name for r in fake.tool_requests] == ["delete_path"]
    assert tool_result(result.messages, "call_1")["data"]["answer"] == "Deleted."
    assert any(d.get("workflow_id") == child.id for d in audit["decisions"])


async def test_parallel_children_and_a_failed_one(client, task_queue):
    script = ByRun(
        [calls(delegate("a", "one"), delegate("b", "two", max_rounds=1)), text("ok")],
        a=[text("first answer")],
        b=[calls(("x", "list_dir", '{"path": "."}')), calls(("y", "list_dir", '{"path": "t"}'))],
    )
    async with worker_for(client, task_queue, fake_with(script)):
        handle = await start_run(client, task_queue, run_input())
        result = await handle.result()
    assert tool_result(result.messages, "a")["data"]["answer"] == "first answer"
    failed = tool_result(result.messages, "b")
    assert failed["ok"] is False
    assert failed["error"].startswith(f"sub-agent {handle.id}.b ended with max_rounds")


async def test_a_parent_never_continues_as_new_while_a_child_runs(client, task_queue):
    # The parent's history passes its max_history_events while its sub-agent waits for a
    # person (harmless bad answers, each a warning and a few events): it stays the same run
    # until the sub-agent's result is in, then continues with that result in its record.
    script = ByRun(
        [calls(delegate("call_1", "Delete the logs folder")), text("Done.")],
        call_1=[calls(("c1", "delete_path", '{"path": "logs"}')), text("Deleted.")],
    )
    async with worker_for(client, task_queue, fake_with(script)):
        handle = await start_run(client, task_queue, run_input(max_history_events=100))
        child = await started(client.get_workflow_handle(f"{handle.id}.call_1"))
        await wait_for_phase(child, "awaiting_approval")
        described = await handle.describe()
        sent = 0
        while described.raw_description.workflow_execution_info.history_length <= 110:
            assert sent < 400, "the parent's history never passed max_history_events"
            await handle.signal(
                names.SIGNAL_TOOL_APPROVAL, {"call_id": f"no-{sent}", "approved": True}
            )
            sent += 1
            described = await handle.describe()
        await asyncio.sleep(1)  # time for a workflow task that would continue as new
        described = await client.get_workflow_handle(handle.id).describe()
        assert described.run_id == handle.first_execution_run_id, "continued while a child ran"
        await child.execute_update(
            names.UPDATE_SUBMIT_APPROVAL,
            ToolApprovalResponse(call_id="c1", approved=True, approver="ann"),
        )
        result = await client.get_workflow_handle(handle.id, result_type=AgentRunResult).result()
        latest = await client.get_workflow_handle(handle.id).describe()
    assert latest.run_id != handle.first_execution_run_id  # it continued once the child was done
    assert tool_result(result.messages, "call_1")["data"]["answer"] == "Deleted."


async def test_cancelling_the_parent_cancels_the_waiting_child(client, task_queue):
    script = ByRun(
        [calls(delegate("call_1", "Delete the logs folder"))],
        call_1=[calls(("c1", "delete_path", '{"path": "logs"}'))],
    )
    async with worker_for(client, task_queue, fake_with(script)):
        handle = await start_run(client, task_queue, run_input())
        child_id = f"{handle.id}.call_1"
        child = await started(client.get_workflow_handle(child_id, result_type=AgentRunResult))
        await wait_for_phase(child, "awaiting_approval")
        await handle.signal(names.SIGNAL_CANCEL, {"reason": "wrong folder"})
        result = await handle.result()
        child_result = await child.result()
    assert result.finish_reason == "cancelled" and child_result.finish_reason == "cancelled"
    assert child_result.error is not None and "wrong folder" in child_result.error
    assert (await child.describe()).status == WorkflowExecutionStatus.COMPLETED


async def test_depth_is_bounded(client, task_queue):
    script = ByRun(
        [calls(delegate("a", "go deeper")), text("top")],
        a=[calls(delegate("b", "deeper still")), text("middle")],
        b=[text("bottom")],
    )
    async with worker_for(client, task_queue, fake_with(script)):
        handle = await start_run(client, task_queue, run_input())
        await handle.result()
    assert DELEGATE in (script.seen["a"][0].tools or [])
    assert DELEGATE not in (script.seen["b"][0].tools or [])  # depth 2 = AGENT_MAX_DEPTH


async def test_a_run_cannot_claim_a_parent(client, task_queue):
    forged = run_input(parent=SubAgentOf(workflow_id="x", run_id="r", call_id="c"))
    async with worker_for(client, task_queue, fake_with(ByRun([text("hi")]))):
        handle = await start_run(client, task_queue, forged, f"x.c-{uuid.uuid4()}")
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        said = [e for e in await events(handle) if e.type == "error"]
    assert any("options.parent" in e.message for e in said)


async def test_a_forked_parents_sub_agent_is_no_fork(client, task_queue):
    """The provenance is the parent's: its sub-agent starts no `forked` event of its own."""
    script = ByRun([calls(delegate("call_1", "count")), text("done")], call_1=[text("3")])
    fork = ForkedFrom(workflow_id="original", run_id="first-run", round=0)
    async with worker_for(client, task_queue, fake_with(script)):
        handle = await start_run(client, task_queue, run_input(forked_from=fork))
        await handle.result()
        child = client.get_workflow_handle(f"{handle.id}.call_1")
        child_kinds = event_types(await events(child))
        child_status = await status(child)
        parent_kinds = event_types(await events(handle))
    assert parent_kinds[0] == "forked"
    assert "forked" not in child_kinds
    assert child_status.forked_from is None and child_status.parent is not None


async def test_a_grant_at_a_childs_budget_counts_for_the_tree(client, task_queue):
    """The parent never reached its own budget before its child was granted more: the grant
    still counts for it once the child ends, so the parent goes on without a grant of its own."""
    script = ByRun(
        [calls(delegate("call_1", "list")), text("Listed.")],
        call_1=[calls(("c1", "list_dir", '{"path": "."}')), text("It holds logs.")],
    )
    async with worker_for(client, task_queue, fake_with(script)):
        handle = await start_run(client, task_queue, run_input(max_run_tokens=1))
        child = await started(client.get_workflow_handle(f"{handle.id}.call_1"))
        await wait_for_phase(child, "budget_exhausted")
        await child.execute_update(names.UPDATE_GRANT_BUDGET, {"tokens": 100, "approver": "ann"})
        result = await asyncio.wait_for(handle.result(), 20)  # not at its own budget meanwhile
        budget = (await status(handle)).budget
    assert result.finish_reason == "stop"
    assert budget is not None and (budget.granted, budget.limit) == (100, 101)


@pytest.mark.parametrize(
    ("name", "sub_agents"), [("delegation", 2), ("sub_agent_approval", 1), ("sub_agent_cancel", 2)]
)
async def test_the_delegate_scenarios_to_record_run_and_replay(client, name, sub_agents):
    """The scenarios `python -m tests.record_histories` records for this release: the parent's
    history and each sub-agent's replay against today's workflow (nothing is written here)."""
    from temporalio.worker import Replayer

    from runtime.connect import data_converter
    from tests.record_histories import SCENARIOS, sub_agent_histories
    from workflows.run.agent import AgentWorkflow

    handle = await SCENARIOS[name](client, f"record-{name}-{uuid.uuid4()}")

    async def all_listed() -> list[Any] | None:
        found = await sub_agent_histories(client, handle.id)
        return found if len(found) == sub_agents else None

    children = await wait_until(all_listed)
    histories = [await handle.fetch_history(), *(history for _, history in children)]
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=data_converter())
    for history in histories:
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, (history.workflow_id, replayed.replay_failure)
    result = await client.get_workflow_handle(handle.id, result_type=AgentRunResult).result()
    expected = {"delegation": "stop", "sub_agent_approval": "stop", "sub_agent_cancel": "cancelled"}
    assert result.finish_reason == expected[name]


async def test_a_sub_agents_end_travels_in_its_result_not_a_signal(client, task_queue):
    """A sub-agent that never paused tells its parent nothing until its end, and its end is in
    its result (its decisions for the parent's audit): no signal, no workflow task to wait for
    one, in either history."""
    script = ByRun(
        [calls(delegate("call_1", "list")), text("Listed.")],
        call_1=[calls(("c1", "list_dir", '{"path": "."}')), text("It holds logs.")],
    )
    async with worker_for(client, task_queue, fake_with(script)):
        handle = await start_run(
            client,
            task_queue,
            run_input(approval_policy={"rules": [{"tool": "list_dir", "decision": "allow"}]}),
        )
        await handle.result()
        audit = await handle.query(names.QUERY_AUDIT)
    child = client.get_workflow_handle(f"{handle.id}.call_1", result_type=AgentRunResult)
    last = (await child.result()).sub_agent_report
    assert last is not None and last.phase == "finished" and last.call_id == "call_1"
    assert [e.call_id for e in last.audit] == ["c1"]
    parent_history = await handle.fetch_history()
    child_history = await child.fetch_history()
    signals = [
        e
        for e in parent_history.events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    sent = [
        e
        for e in child_history.events
        if e.HasField("signal_external_workflow_execution_initiated_event_attributes")
    ]
    assert signals == [] and sent == []
    assert any(
        e["call_id"] == "c1" and e.get("workflow_id") == child.id for e in audit["decisions"]
    )
