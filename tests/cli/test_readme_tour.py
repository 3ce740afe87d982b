"""The README's tour works as written on a fresh clone: its set-up lines give the fresh workspace
something to work on, and the tour's first runs find it and wait for a person (the workspace
used to be empty, and the first example answered "I could not find logs")."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import uuid
from pathlib import Path

from temporalio.client import Client

from runtime.settings import Settings
from tests.cli.test_starter import REPO, Agent
from tests.helpers import wait_for_phase
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
