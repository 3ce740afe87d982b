"""`python -m starter approve` and `watch` while every update slot of the run is taken: Temporal
refuses the answer (RESOURCE_EXHAUSTED) until a slot frees, and the command keeps trying instead
of failing; the follower, refused its long poll, follows through the stream's poll query. Neither
prints the SDK's retry warnings."""

from __future__ import annotations

import asyncio
import contextlib
import sys

from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateStage
from temporalio.contrib.workflow_streams import PollInput, PollResult, WorkflowStreamClient
from temporalio.service import RPCError

from tests.cli import test_starter
from tests.cli.test_starter import REPO, Agent, start_waiting

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
    watcher = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "starter",
        "watch",
        workflow_id,
        cwd=REPO,
        env=agent.env(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert watcher.stdout is not None and watcher.stderr is not None
    try:
        started = asyncio.get_running_loop().time()
        # While no slot is free, the follower reads the run through the poll query: it shows
        # the call waiting before anyone answers it.
        seen = b""
        async with asyncio.timeout(HELD_SECONDS - 2):
            while b"needs approval: call_1" not in seen:
                line = await watcher.stdout.readline()
                assert line, f"watch ended early: {seen.decode()!r}"
                seen += line
        approve = asyncio.create_task(
            agent.cli("approve", workflow_id, "call_1", "--approver", "ann", "--yes", timeout=90)
        )
        held_for = HELD_SECONDS - (asyncio.get_running_loop().time() - started)
        await asyncio.wait({approve}, timeout=held_for)  # (a run that admits fewer long polls
        # has free slots: the answer goes through at once and the run ends)
        # Free the slots: the held polls answer once their topic has an item.
        publisher = WorkflowStreamClient.create(agent.client, workflow_id)
        publisher.topic("test-hold").publish("release")
        with contextlib.suppress(RPCError):  # the run has already ended
            await publisher.flush()
        result = await approve
        rest, errors = await asyncio.wait_for(watcher.communicate(), 60)
    finally:
        if watcher.returncode is None:
            watcher.kill()
        await asyncio.gather(*(h.result() for h in held), return_exceptions=True)
    assert result.code == 0, result
    assert "call_1 approved by ann" in result.stdout
    for noise in NOISE:
        assert noise not in result.stderr + result.stdout, result
    await agent.handle(workflow_id).result()

    output, stderr = (seen + rest).decode(), errors.decode()
    assert watcher.returncode == 0, (output, stderr)
    lines = output.splitlines()
    assert '  needs approval: call_1 run_command {"command": "echo hi"}' in lines, lines
    assert lines[-1] == "finished: stop", lines
    assert any(line.startswith("[r0] tool_result call_1 run_command") for line in lines), lines
    for noise in NOISE:
        assert noise not in output + stderr, (output, stderr)
