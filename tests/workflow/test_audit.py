"""The audit in the workflow: every decision of a run in order (a rule's, a person's, an edit, the
timeout's) through the `audit` query, across continue-as-new, and the counts a finished run
leaves in its memo for the runs page."""

from __future__ import annotations

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import start_run, wait_for_phase, worker_for
from workflows import names
from workflows.model import AgentRunInput, AgentRunOptions, AuditView, ToolCall


async def test_every_decision_is_in_the_audit_in_order(client, task_queue):
    fake = FakeAgentActivities(
        replies=[
            calls(
                ("c1", "list_dir", '{"path": "."}'),
                ("c2", "run_command", '{"command": "ls"}'),
                ("c3", "delete_path", '{"path": "logs"}'),
            ),
            calls(("c4", "run_command", '{"command": "rm x"}')),
            text("done"),
        ]
    )
    rules = {
        "rules": [
            {"tool": "list_dir", "decision": "ask"},
            {"tool": "delete_path", "decision": "deny", "reason": "not today"},
        ]
    }
    options = AgentRunOptions(approval_policy=rules, max_history_events=100)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go", options))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal(names.SIGNAL_TOOL_APPROVAL, {"call_id": "c1", "approved": True})
        await handle.execute_update(
            names.UPDATE_SUBMIT_APPROVAL,
            {
                "call_id": "c2",
                "approved": True,
                "approver": "ann",
                "arguments": {"command": "ls -la"},
            },
            result_type=list[ToolCall],
        )
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal(
            names.SIGNAL_TOOL_APPROVAL,
            {"call_id": "c4", "approved": False, "approver": "bob", "reason": "no"},
        )
        await handle.result()
        audit = await handle.query(names.QUERY_AUDIT, result_type=AuditView)
        described = await handle.describe()
    rows = [(d.call_id, d.source, d.approved, d.approver, d.rule) for d in audit.decisions]
    assert rows == [
        ("c3", "policy", False, None, 1),
        ("c1", "person", True, None, None),
        ("c2", "person", True, "ann", None),
        ("c4", "person", False, "bob", None),
    ]
    edited = audit.decisions[2]
    assert edited.edited and edited.arguments == '{"command": "ls -la"}'
    assert (audit.counts.approved_by_person, audit.counts.rejected_by_person) == (2, 1)
    assert audit.counts.by_rule == 1 and audit.dropped == 0
    memo = await described.memo_value("agent")
    assert memo["decisions"]["approved_by_person"] == 2 and memo["finish_reason"] == "stop"
    assert memo["tokens"]["prompt_tokens"] == audit.usage.prompt_tokens > 0
    assert memo["run_id"] == described.run_id  # the run that wrote it: a client cannot forge it


async def test_the_audit_spans_the_whole_chain_of_continue_as_new(client, task_queue):
    replies = [calls((f"c{i}", "run_command", f'{{"command": "echo {i}"}}')) for i in range(4)]
    fake = FakeAgentActivities(replies=[*replies, text("done")])
    options = AgentRunOptions(max_history_events=100, max_rounds=10)
    async with worker_for(client, task_queue, fake):
        started = await start_run(client, task_queue, AgentRunInput.from_prompt("go", options))
        handle = client.get_workflow_handle(started.id)  # the latest run of the chain
        for i in range(4):
            await wait_for_phase(handle, "awaiting_approval")
            await handle.execute_update(
                names.UPDATE_SUBMIT_APPROVAL,
                {"call_id": f"c{i}", "approved": True, "approver": f"p{i}"},
                result_type=list[ToolCall],
            )
            if i < 3:  # enough history for the next generation: signals the run ignores
                for _ in range(20):
                    await handle.signal("nonsense", {})
        await handle.result()
        audit = await handle.query(names.QUERY_AUDIT, result_type=AuditView)
        runs = [w.run_id async for w in client.list_workflows(f'WorkflowId="{handle.id}"')]
    assert len(runs) > 1, "the run never continued as new"
    assert [d.approver for d in audit.decisions] == ["p0", "p1", "p2", "p3"]
