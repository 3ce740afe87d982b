"""A run that ends says why, and reading it afterwards needs no worker: the real `starter` as a
subprocess against the session dev server, with an in-process production worker (the scripted
model) that the test stops once the runs have ended."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.client import Client

from runtime.settings import Settings
from starter.follow import follow
from starter.handle import AgentHandle
from starter.output import Output
from tests.cli.test_starter import Agent, Result, new_id, seed
from tests.helpers import wait_for_phase
from worker import run_worker
from workflows.model import ToolApprovalResponse

READ_SECONDS = 2.0
"""How long reading a closed run may take with no worker: the starter's own reading (its
handle's record, the follower) is timed in this process; the commands as subprocesses must
answer well before the 30 s a query waits for a worker (starting Python alone takes 1-2.5 s on a
loaded machine)."""
COMMAND_SECONDS = 10.0


@dataclass
class Stoppable:
    agent: Agent
    stop: asyncio.Event
    task: asyncio.Task[None]

    async def stop_worker(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 30)


@pytest.fixture
async def stoppable(client: Client, task_queue: str, tmp_path: Path) -> AsyncIterator[Stoppable]:
    workspace = seed(tmp_path / "workspace")
    settings = Settings.from_env(
        {"AGENT_WORKSPACE": str(workspace), "AGENT_STATE_DIR": str(tmp_path / "state")}
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        run_worker(client, settings, queue=task_queue, stop=stop, ready=lambda _q: ready.set())
    )
    await asyncio.wait_for(ready.wait(), 30)
    address = client.service_client.config.target_host
    try:
        yield Stoppable(Agent(client, address, task_queue, workspace), stop, task)
    finally:
        if not task.done():
            stop.set()
            await asyncio.wait_for(task, 30)


async def timed(agent: Agent, *args: str) -> tuple[Result, float]:
    """The command's result, and the seconds it took."""
    began = time.monotonic()
    result = await agent.cli(*args, timeout=40)
    return result, time.monotonic() - began


async def test_a_refused_run_says_why_everywhere(stoppable: Stoppable) -> None:
    """A typo in a run rule: `run` names the rule and the tool it meant, and the run's history
    says it finished with that error, with its worker running and after it stopped."""
    agent = stoppable.agent
    workflow_id = new_id()
    run = await agent.cli(
        "run", "--id", workflow_id, "--allow", "run_comand:command=ls*", "list", timeout=60
    )
    assert run.code != 0, run
    assert "without a finished event" not in run.stdout + run.stderr
    said = run.stdout.splitlines()
    assert any(
        "error: Invalid AgentRunInput: options.approval_policy: rule 0 (run):" in line
        and "did you mean 'run_command'?" in line
        for line in said
    ), run
    assert said[-1] == "finished: error", run

    live = json.loads((await agent.cli("history", workflow_id, "--json")).stdout)
    await stoppable.stop_worker()
    for data in (live, json.loads((await agent.cli("history", workflow_id, "--json")).stdout)):
        assert data["status"]["phase"] == "finished"
        assert data["status"]["finish_reason"] == "error"
        assert [e["type"] for e in data["events"]] == ["error", "finished"]
        assert "did you mean 'run_command'?" in data["events"][0]["message"]


async def test_reading_a_finished_run_needs_no_worker(stoppable: Stoppable) -> None:
    agent = stoppable.agent
    workflow_id = new_id()
    ran = await agent.cli("run", "--id", workflow_id, "read notes.txt", timeout=60)
    assert ran.code == 0, ran
    await stoppable.stop_worker()

    history, seconds = await timed(agent, "history", workflow_id)
    assert history.code == 0, history
    assert seconds < COMMAND_SECONDS, seconds
    assert history.stdout.splitlines()[0] == f"run {workflow_id}: finished, round 1"
    assert "finish reason: stop" in history.stdout
    assert "remember the milk" in history.stdout
    assert "finished: stop" in history.stdout

    data = json.loads((await agent.cli("history", workflow_id, "--json")).stdout)
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "tool", "assistant"]
    types = [e["type"] for e in data["events"]]
    assert types == ["tool_call", "tool_result", "text_delta", "finished"]

    audit, seconds = await timed(agent, "audit", workflow_id, "--json")
    assert audit.code == 0, audit
    assert seconds < COMMAND_SECONDS, seconds
    assert json.loads(audit.stdout)["decisions"] == []

    watched, seconds = await timed(agent, "watch", workflow_id)
    assert watched.code == 0, watched
    assert seconds < COMMAND_SECONDS, seconds
    assert "[r0] tool_call call_1 read_file" in watched.stdout
    assert watched.stdout.splitlines()[-1] == "finished: stop"

    began = time.monotonic()
    record = await AgentHandle(agent.client, workflow_id).record()
    followed = await follow(agent.client, workflow_id, Output())
    assert time.monotonic() - began < READ_SECONDS
    assert record is not None and record.status.finish_reason == "stop"
    assert followed.finish_reason == "stop"


async def test_a_finished_run_that_waited_for_a_person_reads_without_a_worker(
    stoppable: Stoppable,
) -> None:
    """Its past wait for approval asks nobody (nothing is pending any more), and its audit names
    the person who answered."""
    agent = stoppable.agent
    workflow_id = new_id()
    started = await agent.cli("run", "--no-follow", "--id", workflow_id, "delete logs")
    assert started.code == 0, started
    await wait_for_phase(agent.handle(workflow_id), "awaiting_approval")
    answer = ToolApprovalResponse(call_id="call_2", approved=True, approver="ann")
    await AgentHandle(agent.client, workflow_id).answer(answer)
    assert (await agent.handle(workflow_id).result()).finish_reason == "stop"
    await stoppable.stop_worker()

    watched, seconds = await timed(agent, "watch", workflow_id)
    assert watched.code == 0, watched
    assert seconds < COMMAND_SECONDS, seconds
    assert "[r1] approval call_2 approved by ann" in watched.stdout
    assert watched.stdout.splitlines()[-1] == "finished: stop"

    audit, seconds = await timed(agent, "audit", workflow_id, "--json")
    assert audit.code == 0, audit
    assert seconds < COMMAND_SECONDS, seconds
    [decision] = json.loads(audit.stdout)["decisions"]
    assert (decision["call_id"], decision["approver"]) == ("call_2", "ann")
