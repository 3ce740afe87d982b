"""A bench worker in its own process, so its memory (RSS) can be measured alone:
`python -m bench.worker_proc --address HOST:PORT --task-queue Q --kind agent|bare`.

`agent` runs AgentWorkflow with the in-process fake model (round 0 asks for `run_command`, which
needs approval; later rounds answer text); `bare` runs the bare workflow. Prints `ready` once
polling; exits on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from temporalio.client import Client

from bench.harness import worker
from bench.stubs import RUN_COMMAND, FakeAgent, Stamps, bare_activities
from runtime.connect import data_converter
from runtime.process import exit_now


async def serve(address: str, namespace: str, task_queue: str, kind: str) -> None:
    client = await Client.connect(address, namespace=namespace, data_converter=data_converter())
    if kind == "agent":
        activities = FakeAgent(tool=RUN_COMMAND, stop_after_first=True).activities()
    else:
        activities = bare_activities(Stamps())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker(client, task_queue, activities):
        print("ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--kind", choices=["agent", "bare"], required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.address, args.namespace, args.task_queue, args.kind))
    exit_now(0)
