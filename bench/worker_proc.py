"""A bench worker in its own process, so its memory (RSS) and CPU time can be measured alone:
`python -m bench.worker_proc --address HOST:PORT --task-queue Q --kind KIND`.

Kinds:
- `agent`: AgentWorkflow with the in-process fake model (round 0 asks for `run_command`, which
  needs approval; later rounds answer text);
- `bare`: the bare workflow's no-op steps;
- `fair`: AgentWorkflow with the real activities against `--llm-url` (workspace under
  `--workdir`), and the bare workflow doing the same model request and `list_dir` with plain
  httpx, json and os (`bench.floor`, the agent's request bodies read from `--floor-record` when
  its first round runs);
- `logic`: AgentWorkflow with in-process fakes of the model and the tool, and the bare no-op steps.

`--reimport` runs the workflows in Temporal's default sandbox (`workflows.run.agent` imported again
for every run) instead of the product's (`activities.sandbox_runner`); `--no-live-text` turns
the live text of `call_llm` off.
Prints `ready` once polling; exits on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client

from bench.agent_activities import API_KEY, agent_activities, bench_workspace
from bench.floor import FairFloor
from bench.harness import worker
from bench.stubs import LIST_DIR, RUN_COMMAND, FakeAgent, Stamps, bare_activities
from runtime.connect import data_converter
from runtime.process import exit_now

KINDS = ("agent", "bare", "fair", "logic")
READY_SECONDS = 60.0


@contextlib.asynccontextmanager
async def kind_activities(
    client: Client, args: argparse.Namespace
) -> AsyncIterator[list[Callable[..., Any]]]:
    if args.kind == "agent":
        yield FakeAgent(tool=RUN_COMMAND, stop_after_first=True).activities()
    elif args.kind == "bare":
        yield bare_activities(Stamps())
    elif args.kind == "logic":
        yield [*FakeAgent(content_size=200, tool=LIST_DIR).activities(), *bare_activities(Stamps())]
    else:
        live = not args.no_live_text
        workdir = Path(args.workdir)
        record = Path(args.floor_record)
        async with (
            FairFloor(args.llm_url, API_KEY, bench_workspace(workdir), record) as floor,
            agent_activities(client, args.llm_url, workdir, live_text=live) as (acts, _, __),
        ):
            yield [*acts, *floor.activities()]


async def serve(args: argparse.Namespace) -> None:
    client = await Client.connect(
        args.address, namespace=args.namespace, data_converter=data_converter()
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with (
        kind_activities(client, args) as activities,
        worker(client, args.task_queue, activities, reimport=args.reimport),
    ):
        print("ready", flush=True)
        await stop.wait()


@contextlib.asynccontextmanager
async def worker_process(
    address: str, task_queue: str, kind: str, *extra: str, env: dict[str, str] | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Start a bench worker process (`env`: its whole environment, default this one's), wait
    until it polls, stop it (SIGTERM) at the end."""
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "bench.worker_proc", "--address", address],
        *["--task-queue", task_queue, "--kind", kind, *extra],
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), READY_SECONDS)).decode()
        if line.strip() != "ready":
            raise RuntimeError(f"worker process did not start: {line!r}")
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.worker_proc", description=__doc__)
    parser.add_argument("--address", required=True)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--llm-url", help="fair: the fake model server's base URL")
    parser.add_argument("--workdir", help="fair: where the workspace and state go")
    parser.add_argument("--floor-record", help="fair: the reference run's record (JSON)")
    parser.add_argument("--reimport", action="store_true")
    parser.add_argument("--no-live-text", action="store_true", help="fair: AGENT_STREAM_DELTAS off")
    args = parser.parse_args(argv)
    if args.kind == "fair" and not (args.llm_url and args.workdir and args.floor_record):
        parser.error("--kind fair needs --llm-url, --workdir and --floor-record")
    return args


if __name__ == "__main__":
    asyncio.run(serve(parse_args(sys.argv[1:])))
    exit_now(0)
