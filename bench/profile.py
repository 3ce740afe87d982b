"""`python -m bench.profile [--runs N] [--rounds R] [--out DIR]`: where the worker's CPU goes
under figure 5's load, by cause.

Starts what figure 5 starts (a dev server, the fake model server process, a `fair` worker
process), makes the reference run, then runs N concurrent agent runs of R rounds and then N
floor runs, while `py-spy` records the worker process (raw; non-blocking, so the worker is never
paused; only the thread holding the GIL, i.e. the Python work) and `/proc` gives each thread's
CPU time. It prints, for the agent and the floor, the worker's CPU per round: the Rust threads'
as measured, the Python threads' split by the samples' causes (`bench.profile_causes`); the raw
profiles stay in DIR. Needs `py-spy` (PyPI) next to the interpreter.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from bench.fake_llm import FakeLlmProcess
from bench.figures.scale import Batch, batch, reference_run
from bench.harness import FULL, Bench, new_queue, start_server
from bench.procstat import children, thread_cpu_seconds
from bench.profile_causes import by_thread, per_round
from bench.worker_proc import worker_process
from runtime.process import exit_now


async def profiled(
    b: Bench, kind: str, queue: str, pid: int, server: FakeLlmProcess, raw: Path, rate: int
) -> tuple[Batch, dict[str, float]]:
    """One batch of `kind` while py-spy records the worker; its batch and CPU ms/round by cause."""
    spy = await asyncio.create_subprocess_exec(
        *[str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid)],
        *["--format", "raw", "--output", str(raw), "--nonblocking", "--gil"],
        *["--rate", str(rate)],
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    await asyncio.sleep(1.0)  # py-spy attached
    before = thread_cpu_seconds(pid)
    done = await batch(b, kind, queue, pid, server)
    after = thread_cpu_seconds(pid)
    spy.send_signal(signal.SIGINT)
    await asyncio.wait_for(spy.wait(), 60)
    rounds = b.profile.scale_runs * b.profile.scale_rounds
    threads = by_thread(pid, before, after, rounds)
    text = await asyncio.to_thread(raw.read_text)
    return done, {**threads, **per_round(text, threads)}


async def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    env = await start_server()
    results: dict[str, tuple[Batch, dict[str, float]]] = {}
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp,
            FakeLlmProcess(mode="instant", content_size=200) as server,
        ):
            profile = replace(FULL, scale_runs=args.runs, scale_rounds=args.rounds)
            b = Bench(
                client=env.client,
                target_host=env.client.service_client.config.target_host,
                profile=profile,
                workdir=Path(tmp),
                server_pids=children("temporal"),
            )
            record = Path(tmp) / "floor-record.json"
            queue = new_queue("profile")
            extra = ["--llm-url", server.base_url, "--workdir", tmp, "--floor-record", str(record)]
            extra += ["--reimport"] if args.reimport else []
            async with worker_process(b.target_host, queue, "fair", *extra) as proc:
                await reference_run(b, queue, record, server)
                for kind in ("agent", "bare"):
                    raw = out / f"{kind}.raw"
                    results[kind] = await profiled(b, kind, queue, proc.pid, server, raw, args.rate)
    finally:
        await env.shutdown()
    print(report(results))


def report(results: dict[str, tuple[Batch, dict[str, float]]]) -> str:
    agent, floor = results["agent"], results["bare"]
    lines = [
        f"{'':62} | agent   | floor",
        f"{'rounds/s':62} | {agent[0].rounds_per_second:7.1f} | {floor[0].rounds_per_second:7.1f}",
        f"{'worker CPU ms/round (/proc)':62} | {agent[0].worker_cpu_ms_per_round:7.2f}"
        f" | {floor[0].worker_cpu_ms_per_round:7.2f}",
    ]
    causes = sorted(set(agent[1]) | set(floor[1]), key=lambda c: -agent[1].get(c, 0.0))
    for cause in causes:
        lines.append(
            f"{cause[:62]:62} | {agent[1].get(cause, 0.0):7.2f} | {floor[1].get(cause, 0.0):7.2f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument(
        "--reimport", action="store_true", help="Temporal's default sandbox (how it was before)"
    )
    parser.add_argument("--out", default="bench-results/profile")
    args = parser.parse_args(sys.argv[1:])
    Path(args.out).mkdir(parents=True, exist_ok=True)
    asyncio.run(run(args))
    exit_now(0)


if __name__ == "__main__":
    main()
