"""The README's tour works as written on a fresh clone: its set-up lines give the fresh workspace
something to work on, and the tour's first runs find it and wait for a person (the workspace
used to be empty, and the first example answered "I could not find logs")."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import uuid
from pathlib import Path

from temporalio.client import Client

from runtime.settings import Settings
from tests.cli.test_starter import REPO, Agent
from tests.helpers import events, of_type, wait_for_phase
from worker import run_worker


def tour_blocks() -> list[str]:
    """The shell blocks of the README's "A short tour", in order."""
    readme = (REPO / "README.md").read_text()
    tour = readme.split("## A short tour", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", tour, re.S)


def starter_arguments(line: str) -> list[str]:
    """A tour line `.venv/bin/python -m starter ARGS  # comment` as ARGS."""
    words = shlex.split(line, comments=True)
    assert words[:3] == [".venv/bin/python", "-m", "starter"], line
    return words[3:]


async def test_the_tours_first_runs_find_something_to_work_on(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    setup, commands = tour_blocks()[:2]
    made = [line for line in setup.splitlines() if not line.startswith(".venv/bin/")]
    assert made, "the tour gives the fresh workspace nothing to work on"
    for line in made:  # run in a fresh folder, as in a fresh clone
        made_it = await asyncio.create_subprocess_exec("sh", "-c", line, cwd=tmp_path)
        assert await asyncio.wait_for(made_it.wait(), 30) == 0, line
    settings = Settings.from_env(
        {
            "AGENT_WORKSPACE": str(tmp_path / "agent-workspace"),  # the worker's default, there
            "AGENT_STATE_DIR": str(tmp_path / "state"),
        }
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        run_worker(client, settings, queue=task_queue, stop=stop, ready=lambda _q: ready.set())
    )
    await asyncio.wait_for(ready.wait(), 30)
    agent = Agent(client, client.service_client.config.target_host, task_queue, tmp_path)
    try:
        runs = [starter_arguments(line) for line in commands.splitlines()[:2]]
        for arguments in runs:
            assert arguments[0] == "run"
            prompt = arguments[-1]
            workflow_id = f"tour-{uuid.uuid4().hex[:10]}"
            result = await agent.cli("run", "--no-follow", "--id", workflow_id, prompt)
            assert result.code == 0, result
            waiting = await wait_for_phase(agent.handle(workflow_id), "awaiting_approval")
            [call] = waiting.pending_approvals
            folder = re.fullmatch(r"Please delete the (\w+) folder", prompt)
            assert folder is not None, prompt
            assert (call.name, json.loads(call.arguments)) == (
                "delete_path",
                {"path": folder.group(1)},
            )
            await agent.handle(workflow_id).terminate("tour checked")
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def people_block() -> list[str]:
    """The lines of the tour's people-in-charge block: the one that makes the keys."""
    [block] = [b for b in tour_blocks() if "ssh-keygen" in b]
    return block.splitlines()


async def test_the_people_in_charge_block_works_as_printed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Each line of the block run as printed, by `sh`, in a folder standing for the fresh clone
    (its `.venv` and `worker.py`): the keys made by ssh-keygen, the approvers file by `printf`,
    the real worker started with it in the background (as in its own terminal), the run and the
    three approvals. Only the workflow id is the test's own."""
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    (tmp_path / "worker.py").symlink_to(REPO / "worker.py")
    workflow_id = f"tour-people-{uuid.uuid4().hex[:10]}"
    agent = Agent(client, client.service_client.config.target_host, task_queue, tmp_path)
    env = agent.env()
    said: dict[str, tuple[int, str]] = {}
    worker: asyncio.subprocess.Process | None = None
    drained: asyncio.Task[bytes] | None = None
    try:
        for line in people_block():
            line = line.replace(" W2 ", f" {workflow_id} ")
            if line.startswith("export "):  # for the lines after it, as in the reader's shell
                name, _, value = shlex.split(line, comments=True)[1].partition("=")
                env[name] = value
                continue
            if "worker.py" in line:
                worker = await asyncio.create_subprocess_exec(
                    "sh", "-c", line, cwd=tmp_path, env=env, start_new_session=True,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                )  # fmt: skip
                assert worker.stdout is not None
                ready = b""
                while not ready.startswith(b"worker ready "):  # after any warning it prints
                    ready = await asyncio.wait_for(worker.stdout.readline(), 60)
                    assert ready, "the worker stopped before it was ready"
                assert b" approvers=" in ready and b"(2 people" in ready, ready
                drained = asyncio.create_task(worker.stdout.read())  # never a full pipe
                continue
            done = await asyncio.create_subprocess_exec(
                "sh", "-c", line, cwd=tmp_path, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            out, _ = await asyncio.wait_for(done.communicate(), 60)
            assert done.returncode is not None
            said[line] = (done.returncode, out.decode())
        codes = [code for code, _ in said.values()]
        assert codes == [0, 0, 0, 0, 0, 0, 1, 0], said
        *_, first, again, second = said.values()
        assert "call_2 approved by ann; still pending: call_2" in first[1], first
        assert "ann has already answered call 'call_2' (the same person counts once)" in again[1]
        assert "call_2 approved by ben; still pending: none" in second[1], second
        handle = agent.handle(workflow_id)
        result = await asyncio.wait_for(handle.result(), 60)
        assert result.finish_reason == "stop"
        assert not (tmp_path / "agent-workspace" / "old").exists()  # the delete ran
        votes = [
            (v.approver, v.votes, v.needed) for v in of_type(await events(handle), "approval_vote")
        ]
        assert votes == [("ann", 1, 2), ("ben", 2, 2)]
    finally:
        if worker is not None and worker.returncode is None:
            os.killpg(worker.pid, signal.SIGTERM)  # the worker and its shell: ours, by id
            await asyncio.wait_for(worker.wait(), 30)
        if drained is not None:
            await drained
