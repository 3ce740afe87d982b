"""`python -m starter approve` while every update slot of the run is taken: Temporal refuses the
answer (RESOURCE_EXHAUSTED) until a slot frees, and the command keeps trying instead of failing,
without printing the SDK's retry warnings."""

from __future__ import annotations

import asyncio
import contextlib

from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateStage
from temporalio.contrib.workflow_streams import PollInput, PollResult, WorkflowStreamClient

from tests import test_starter
from tests.test_starter import Agent, start_waiting

agent = test_starter.agent  # the fixture: a worker with the real activities, the scripted model

SLOTS = 10
"""Temporal's default limit of updates in flight per run."""
HELD_SECONDS = 18.0
"""Longer than the SDK's own retries of a refused update (about 15 s)."""
NOISE = ("WARN", "temporalio_client", "Traceback", "RESOURCE_EXHAUSTED")


async def test_approve_waits_for_a_free_update_slot(agent: Agent) -> None:
    workflow_id = await start_waiting(agent, "run: echo hi", "call_1")
    handle = agent.client.get_workflow_handle(workflow_id)
    offset = await handle.query("__temporal_workflow_stream_offset", result_type=int)
    held = []
    for _ in range(SLOTS):  # long polls on a topic nothing publishes to: each holds a slot
        with contextlib.suppress(WorkflowUpdateFailedError):  # a run that admits fewer
            held.append(
                await handle.start_update(
                    "__temporal_workflow_stream_poll",
                    PollInput(topics=["test-hold"], from_offset=offset),
                    wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                    result_type=PollResult,
                )
            )
    try:
        approve = asyncio.create_task(
            agent.cli("approve", workflow_id, "call_1", "--approver", "ann", timeout=90)
        )
        await asyncio.sleep(HELD_SECONDS)
        # Free the slots: the held polls answer once their topic has an item.
        publisher = WorkflowStreamClient.create(agent.client, workflow_id)
        publisher.topic("test-hold").publish("release")
        await publisher.flush()
        result = await approve
    finally:
        await asyncio.gather(*(h.result() for h in held), return_exceptions=True)
    assert result.code == 0, result
    assert "call_1 approved by ann" in result.stdout
    for noise in NOISE:
        assert noise not in result.stderr + result.stdout, result
    await agent.handle(workflow_id).result()
