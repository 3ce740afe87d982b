"""A run started as a fork (`options.forked_from`) says so: its `status` carries the provenance
and its first event is `forked` with it; a run without the option has neither, and the option
travels across continue-as-new."""

from __future__ import annotations

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import events, start_run, status, wait_for_phase, worker_for
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage, ForkedFrom

PROVENANCE = ForkedFrom(workflow_id="original", run_id="first-run-id", round=2)


async def test_a_fork_says_where_it_comes_from(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("call_9", "delete_path", '{"path": "logs"}')), text("done")],
        client=client,
    )
    run_input = AgentRunInput(
        messages=[ChatMessage.user("delete logs")],
        options=AgentRunOptions(forked_from=PROVENANCE),
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input)
        waiting = await wait_for_phase(handle, "awaiting_approval")
        first = (await events(handle))[0]
        plain = await start_run(client, task_queue, AgentRunInput.from_prompt("hello"))
        await plain.result()
        plain_events = await events(plain)
        plain_status = await status(plain)
    assert waiting.forked_from == PROVENANCE
    assert first.type == "forked" and first.seq == 0
    assert first.forked_from == PROVENANCE
    assert first.model_dump(mode="json")["forked_from"] == {
        "workflow_id": "original",
        "run_id": "first-run-id",
        "round": 2,
    }
    assert plain_status.forked_from is None
    assert "forked_from" not in plain_status.model_dump(mode="json")
    assert all(e.type != "forked" for e in plain_events)


async def test_the_provenance_stays_across_continue_as_new(client, task_queue):
    replies = [calls((f"call_{i}", "list_dir", f'{{"path": "d{i}"}}')) for i in range(12)]
    fake = FakeAgentActivities(replies=[*replies, text("done")], client=client)
    run_input = AgentRunInput(
        messages=[ChatMessage.user("list")],
        options=AgentRunOptions(forked_from=PROVENANCE, max_rounds=20, max_history_events=100),
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input)
        result = await handle.result()
        final = await status(handle)
        evs = await events(handle)
    assert result.finish_reason == "stop"
    latest = await client.get_workflow_handle(handle.id).describe()
    assert handle.first_execution_run_id != latest.run_id
    assert final.forked_from == PROVENANCE
    assert [e.type for e in evs].count("forked") == 1
