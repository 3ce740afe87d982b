"""Figure 2, history growth: events and bytes of AgentWorkflow's history after N rounds with
messages of a given size, over every continue-as-new generation, and the largest generation.

The model and the tool are the bench's in-process fakes registered under the real activity names
(history growth depends on what the workflow records, not on the HTTP client). The budget the
bytes are compared with is the project's target: 2 × the round's new content (the reply's
text and the tool's output, i.e. 2 × size) + 3 KB per round.
"""

from __future__ import annotations

import time
from typing import Any

from bench.harness import Bench, generations, history_bytes, new_id, new_queue, worker
from bench.report import Figure
from bench.stubs import LIST_DIR, FakeAgent
from workflows.bounds import MAX_CONVERSATION_BYTES
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage
from workflows.run.agent import AgentWorkflow

MAX_GENERATION_BYTES = 4 * 1024 * 1024


def budget_per_round(size: int) -> float:
    return 2 * (2 * size) + 3 * 1024


async def one_run(b: Bench, task_queue: str, rounds: int, size: int) -> dict[str, Any]:
    started = time.monotonic()
    handle = await b.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(
            messages=[ChatMessage.user("list the workspace")],
            options=AgentRunOptions(max_rounds=rounds, tools=["list_dir"]),
        ),
        id=new_id(f"bench-history-{rounds}x{size}"),
        task_queue=task_queue,
    )
    result = await handle.result()
    seconds = time.monotonic() - started
    assert handle.first_execution_run_id is not None
    gens = await generations(b.client, handle.id, handle.first_execution_run_id)
    sizes = [history_bytes(g.events) for g in gens]
    return {
        "rounds_asked": rounds,
        "size": size,
        "rounds_done": result.rounds,
        "finish_reason": result.finish_reason,
        "error": result.error,
        "generations": len(gens),
        "events": sum(len(g.events) for g in gens),
        "bytes": sum(sizes),
        "generation_bytes": sizes,
        "seconds": round(seconds, 1),
    }


async def measure(b: Bench) -> list[Figure]:
    p = b.profile
    figures: list[Figure] = []
    runs: list[dict[str, Any]] = []
    for size in p.history_sizes:
        task_queue = new_queue(f"history{size}")
        fake = FakeAgent(content_size=size, tool=LIST_DIR)
        async with worker(b.client, task_queue, fake.activities()):
            for rounds in p.history_rounds:
                run = await one_run(b, task_queue, rounds, size)
                runs.append(run)
                done = max(run["rounds_done"], 1)
                per_round = run["bytes"] / done
                ended = f"ended {run['finish_reason']} after {run['rounds_done']} rounds" + (
                    f" ({run['error'][:90]}…)" if run["error"] else ""
                )
                figures.append(
                    Figure(
                        key=f"history.bytes_per_round.{rounds}x{size}",
                        label=f"2. history bytes/round, {rounds} rounds × {size} B",
                        value=per_round,
                        unit="B",
                        floor=budget_per_round(size),
                        floor_label="budget",
                        target_kind="ratio_max",
                        target=1.0,
                        note=(
                            f"{run['events']} events ({run['events'] / done:.1f}/round), "
                            f"{run['bytes']:,} B in {run['generations']} generation(s);"
                            f" {1000 * run['seconds'] / done:.0f} ms/round; {ended}"
                        ),
                    )
                )
            biggest = max(r for run in runs if run["size"] == size for r in run["generation_bytes"])
            figures.append(
                Figure(
                    key=f"history.largest_generation.{size}",
                    label=f"2. largest generation, {size} B messages",
                    value=biggest / 1024,
                    unit="KiB",
                    floor=MAX_GENERATION_BYTES / 1024,
                    floor_label="4 MiB",
                    target_kind="ratio_max",
                    target=1.0,
                )
            )
            longest = [r for r in runs if r["size"] == size][-1]
            limited = longest["finish_reason"] == "error" and "too large" in (
                longest["error"] or ""
            )
            figures.append(
                Figure(
                    key=f"history.rounds_completed.{size}",
                    label=f"2. rounds completed of {longest['rounds_asked']}, {size} B",
                    value=float(longest["rounds_done"]),
                    unit="rounds",
                    floor=float(longest["rounds_asked"]),
                    floor_label="asked",
                    target_kind="ratio_min",
                    target=1.0,
                    note=(
                        "PRODUCT LIMIT: the workflow ends a run with an `error` event once the "
                        f"conversation passes {MAX_CONVERSATION_BYTES:,} bytes"
                        if limited
                        else f"finish_reason {longest['finish_reason']}"
                    ),
                )
            )
    b.details["history"] = {"activities": "bench fakes (in-process)", "runs": runs}
    return figures
