"""Fork and what-if on a run that continued as new (fake activities on the dev server): the record
is the whole chain's, the options and rules are those the first generation was started with
(not the hand-over's, which carries the rules once, remembered ones included), and every call of
every generation is decided again."""

from __future__ import annotations

from temporalio.client import Client

from starter.fork import fork_run
from starter.run_state import read_run
from starter.what_if import ProposedPolicy
from starter.what_if_runs import what_if
from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import start_run, wait_for_phase, worker_for
from workflows.contract.rules import ApprovalPolicy, PolicyRule
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage, ToolApprovalResponse

ROUNDS = 12


async def test_a_continued_run_is_read_whole(client: Client, task_queue: str) -> None:
    replies = [calls((f"call_{i}", "list_dir", f'{{"path": "d{i}"}}')) for i in range(ROUNDS)]
    delete = calls(("call_x", "delete_path", '{"path": "logs"}'))
    fake = FakeAgentActivities(
        replies=[*replies, delete, text("done"), delete],  # the last for the fork's first call
        client=client,
    )
    own = ApprovalPolicy(rules=[PolicyRule(tool="list_dir", decision="allow")])
    options = AgentRunOptions(max_rounds=30, max_history_events=100, approval_policy=own)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(
            client, task_queue, AgentRunInput(messages=[ChatMessage.user("go")], options=options)
        )
        await wait_for_phase(handle, "awaiting_approval", timeout=60)
        await handle.signal(
            "tool_approval",
            ToolApprovalResponse(call_id="call_x", approved=True, approver="ann", remember=True),
        )
        await handle.result()
        latest = await client.get_workflow_handle(handle.id).describe()
        assert latest.run_id != handle.first_execution_run_id  # it did continue as new

        original = await read_run(client, handle.id, whole=True)  # replayed, not from the result
        assert original.first_run_id == handle.first_execution_run_id
        assert original.first_options.approval_policy == own
        assert original.state is not None
        assert len([m for m in original.messages if m.role == "assistant"]) == ROUNDS + 2

        report = await what_if(
            client,
            ProposedPolicy(enforced=[PolicyRule(tool="delete_path", decision="deny")]),
            [handle.id],
        )
        [run] = report.runs
        assert [d.then.text for d in run.calls] == [
            *(["allowed by rule 0"] * ROUNDS),
            "approved by ann",
        ]
        assert report.summary() == (
            f"{ROUNDS + 1} calls: 1 would be denied (approved by a person then), {ROUNDS} unchanged"
        )

        forked = await fork_run(client, handle.id, task_queue=task_queue, round=ROUNDS - 1)
        fork = client.get_workflow_handle(forked.workflow_id)
        waiting = await wait_for_phase(fork, "awaiting_approval", timeout=60)
        assert [c.name for c in waiting.pending_approvals] == ["delete_path"]  # asked again
        rules = (await fork.query("policy")) or {}
        assert [(r["tool"], r["origin"]) for r in rules["rules"]] == [("list_dir", "run")]
        await fork.terminate("test over")
