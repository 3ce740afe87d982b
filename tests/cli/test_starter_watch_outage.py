"""A watcher rides through trouble that passes: a real `python -m starter watch` follows an open
run while the in-process worker (the real activities, the scripted model) is stopped and started
again on the same task queue, or while its way to the Temporal server (a TCP relay) is cut and
mended. The watcher keeps going, says in one line that it is still trying, and prints what
happened afterwards; a closed run's watch still ends at once."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from temporalio.client import Client

from runtime.settings import Settings
from tests.cli.test_starter import REPO, Agent, seed, start_waiting
from tests.helpers import wait_until
from tests.tcp_relay import Relay
from worker import run_worker

CALL = "call_1"
AWAY_SECONDS = 20.0
"""How long the worker is away: several times the follower's wait for a status query."""
CUT_SECONDS = 15.0
"""How long the way to the server is cut: longer than the SDK's own retries of a request."""
NOTICE = "still trying"
NOISE = ("Traceback", "temporalio_client", " WARN ")


@dataclass
class Worker:
    """The agent's worker in this process, stopped and started again on the same task queue."""

    client: Client
    settings: Settings
    queue: str
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.stop = asyncio.Event()
        ready = asyncio.Event()
        self.task = asyncio.create_task(
            run_worker(
                self.client,
                self.settings,
                queue=self.queue,
                stop=self.stop,
                ready=lambda _q: ready.set(),
            )
        )
        await asyncio.wait_for(ready.wait(), 30)

    async def halt(self) -> None:
        if self.task is not None:
            self.stop.set()
            await asyncio.wait_for(self.task, 30)
            self.task = None


@pytest.fixture
async def worker(client: Client, task_queue: str, tmp_path: Path) -> AsyncIterator[Worker]:
    workspace = seed(tmp_path / "workspace")
    settings = Settings.from_env(
        {"AGENT_WORKSPACE": str(workspace), "AGENT_STATE_DIR": str(tmp_path / "state")}
    )
    running = Worker(client, settings, task_queue)
    await running.start()
    try:
        yield running
    finally:
        await running.halt()


@pytest.fixture
def agent(client: Client, worker: Worker, tmp_path: Path) -> Agent:
    workspace = Path(worker.settings.workspace)
    return Agent(client, client.service_client.config.target_host, worker.queue, workspace)


@dataclass
class Follower:
    """A `starter watch` process, its output read as it comes."""

    proc: asyncio.subprocess.Process
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    pump: asyncio.Task[None] | None = None

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def err(self) -> str:
        return self.stderr.decode(errors="replace")

    def said(self) -> str:
        return (
            f"exit {self.proc.returncode}\nstdout:\n{self.out[-1500:]}\nstderr:\n{self.err[-1500:]}"
        )


@contextlib.asynccontextmanager
async def starter_process(
    agent: Agent, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[Follower]:
    """`python -m starter ARGS` as a process of its own, its output read as it comes; killed at
    the end if it still runs."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "starter",
        *args,
        cwd=REPO,
        env=agent.env() if env is None else env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    follower = Follower(proc)

    async def read(stream: asyncio.StreamReader | None, into: bytearray) -> None:
        assert stream is not None
        while chunk := await stream.read(4096):
            into.extend(chunk)

    async def pump() -> None:
        await asyncio.gather(read(proc.stdout, follower.stdout), read(proc.stderr, follower.stderr))
        await proc.wait()

    follower.pump = asyncio.create_task(pump())
    try:
        yield follower
    finally:
        if proc.returncode is None:
            proc.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(follower.pump, 30)


def watching(
    agent: Agent, workflow_id: str, address: str | None = None
) -> contextlib.AbstractAsyncContextManager[Follower]:
    """`starter watch W`, through `address` instead of the dev server's when given."""
    env = agent.env() if address is None else agent.env(TEMPORAL_ADDRESS=address)
    return starter_process(agent, "watch", workflow_id, env=env)


async def test_watch_rides_through_a_worker_away_for_a_restart(agent: Agent, worker: Worker):
    workflow_id = await start_waiting(agent, "run: echo hi", CALL)
    async with watching(agent, workflow_id) as follower:
        assert follower.pump is not None
        await wait_until(lambda: f"needs approval: {CALL}" in follower.out, timeout=40)

        await worker.halt()
        await asyncio.sleep(AWAY_SECONDS)
        assert follower.proc.returncode is None, follower.said()  # still following
        await worker.start()

        approve = await agent.cli("approve", workflow_id, CALL, "--approver", "ann", "--yes")
        assert approve.code == 0, approve
        await asyncio.wait_for(follower.pump, 60)

    assert_followed_to_the_end(follower)


def assert_followed_to_the_end(follower: Follower) -> None:
    said = follower.said()
    assert follower.proc.returncode == 0, said
    lines = follower.out.splitlines()
    assert f"[r0] approval {CALL} approved by ann" in lines, said
    assert any(line.startswith(f"[r0] tool_result {CALL} run_command") for line in lines), said
    assert lines[-1] == "finished: stop", said
    notices = [line for line in lines if NOTICE in line]
    # One line for the outage, however long it lasted (a second only if a loaded worker, back,
    # were slow again for seconds: the rule of one line per trouble is tests/unit/test_patience.py).
    assert 1 <= len(notices) <= 2, said
    for noise in NOISE:
        assert noise not in follower.err and noise not in follower.out, said


async def test_watch_rides_through_its_way_to_the_server_cut_for_a_while(agent: Agent):
    workflow_id = await start_waiting(agent, "run: echo hi", CALL)
    async with (
        Relay(agent.address) as relay,
        watching(agent, workflow_id, relay.address) as follower,
    ):
        assert follower.pump is not None
        await wait_until(lambda: f"needs approval: {CALL}" in follower.out, timeout=40)

        await relay.cut()  # the stream's request in flight fails, and every one after it
        await asyncio.sleep(CUT_SECONDS)
        assert follower.proc.returncode is None, follower.said()  # still following
        await relay.mend()

        approve = await agent.cli("approve", workflow_id, CALL, "--approver", "ann", "--yes")
        assert approve.code == 0, approve
        await asyncio.wait_for(follower.pump, 60)
    assert_followed_to_the_end(follower)


async def test_watch_of_a_closed_run_still_ends_at_once(agent: Agent, worker: Worker):
    workflow_id = await start_waiting(agent, "run: echo hi", CALL)
    approve = await agent.cli("approve", workflow_id, CALL, "--approver", "ann", "--yes")
    assert approve.code == 0, approve
    await agent.handle(workflow_id).result()
    await worker.halt()  # a closed run needs no worker: its history says it all
    watched = await agent.cli("watch", workflow_id, timeout=30)
    assert watched.code == 0, watched
    assert watched.stdout.splitlines()[-1] == "finished: stop", watched
    assert NOTICE not in watched.stdout + watched.stderr, watched
