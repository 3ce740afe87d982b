"""Approving works however many people watch: 20 real `python -m starter watch` processes follow
a run that waits for approval, then a real `python -m starter approve` answers it.

Each live follower holds one of the stream's long-poll updates and Temporal admits only 10
updates in flight per run, so the answer must still get through, every follower must follow the
run to its end, and no process may print the SDK's own log lines or a traceback.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field

from tests.cli import test_starter
from tests.cli.test_starter import REPO, Agent, start_waiting

agent = test_starter.agent  # the fixture: a worker with the real activities, the scripted model

WATCHERS = 20
CALL = "call_1"
NOISE = ("WARN", "temporalio_client", "Traceback")


@dataclass
class Watcher:
    proc: asyncio.subprocess.Process
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)

    async def pump(self) -> None:
        assert self.proc.stdout is not None and self.proc.stderr is not None

        async def read(stream: asyncio.StreamReader, into: bytearray) -> None:
            while chunk := await stream.read(4096):
                into.extend(chunk)

        await asyncio.gather(
            read(self.proc.stdout, self.stdout), read(self.proc.stderr, self.stderr)
        )
        await self.proc.wait()


async def spawn_watch(agent: Agent, workflow_id: str) -> Watcher:
    proc = await asyncio.create_subprocess_exec(
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
    return Watcher(proc)


async def test_approve_succeeds_with_twenty_watchers(agent: Agent) -> None:
    workflow_id = await start_waiting(agent, "run: echo hi", CALL)
    watchers = [await spawn_watch(agent, workflow_id) for _ in range(WATCHERS)]
    pumps = [asyncio.create_task(w.pump()) for w in watchers]
    try:
        async with asyncio.timeout(120):
            # Every follower has read the run up to the approval wait before anyone answers.
            while not all(b"needs approval: call_1" in w.stdout for w in watchers):
                if any(p.done() for p in pumps):
                    break
                await asyncio.sleep(0.2)
            attached = [b"needs approval: call_1" in w.stdout for w in watchers]
            assert all(attached), [w.stderr.decode()[-400:] for w in watchers if w.stderr]

            approve = await agent.cli("approve", workflow_id, CALL, "--approver", "ann", "--yes")
            assert approve.code == 0, approve
            assert f"{CALL} approved by ann" in approve.stdout
            for noise in NOISE:
                assert noise not in approve.stderr, approve.stderr

            await asyncio.gather(*pumps)
    finally:
        for w in watchers:
            if w.proc.returncode is None:
                w.proc.kill()
        await asyncio.gather(*pumps, return_exceptions=True)

    for index, w in enumerate(watchers):
        out, err = w.stdout.decode(), w.stderr.decode()
        assert w.proc.returncode == 0, (index, w.proc.returncode, out[-600:], err[-600:])
        assert "finished: stop" in out, (index, out[-600:], err[-600:])
        assert "tool_result call_1 run_command" in out, (index, out[-600:])
        for noise in NOISE:
            assert noise not in err and noise not in out, (index, noise, err[-600:])
