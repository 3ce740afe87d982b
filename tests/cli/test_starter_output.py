"""What the command line prints at the edges, as real processes: a reader that goes away (`| head`)
ends it quietly, a finished run is said to have finished the way it did (not Temporal's
"completed" for an error), and a cut preview says what it left out."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from temporalio.client import Client

from tests.cli import test_starter
from tests.cli.test_starter import REPO, Agent, new_id, starter
from tests.cli.test_starter_pending import cli_env, worker
from tests.fake_openai import FakeOpenAI, unauthorized

agent = test_starter.agent  # the fixture: a worker with the real activities, the scripted model


async def test_a_reader_that_went_away_ends_the_command_quietly(agent: Agent) -> None:
    """`history W | head`: once the reader has gone, no `error: BrokenPipeError`, and the exit
    code a shell reports for a Unix tool in that case (141)."""
    workflow_id = new_id()
    ran = await agent.cli("run", "--id", workflow_id, "read notes.txt")
    assert ran.code == 0, ran
    for command in (
        ["history", workflow_id],
        ["watch", workflow_id],
        ["--json", "history", workflow_id],
    ):
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader is gone before the first line
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "starter", *command,
            cwd=REPO, env=agent.env(), stdin=asyncio.subprocess.DEVNULL,
            stdout=write_end, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        os.close(write_end)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert (proc.returncode, err.decode()) == (141, ""), command


async def test_a_run_that_ended_in_error_is_not_said_to_have_completed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    env = cli_env(client, task_queue)
    workflow_id = new_id()
    with FakeOpenAI() as fake:
        fake.enqueue(unauthorized())
        async with worker(client, task_queue, tmp_path, llm_base_url=fake.base_url):
            started = await starter("run", "--id", workflow_id, "hello", env=env)
            assert started.code == 3, started  # followed a run that ended `error`
            for command in (
                ("say", workflow_id, "again"),
                ("approve", workflow_id, "call_1", "--yes"),
            ):
                late = await starter(*command, env=env)
                assert late.code == 1
                assert f"run '{workflow_id}' has already finished (error)" in late.stderr, late


async def test_a_cut_tool_result_says_how_much_it_left_out(agent: Agent) -> None:
    (agent.workspace / "long.txt").write_text("word " * 200)
    workflow_id = new_id()
    ran = await agent.cli("run", "--id", workflow_id, "read long.txt")
    assert ran.code == 0, ran
    [line] = [x for x in ran.stdout.splitlines() if " tool_result " in x]
    assert line.endswith(" more characters)"), line
    shown = line.split(": ", 1)[1]
    left_out = int(shown.rsplit("(", 1)[1].split()[0].replace(",", ""))
    assert len(shown.split("… (", 1)[0]) == 300 and left_out > 700
