"""Bounded history: on a dev server that suggests continue-as-new after 150 events, one run
crosses several generations and behaves exactly as one run: same messages, event sequence
numbers that continue, signals and queries by workflow id across the boundary."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from runtime.connect import data_converter
from runtime.search_attributes import ensure_search_attributes
from tests.conftest import venv_binary
from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import events, messages, start_run, status, wait_for_phase, wait_until
from workflows.conversation.record import invariant_violations
from workflows.model import AgentRunInput, AgentRunOptions, LlmRequest, LlmResponse
from workflows.run.agent import AgentWorkflow

SUGGEST_AFTER = 150


@pytest.fixture(scope="module")
async def low_limit_client() -> AsyncIterator[Client]:
    environment = await WorkflowEnvironment.start_local(
        dev_server_existing_path=venv_binary("temporal"),
        data_converter=data_converter(),
        dev_server_extra_args=[
            "--dynamic-config-value",
            f"limit.historyCount.suggestContinueAsNew={SUGGEST_AFTER}",
            "--log-level",
            "error",
        ],
    )
    await ensure_search_attributes(environment.client)
    try:
        yield environment.client
    finally:
        await environment.shutdown()


async def generations(client: Client, workflow_id: str) -> int:
    return len([w async for w in client.list_workflows(f'WorkflowId="{workflow_id}"')])


def listing_round(request: LlmRequest) -> LlmResponse:
    if request.round < 39:
        return calls((f"c{request.round}", "list_dir", {"path": f"dir{request.round}"}))
    return calls(("approve_me", "run_command", '{"command": "echo hi"}'))


async def test_a_run_crosses_generations_and_stays_one_run(low_limit_client, task_queue):
    client = low_limit_client
    replies = [listing_round] * 40 + [text("all done")]
    fake = FakeAgentActivities(replies=replies)
    run_input = AgentRunInput.from_prompt("look around", AgentRunOptions(max_rounds=100))
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=fake.activities()
    ):
        handle = await start_run(client, task_queue, run_input)
        waiting = await wait_for_phase(handle, "awaiting_approval", timeout=120)
        assert [c.id for c in waiting.pending_approvals] == ["approve_me"]
        # Flood the wait with bad input: the history grows, the run continues as new while
        # waiting, and the answer sent to the workflow id still lands.
        for i in range(SUGGEST_AFTER // 2):
            await handle.signal("tool_approval", {"call_id": f"nope-{i}", "approved": True})
        await wait_until(lambda: generations(client, handle.id), timeout=60)
        before_answer = await generations(client, handle.id)
        await handle.signal("tool_approval", {"call_id": "approve_me", "approved": True})
        result = await handle.result()
        log = await events(handle)
        final_status = await status(handle)
        history = await messages(handle)
        total_generations = await generations(client, handle.id)

    assert result.finish_reason == "stop"
    assert total_generations >= 3, total_generations
    assert before_answer >= 2
    # Exactly the messages of one run: the prompt, 40 tool rounds, the final reply.
    assert len(result.messages) == 1 + 40 * 2 + 1
    assert invariant_violations(result.messages, allow_open_tail=False) == []
    assert [m.tool_call_id for m in result.messages if m.role == "tool"] == [
        *(f"c{i}" for i in range(39)),
        "approve_me",
    ]
    assert result.rounds == 40
    assert history == result.messages
    # Each tool ran exactly once although the run was split.
    assert len(fake.tools_run) == len(set(fake.tools_run)) == 40
    # Sequence numbers continue across generations without gaps in what is retained.
    seqs = [e.seq for e in log]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert log[-1].type == "finished"
    assert final_status.phase == "finished"
    # The retained tail still reaches back to the ignored answers, with their warnings.
    warnings = [e for e in log if e.type == "warning"]
    assert len(warnings) == SUGGEST_AFTER // 2
