"""The starter command line against the session dev server, with an in-process worker (the real
activities, the scripted model, a temporary workspace) on a fresh task queue.

Every command runs as a real `python -m starter …` subprocess (asyncio subprocess, so the
in-process worker keeps running meanwhile) with TEMPORAL_ADDRESS and AGENT_TASK_QUEUE in its
environment.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from runtime.settings import Settings
from starter.handle import AgentHandle
from tests.helpers import events, status, wait_for_phase, wait_until
from worker import run_worker
from workflows.contract.arguments import arguments_digest
from workflows.model import AgentRunResult, ToolApprovalResponse

REPO = Path(__file__).resolve().parents[2]
SEED_FILES = {
    "logs/app.log": "INFO started\n",
    "logs/old.log": "INFO old\n",
    "notes.txt": "remember the milk\n",
    "tmp/cache.bin": "cache",
}


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


@dataclass
class Agent:
    client: Client
    address: str
    queue: str
    workspace: Path

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_"))
            or k.startswith("AGENT_ENCRYPTION_")
        }  # the session's key (pytest --encrypt) goes to the starter like to the worker
        env.update(TEMPORAL_ADDRESS=self.address, AGENT_TASK_QUEUE=self.queue)
        env.update(extra)
        return env

    async def cli(self, *args: str, timeout: float = 60.0, **env: str) -> Result:
        return await starter(*args, env=self.env(**env), timeout=timeout)

    def handle(self, workflow_id: str) -> WorkflowHandle[Any, AgentRunResult]:
        return self.client.get_workflow_handle(workflow_id, result_type=AgentRunResult)


async def starter(*args: str, env: dict[str, str], timeout: float = 60.0) -> Result:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "starter",
        *args,
        cwd=REPO,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


def seed(workspace: Path) -> Path:
    for relative, content in SEED_FILES.items():
        path = workspace / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return workspace


@pytest.fixture
async def agent(client: Client, task_queue: str, tmp_path: Path) -> AsyncIterator[Agent]:
    workspace = seed(tmp_path / "workspace")
    settings = Settings.from_env(
        {"AGENT_WORKSPACE": str(workspace), "AGENT_STATE_DIR": str(tmp_path / "state")}
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        run_worker(client, settings, queue=task_queue, stop=stop, ready=lambda _q: ready.set())
    )
    await asyncio.wait_for(ready.wait(), 30)
    try:
        yield Agent(client, client.service_client.config.target_host, task_queue, workspace)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def new_id() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


async def start_waiting(agent: Agent, prompt: str, call_id: str) -> str:
    """`run --no-follow`, then wait until the run waits for `call_id`."""
    workflow_id = new_id()
    result = await agent.cli("run", "--no-follow", "--id", workflow_id, prompt)
    assert result.code == 0, result
    assert f"started {workflow_id} on task queue {agent.queue}" in result.stdout
    st = await wait_for_phase(agent.handle(workflow_id), "awaiting_approval")
    assert [c.id for c in st.pending_approvals] == [call_id]
    return workflow_id


async def test_approve_then_watch(agent: Agent) -> None:
    workflow_id = await start_waiting(agent, "Please delete the logs folder", "call_2")
    result = await agent.cli("approve", workflow_id, "call_2", "--approver", "ann", "--yes")
    assert result.code == 0, result
    assert "call_2 approved by ann; still pending: none" in result.stdout

    watched = await agent.cli("watch", workflow_id)
    assert watched.code == 0, watched
    lines = watched.stdout.splitlines()
    assert '[r0] tool_call call_1 list_dir {"path": "."}' in lines
    assert '[r1] tool_call call_2 delete_path {"path": "logs"} (needs approval)' in lines
    assert "[r1] approval call_2 approved by ann" in lines
    assert any(line.startswith("assistant: Deleted logs.") for line in lines)
    assert lines[-1] == "finished: stop"
    assert not (agent.workspace / "logs").exists()


async def test_reject_with_reason(agent: Agent) -> None:
    workflow_id = await start_waiting(agent, "run: rm -rf tmp", "call_1")
    result = await agent.cli(
        "reject", workflow_id, "call_1", "--reason", "check what is in tmp first", "--yes"
    )
    assert result.code == 0, result
    assert "call_1 rejected (check what is in tmp first)" in result.stdout

    watched = await agent.cli("watch", workflow_id)
    assert watched.code == 0, watched
    assert "tool_result call_1 run_command: Rejected: check what is in tmp first" in watched.stdout
    reply = [line for line in watched.stdout.splitlines() if line.startswith("assistant: ")]
    assert reply and "check what is in tmp first" in reply[-1]
    assert (agent.workspace / "tmp" / "cache.bin").exists()


async def test_cancel_while_waiting(agent: Agent) -> None:
    workflow_id = await start_waiting(agent, "Please delete notes.txt", "call_2")
    result = await agent.cli(
        "cancel", workflow_id, "--reason", "changed my mind", USER="ann", LOGNAME="ann"
    )
    assert result.code == 0, result
    assert f"cancel requested for {workflow_id}" in result.stdout

    watched = await agent.cli("watch", workflow_id)
    assert watched.code == 3, watched  # followed a run that ended cancelled
    assert watched.stdout.splitlines()[-2:] == [
        "[r1] error: Agent run cancelled by ann: changed my mind",
        "finished: cancelled",
    ]
    assert (agent.workspace / "notes.txt").exists()

    again = await agent.cli("cancel", workflow_id)
    assert again.code == 1
    assert f"run '{workflow_id}' has already finished" in again.stderr


async def test_run_follows_and_prints_how_to_answer(agent: Agent) -> None:
    """Not a TTY: `run` prints how to answer, keeps following, and ends with the run."""
    workflow_id = new_id()
    follower = asyncio.create_task(
        agent.cli("run", "--id", workflow_id, "Please delete the logs folder")
    )
    handle = agent.handle(workflow_id)
    await wait_until(lambda: _exists(agent, workflow_id))
    await wait_for_phase(handle, "awaiting_approval")
    await asyncio.sleep(1.5)  # let the follower see the awaiting_approval event
    answer = await agent.cli("approve", workflow_id, "call_2", "--approver", "bob", "--yes")
    assert answer.code == 0, answer
    result = await asyncio.wait_for(follower, 60)
    assert result.code == 0, result
    assert f"python -m starter approve {workflow_id} call_2" in result.stdout
    assert "[r1] approval call_2 approved by bob" in result.stdout
    assert result.stdout.splitlines()[-1] == "finished: stop"


async def _exists(agent: Agent, workflow_id: str) -> bool:
    try:
        await agent.handle(workflow_id).describe()
    except Exception:
        return False
    return True


async def test_run_without_approvals_and_json(agent: Agent) -> None:
    workflow_id = new_id()
    result = await agent.cli("--json", "run", "--id", workflow_id, "read notes.txt")
    assert result.code == 0, result
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert objects[0]["workflow_id"] == workflow_id
    assert objects[0]["task_queue"] == agent.queue
    evts = objects[1:]
    assert [e["seq"] for e in evts] == list(range(len(evts)))
    assert [e["type"] for e in evts] == ["tool_call", "tool_result", "text_delta", "finished"]
    assert "remember the milk" in evts[2]["delta"]
    assert evts[-1]["finish_reason"] == "stop"

    history = await agent.cli("history", workflow_id, "--json")
    assert history.code == 0, history
    data = json.loads(history.stdout)
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert data["status"]["phase"] == "finished"
    assert len(data["events"]) == 4


async def test_run_options_reach_the_workflow(agent: Agent) -> None:
    workflow_id = new_id()
    result = await agent.cli(
        "run",
        "--no-follow",
        "--id",
        workflow_id,
        "--max-rounds",
        "5",
        "--approval-timeout",
        "3600",
        "--on-approval-timeout",
        "reject",
        "--tools",
        "list_dir,read_file",
        "--approval-required",
        "read_file",
        "read notes.txt",
    )
    assert result.code == 0, result
    # read_file needs approval in this run only
    st = await wait_for_phase(agent.handle(workflow_id), "awaiting_approval")
    assert [c.name for c in st.pending_approvals] == ["read_file"]
    await agent.cli("cancel", workflow_id, "--immediate")
    await agent.handle(workflow_id).result()


async def test_say_and_history_in_a_session(agent: Agent) -> None:
    workflow_id = new_id()
    result = await agent.cli("run", "--no-follow", "--keep-alive", "--id", workflow_id, "list")
    assert result.code == 0, result
    handle = agent.handle(workflow_id)
    await wait_for_phase(handle, "waiting_for_message")
    said = await agent.cli("say", workflow_id, "read notes.txt")
    assert said.code == 0, said
    assert f"message sent to {workflow_id}" in said.stdout

    async def answered() -> bool:
        evts = await events(handle)
        st = await status(handle)
        return st.phase == "waiting_for_message" and sum(e.type == "text_delta" for e in evts) == 2

    await wait_until(answered)
    history = await agent.cli("history", workflow_id)
    assert history.code == 0, history
    assert f"run {workflow_id}: waiting_for_message" in history.stdout
    assert "  user: list" in history.stdout
    assert "  user: read notes.txt" in history.stdout
    assert "tool call_2 (read_file):" in history.stdout
    assert "events (" in history.stdout
    await agent.cli("cancel", workflow_id)
    assert (await handle.result()).finish_reason == "cancelled"


async def test_pending_lists_waiting_runs(agent: Agent) -> None:
    workflow_id = await start_waiting(agent, "Please delete the logs folder", "call_2")

    async def listed() -> Result | None:
        result = await agent.cli("pending")
        return result if workflow_id in result.stdout else None

    result = await wait_until(listed, timeout=30, interval=0.5)
    assert result.code == 0
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(workflow_id))
    assert "waiting" in lines[at]
    assert lines[at + 1].strip() == 'call_2 delete_path {"path": "logs"}'

    as_json = await agent.cli("pending", "--json")
    assert as_json.code == 0
    runs = [json.loads(line) for line in as_json.stdout.splitlines()]
    mine = next(r for r in runs if r["workflow_id"] == workflow_id)
    assert mine["pending"] == [
        {"id": "call_2", "name": "delete_path", "arguments": '{"path": "logs"}'}
    ]
    assert mine["awaiting_since"]
    await agent.cli("cancel", workflow_id)


async def test_unknown_workflow_id(agent: Agent) -> None:
    for args in (
        ("approve", "no-such-run", "call_1", "--yes"),
        ("cancel", "no-such-run"),
        ("watch", "no-such-run"),
        ("history", "no-such-run"),
        ("say", "no-such-run", "hi"),
    ):
        result = await agent.cli(*args)
        assert result.code == 1, (args, result)
        assert "error: no workflow with id 'no-such-run' in namespace 'default'" in result.stderr
        assert "Traceback" not in result.stderr


async def test_update_rejected_shows_the_workflows_reason(agent: Agent) -> None:
    workflow_id = await start_waiting(agent, "Please delete the logs folder", "call_2")
    result = await agent.cli("approve", workflow_id, "call_7", "--yes")
    assert result.code == 1
    assert "the workflow rejected the answer: unknown call id 'call_7' (waiting: call_2)" in (
        result.stderr
    )
    ok = await agent.cli("reject", workflow_id, "call_2", "--reason", "no", "--yes")
    assert ok.code == 0, ok
    await agent.handle(workflow_id).result()

    late = await agent.cli("approve", workflow_id, "call_2", "--yes")
    assert late.code == 1
    assert f"run '{workflow_id}' has already finished (stop); cannot approve" in late.stderr


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_no_server() -> None:
    port = _closed_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    env["TEMPORAL_ADDRESS"] = f"127.0.0.1:{port}"
    result = await starter("approve", "w", "call_1", "--yes", env=env)
    assert result.code == 1
    assert result.stderr.startswith(f"error: cannot reach Temporal at 127.0.0.1:{port}")
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


async def test_usage_errors() -> None:
    result = await starter("reject", "w", "call_1", env=dict(os.environ))  # --reason missing
    assert result.code == 2
    assert "--reason" in result.stderr


async def test_interactive_run_at_a_terminal(agent: Agent) -> None:
    """stdin is a TTY: `run` asks about the pending call; a rejection with a reason goes through
    the update and reaches the model."""
    import pty

    controller, terminal = pty.openpty()
    workflow_id = new_id()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "starter",
        "run",
        "--id",
        workflow_id,
        "Please delete the logs folder",
        cwd=REPO,
        env=agent.env(USER="carol", LOGNAME="carol"),
        stdin=terminal,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    os.close(terminal)
    assert proc.stdout is not None
    seen = ""

    async def read_until(text: str) -> None:
        nonlocal seen
        assert proc.stdout is not None
        while text not in seen:
            chunk = await asyncio.wait_for(proc.stdout.read(256), 30)
            assert chunk, seen
            seen += chunk.decode()

    try:
        await read_until(
            'approve call_2 delete_path {"path": "logs"}? [y]es'
            " / [a]lways allow delete_path in this run / [n]o / [s]kip: "
        )
        os.write(controller, b"n\n")
        await read_until("reason (empty: User denied): ")
        os.write(controller, b"keep the logs\n")
        await read_until("finished: stop")
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        os.close(controller)
    assert "[r1] approval call_2 rejected by carol: keep the logs" in seen
    assert "Your reason: keep the logs" in seen
    assert (agent.workspace / "logs").exists()


async def answers_sent(agent: Agent, workflow_id: str) -> list[dict[str, Any]]:
    """The `submit_approval` payloads the run accepted, as its history holds them."""
    history = await agent.handle(workflow_id).fetch_history()
    sent: list[dict[str, Any]] = []
    for event in history.events:
        if event.HasField("workflow_execution_update_accepted_event_attributes"):
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name == "submit_approval":
                sent += await agent.client.data_converter.decode(request.input.args.payloads)
    return sent


async def test_approve_names_the_run_and_the_arguments_it_answers(agent: Agent) -> None:
    workflow_id = await start_waiting(agent, "Please delete the logs folder", "call_2")
    result = await agent.cli("approve", workflow_id, "call_2", "--approver", "ann", "--yes")
    assert result.code == 0, result
    assert 'approve call_2 delete_path {"path": "logs"}' in result.stdout  # what it answered
    [sent] = await answers_sent(agent, workflow_id)
    description = await agent.handle(workflow_id).describe()
    assert sent["run_id"] == description.raw_description.workflow_execution_info.first_run_id
    assert sent["arguments_sha256"] == arguments_digest({"path": "logs"})
    assert (await agent.handle(workflow_id).result()).finish_reason == "stop"


async def test_the_prompt_at_a_terminal_answers_the_call_it_showed(agent: Agent) -> None:
    """The answer given at the interactive prompt carries the run it was shown from and the
    digest of the arguments it showed."""
    import pty

    controller, terminal = pty.openpty()
    workflow_id = new_id()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "starter", "run", "--id", workflow_id, "run: echo shown",
        cwd=REPO, env=agent.env(USER="dora", LOGNAME="dora"), stdin=terminal,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    os.close(terminal)
    seen = ""
    try:
        assert proc.stdout is not None
        while "[n]o / [s]kip: " not in seen:
            chunk = await asyncio.wait_for(proc.stdout.read(256), 30)
            assert chunk, seen
            seen += chunk.decode()
        assert 'approve call_1 run_command {"command": "echo shown"}?' in seen
        os.write(controller, b"y\n")
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        os.close(controller)
    [sent] = await answers_sent(agent, workflow_id)
    description = await agent.handle(workflow_id).describe()
    first_run = description.raw_description.workflow_execution_info.first_run_id
    assert (sent["approver"], sent["run_id"]) == ("dora", first_run)
    assert sent["arguments_sha256"] == arguments_digest('{"command": "echo shown"}')


async def pending_pin(agent: Agent, workflow_id: str) -> tuple[str, list[str]]:
    """What `starter pending` shows of a waiting run: the call line, and the pin it prints
    (`--run-id R --sha256 D`) as command-line arguments."""

    async def listed() -> Result | None:
        result = await agent.cli("pending")
        return result if f"{workflow_id} (round" in result.stdout else None  # with details

    result = await wait_until(listed, timeout=30, interval=0.5)
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(workflow_id))
    shown, pin = lines[at + 1].strip(), lines[at + 2].split()
    # The starter as it runs from where it was started (`.venv/bin/python -m starter` here).
    assert pin[0].endswith("python") and pin[1:4] == ["-m", "starter", "approve|reject"], pin
    assert pin[4:6] == [workflow_id, "call_1"], pin
    return shown, pin[6:]


async def test_an_answer_pinned_to_what_was_read_is_refused_for_a_replaced_run(
    agent: Agent,
) -> None:
    """A person reads `ls -la` in `pending`; the run behind the id is replaced by one whose
    call_1 is `rm -rf important`: the answer with the printed pin does not approve it."""
    (agent.workspace / "important").mkdir()
    workflow_id = new_id()
    started = await agent.cli("run", "--no-follow", "--id", workflow_id, "run: ls -la")
    assert started.code == 0, started
    await wait_for_phase(agent.handle(workflow_id), "awaiting_approval")
    shown, pin = await pending_pin(agent, workflow_id)
    assert shown == 'call_1 run_command {"command": "ls -la"}'
    assert pin[0] == "--run-id" and pin[2] == "--sha256", pin
    assert pin[3] == arguments_digest('{"command": "ls -la"}')

    await agent.handle(workflow_id).terminate("replaced")
    again = await agent.cli("run", "--no-follow", "--id", workflow_id, "run: rm -rf important")
    assert again.code == 0, again
    st = await wait_for_phase(agent.handle(workflow_id), "awaiting_approval")
    assert [c.id for c in st.pending_approvals] == ["call_1"]

    result = await agent.cli("approve", workflow_id, "call_1", *pin)
    assert result.code == 1, result
    assert f"run '{workflow_id}' is not run {pin[1]} any more" in result.stderr
    assert "not answered" in result.stderr
    assert (await status(agent.handle(workflow_id))).phase == "awaiting_approval"
    assert await answers_sent(agent, workflow_id) == []
    assert (agent.workspace / "important").exists()


async def test_an_answer_for_the_old_run_is_refused_by_temporal_too(agent: Agent) -> None:
    """Past the command line's own check (a run replaced between its check and its send):
    the answer goes to the run chain it names, and Temporal refuses it for another."""
    workflow_id = new_id()
    await agent.cli("run", "--no-follow", "--id", workflow_id, "run: ls -la")
    first = await wait_for_phase(agent.handle(workflow_id), "awaiting_approval")
    await agent.handle(workflow_id).terminate("replaced")
    await agent.cli("run", "--no-follow", "--id", workflow_id, "run: rm -rf important")
    await wait_for_phase(agent.handle(workflow_id), "awaiting_approval")
    old = AgentHandle(agent.client, workflow_id, first_execution_run_id=first.run_id)
    answer = ToolApprovalResponse(call_id="call_1", approved=True)
    with pytest.raises(RPCError) as refused:
        await old.answer(answer, patience=5)
    assert refused.value.status == RPCStatusCode.NOT_FOUND
    assert await answers_sent(agent, workflow_id) == []


async def test_an_unpinned_answer_without_a_terminal_is_refused(agent: Agent) -> None:
    workflow_id = await start_waiting(agent, "run: ls -la", "call_1")
    for action in (["approve"], ["reject", "--reason", "no"]):
        result = await agent.cli(action[0], workflow_id, "call_1", *action[1:])
        assert result.code == 2, result
        [line] = result.stderr.splitlines()
        assert "--run-id R --sha256 D" in line and "--yes" in line, line
    assert (await status(agent.handle(workflow_id))).phase == "awaiting_approval"
    assert await answers_sent(agent, workflow_id) == []
    # --yes answers the call as it is now
    done = await agent.cli("approve", workflow_id, "call_1", "--yes", "--approver", "eve")
    assert done.code == 0, done
    assert "call_1 approved by eve" in done.stdout
    assert (await agent.handle(workflow_id).result()).finish_reason == "stop"


async def test_an_answer_pinned_to_the_call_read_goes_through(agent: Agent) -> None:
    workflow_id = await start_waiting(agent, "run: echo pinned", "call_1")
    _shown, pin = await pending_pin(agent, workflow_id)
    wrong = await agent.cli("approve", workflow_id, "call_1", *pin[:3], "0" * 64)
    assert wrong.code == 1, wrong
    assert "has other arguments than those read" in wrong.stderr
    result = await agent.cli("approve", workflow_id, "call_1", *pin, "--approver", "fay")
    assert result.code == 0, result
    [sent] = await answers_sent(agent, workflow_id)
    assert (sent["run_id"], sent["arguments_sha256"]) == (pin[1], pin[3])
    assert (await agent.handle(workflow_id).result()).finish_reason == "stop"


async def _approve_at_a_terminal(agent: Agent, workflow_id: str, typed: bytes) -> Result:
    """`starter approve W call_1` with a terminal as its stdin; `typed` answers the prompt."""
    import pty

    controller, terminal = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "starter", "approve", workflow_id, "call_1",
        cwd=REPO, env=agent.env(USER="gus", LOGNAME="gus"), stdin=terminal,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    os.close(terminal)
    seen = b""
    try:
        assert proc.stderr is not None
        while b"approve? [y/N] " not in seen:
            chunk = await asyncio.wait_for(proc.stderr.read(256), 30)
            assert chunk, seen
            seen += chunk
        os.write(controller, typed)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        os.close(controller)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), (seen + err).decode())


async def test_at_a_terminal_an_unpinned_answer_shows_the_call_and_asks(agent: Agent) -> None:
    workflow_id = await start_waiting(agent, "run: echo asked", "call_1")
    digest = arguments_digest('{"command": "echo asked"}')
    no = await _approve_at_a_terminal(agent, workflow_id, b"n\n")
    assert no.code == 1, no
    assert 'call_1 run_command {"command": "echo asked"}' in no.stdout
    assert f"sha256 {digest}" in no.stdout
    assert "call_1 not answered" in no.stdout
    assert (await status(agent.handle(workflow_id))).phase == "awaiting_approval"
    assert await answers_sent(agent, workflow_id) == []

    yes = await _approve_at_a_terminal(agent, workflow_id, b"y\n")
    assert yes.code == 0, yes
    assert "call_1 approved by gus" in yes.stdout
    [sent] = await answers_sent(agent, workflow_id)
    assert sent["arguments_sha256"] == digest
    assert (await agent.handle(workflow_id).result()).finish_reason == "stop"
