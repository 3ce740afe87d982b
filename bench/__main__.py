"""`python -m bench [--quick] [--out PATH] [--only NAMES] [--no-variants]`: run the figures,
print the table, write the JSON. Exit 0 when the benchmark ran (missed targets are reported, not
failures)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.harness import FULL, QUICK, Bench, start_server
from bench.procstat import children
from bench.report import Figure, machine_info, table, write_json
from runtime.process import exit_now

Measure = Callable[[Bench], Awaitable[list[Figure]]]


def figure_modules() -> dict[str, Measure]:
    from bench.figures import (
        approval,
        cancel,
        compaction,
        encryption,
        forks,
        history,
        mcp,
        observability,
        overhead,
        paused,
        policy,
        processes,
        replay,
        sandbox,
        scale,
        sessions,
        store,
        sub_agents,
        votes,
    )

    return {
        "overhead": overhead.measure,
        "history": history.measure,
        "sessions": sessions.measure,
        "compaction": compaction.measure,
        "cancel": cancel.measure,
        "approval": approval.measure,
        "scale": scale.measure,
        "paused": paused.measure,
        "processes": processes.measure,
        "replay": replay.measure,
        "sandbox": sandbox.measure,
        "encryption": encryption.measure,
        "policy": policy.measure,
        "mcp": mcp.measure,
        "store": store.measure,
        "observability": observability.measure,
        "forks": forks.measure,
        "sub_agents": sub_agents.measure,
        "votes": votes.measure,
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small counts, about 2.5 minutes (CI)")
    parser.add_argument("--out", type=Path, default=Path("bench-results/latest.json"))
    parser.add_argument("--only", default="", help="comma-separated figure names")
    parser.add_argument(
        "--no-variants",
        action="store_true",
        help="leave out figure 5's report-only worker variants (each a worker process and a pair)",
    )
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    # On SIGTERM/SIGINT cancel the run, so the `finally` below still stops the dev server
    # (an orphaned server would keep eating the shared CPUs).
    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, task.cancel)
    profile = QUICK if args.quick else FULL
    if args.no_variants:
        profile = dataclasses.replace(profile, scale_variants=False)
    selected = figure_modules()
    if args.only:
        wanted = set(args.only.split(","))
        selected = {k: v for k, v in selected.items() if k in wanted}
    env = await start_server()
    figures: list[Figure] = []
    errors: dict[str, str] = {}
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        bench = Bench(
            client=env.client,
            target_host=env.client.service_client.config.target_host,
            profile=profile,
            workdir=Path(tmp),
            server_pids=children("temporal"),
        )
        try:
            for name, measure in selected.items():
                t0 = time.monotonic()
                print(f"[bench] {name} …", file=sys.stderr, flush=True)
                try:
                    figures += await measure(bench)
                except Exception:
                    errors[name] = traceback.format_exc()
                    print(errors[name], file=sys.stderr, flush=True)
                timings[name] = round(time.monotonic() - t0, 1)
                print(f"[bench] {name} done in {timings[name]} s", file=sys.stderr, flush=True)
        finally:
            await env.shutdown()
    wall = time.monotonic() - started
    print(table(figures))
    print(f"\nprofile {profile.name}; wall time {wall:.0f} s; per figure (s): {timings}")
    missed = [f.key for f in figures if f.met is False]
    print(f"targets missed: {', '.join(missed) if missed else 'none'}")
    payload: dict[str, Any] = {
        "profile": profile.name,
        "machine": machine_info(),
        "wall_seconds": round(wall, 1),
        "figure_seconds": timings,
        "figures": {f.key: f.as_json() for f in figures},
        "targets_missed": missed,
        "errors": errors,
        "details": bench.details,
    }
    write_json(args.out, payload)
    print(f"wrote {args.out}")
    return 1 if errors else 0


def main() -> None:
    exit_now(asyncio.run(run(parse_args(sys.argv[1:]))))


if __name__ == "__main__":
    main()
