"""AgentActivities as Temporal runs them: in ActivityEnvironment (heartbeats, cancellation), and
in a real worker with the real AgentWorkflow (the scripted story; an immediate cancel that aborts
the HTTP request)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any, cast

import pytest
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.tools import build_default_registry
from runtime.settings import Settings
from tests.fake_openai import FakeOpenAI, Slow
from tests.helpers import event_types, events, start_run, wait_for_phase, wait_until
from worker import heartbeat_tuning
from workflows.conversation.record import invariant_violations
from workflows.model import AgentRunInput, ToolRequest
from workflows.run.agent import AgentWorkflow


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "logs").mkdir(parents=True)
    (ws / "logs" / "app.log").write_text("line\n")
    (ws / "notes.txt").write_text("remember the milk\n")
    return ws


def settings(workspace: Path, base_url: str | None = None) -> Settings:
    return Settings(
        llm_base_url=base_url,
        llm_api_key="sk-unused" if base_url else None,
        llm_model="fake-model",
        workspace=workspace,
        state_dir=workspace.parent / "state",
    )


def pids_running(*argv: str) -> list[int]:
    """Host pids of live processes running exactly `argv` (a sandboxed command's own `$!` is a
    pid in its PID namespace, so the test finds the child from outside)."""
    wanted = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if cmdline == wanted and process_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def process_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def test_worker_setup_and_all(workspace):
    acts = AgentActivities(
        cast(Client, None), settings(workspace), build_default_registry(workspace)
    )
    env = ActivityEnvironment()
    assert [f.__name__ for f in acts.all()] == [
        "worker_setup",
        "call_llm",
        "summarize_conversation",
        "execute_tool",
        "notify",
    ]
    setup = await env.run(acts.worker_setup)
    assert [s.name for s in setup.tools] == ["list_dir", "read_file", "run_command", "delete_path"]
    assert (setup.context_tokens, setup.conversation_bytes) == (128_000, 1_400_000)
    assert setup.notify is False  # no AGENT_NOTIFY_URL


async def test_execute_tool_heartbeats_and_cancellation_kills_the_command(workspace):
    acts = AgentActivities(
        cast(Client, None), settings(workspace), build_default_registry(workspace)
    )
    env = ActivityEnvironment()
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    marker = f"30.{uuid.uuid4().int % 10**9}"  # a unique `sleep` to find from outside
    request = ToolRequest(
        workflow_id="wf",
        call_id="call_1",
        name="run_command",
        arguments={"command": f"sleep {marker} & echo started > child.pid; wait"},
    )
    task = asyncio.create_task(env.run(acts.execute_tool, request))
    pid_file = workspace / "child.pid"
    await wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=10)
    [child] = await wait_until(lambda: pids_running("sleep", marker), timeout=5)
    assert process_alive(child)
    # A long command heartbeats (the first beat after one interval), so a cancel can reach it.
    await wait_until(lambda: beats, timeout=5)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: not process_alive(child), timeout=5)
    # An interrupted call that is not safe to retry is never run again.
    again = json.loads(await ActivityEnvironment().run(acts.execute_tool, request))
    assert again["ok"] is False and "interrupted" in again["error"]


async def test_the_scripted_story_through_a_real_worker(client, task_queue, workspace):
    acts = AgentActivities(client, settings(workspace), build_default_registry(workspace))
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=acts.all()
    ):
        # Approve: the folder goes.
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("delete logs"))
        status = await wait_for_phase(handle, "awaiting_approval")
        [pending] = status.pending_approvals
        assert (pending.id, pending.name, json.loads(pending.arguments)) == (
            "call_2",
            "delete_path",
            {"path": "logs"},
        )
        await handle.signal("tool_approval", {"call_id": "call_2", "approved": True})
        result = await handle.result()
        assert result.finish_reason == "stop"
        assert result.messages[-1].content.startswith("Deleted logs.")
        assert not (workspace / "logs").exists()
        assert invariant_violations(result.messages, allow_open_tail=False) == []

        # Reject: nothing runs, the model hears the reason.
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("delete notes.txt"))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal(
            "tool_approval",
            {"call_id": "call_2", "approved": False, "reason": "need to check contents first."},
        )
        result = await handle.result()
        assert result.finish_reason == "stop"
        assert result.messages[-1].content == (
            "Understood — I did not delete notes.txt. Your reason: need to check contents first."
        )
        assert (workspace / "notes.txt").exists()
        assert event_types(await events(handle))[-3:] == ["tool_result", "text_delta", "finished"]


async def test_an_immediate_cancel_aborts_the_http_request(client, task_queue, workspace):
    with FakeOpenAI() as fake:
        fake.enqueue(Slow(chunks=400, delay=0.05))
        acts = AgentActivities(
            client, settings(workspace, fake.base_url), build_default_registry(workspace)
        )
        try:
            async with Worker(
                client,
                task_queue=task_queue,
                workflows=[AgentWorkflow],
                activities=acts.all(),
                **heartbeat_tuning(),
            ):
                handle = await start_run(
                    client, task_queue, AgentRunInput.from_prompt("hi"), f"cancel-{uuid.uuid4()}"
                )
                await wait_until(lambda: fake.count("slow_chunks_sent") >= 2, timeout=20)
                await handle.signal("cancel", {"reason": "stop now", "immediate": True})
                result = await asyncio.wait_for(handle.result(), 20)
                assert result.finish_reason == "cancelled"
                await wait_until(lambda: fake.disconnects >= 1, timeout=10)
                assert fake.count("slow_chunks_sent") < 400
        finally:
            await acts.aclose()
