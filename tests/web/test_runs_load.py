"""The runs page's load time with many runs in the namespace (1,000 for the figure in the docs): 1,000 runs that finish at once
(a production worker with the scripted model, on the session dev server) and ten that wait for a
person, then `/runs` loaded over HTTP as a browser would, first page and filtered pages, each
timed five times (the median printed for the docs). What each load asks of Temporal is counted
too: one listing for the page, one for the chains' first starts, and an `audit` query per open
run on the page (kept for a few seconds, so a load right after another asks none)."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from runtime.settings import Settings
from tests.helpers import wait_for_phase, wait_until
from tests.web.conftest import Served, serve_web
from worker import run_worker
from workflows.model import AgentRunInput, AgentRunOptions

pytestmark = pytest.mark.web

FINISHED_RUNS = int(os.environ.get("AGENT_RUNS_LOAD_COUNT", "120"))
"""The suite lists 120 finished runs (three pages); the figure in docs/web-inbox.md was measured
with AGENT_RUNS_LOAD_COUNT=1000 (`pytest -s tests/web/test_runs_load.py`)."""
WAITING_RUNS = 10
LOADS = 5


@pytest.fixture(scope="module")
async def scripted_queue(
    client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """A production worker with the scripted model (no HTTP behind it: runs finish at once)."""
    tmp = tmp_path_factory.mktemp("runs-load")
    (tmp / "ws" / "logs").mkdir(parents=True)
    queue = f"load-{uuid.uuid4()}"
    settings = Settings(
        llm_base_url=None,
        llm_api_key=None,
        llm_model="scripted",
        workspace=tmp / "ws",
        state_dir=tmp / "state",
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        run_worker(client, settings, queue=queue, stop=stop, ready=lambda _q: ready.set())
    )
    await asyncio.wait_for(ready.wait(), 30)
    try:
        yield queue
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


async def _start_many(client: Client, queue: str, prefix: str, count: int) -> float:
    gate = asyncio.Semaphore(50)
    began = time.monotonic()

    async def one(i: int) -> None:
        async with gate:
            handle = await client.start_workflow(
                "AgentWorkflow",
                AgentRunInput.from_prompt("hello"),
                id=f"{prefix}{i:04d}",
                task_queue=queue,
            )
            await handle.result()

    await asyncio.gather(*(one(i) for i in range(count)))
    return time.monotonic() - began


async def _timed(http: httpx.AsyncClient, url: str) -> tuple[float, httpx.Response]:
    began = time.perf_counter()
    response = await http.get(url)
    return time.perf_counter() - began, response


async def test_the_runs_page_loads_fast_with_a_thousand_runs(
    client: Client, scripted_queue: str, tmp_path: Path
) -> None:
    prefix = f"load-{uuid.uuid4().hex[:6]}-"
    took = await _start_many(client, scripted_queue, prefix, FINISHED_RUNS)
    rules = {"rules": [{"tool": "list_dir", "decision": "allow"}]}
    waiting = []
    for i in range(WAITING_RUNS):
        waiting.append(
            await client.start_workflow(
                "AgentWorkflow",
                AgentRunInput.from_prompt(
                    "Please delete the logs folder", AgentRunOptions(approval_policy=rules)
                ),
                id=f"{prefix}waiting-{i}",
                task_queue=scripted_queue,
            )
        )
    for handle in waiting:
        await wait_for_phase(handle, "awaiting_approval")
    print(f"\n{FINISHED_RUNS} runs started and finished in {took:.1f}s")

    async with serve_web(client, scripted_queue, tmp_path, signed_in=False) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=60) as http:

            async def all_listed() -> bool:
                response = await http.get("/api/runs", params={"q": prefix, "status": "stop"})
                body = response.json()
                return len(body["runs"]) == 50 and body["next_page"] is not None

            await wait_until(all_listed, timeout=60, interval=0.5)
            figures = {}
            for name, url in (
                ("first page", "/runs"),
                ("awaiting_approval", f"/runs?status=awaiting_approval&q={prefix}"),
                ("id prefix", f"/runs?q={prefix}00"),
                ("stop (memo, row by row)", "/runs?status=stop"),
                ("error (none: the bounded scan)", f"/runs?status=error&q={prefix}"),
            ):
                figures[name] = await _measure(served, http, url)
    for handle in waiting:
        await handle.terminate("test over")

    print(f"runs page with {FINISHED_RUNS + WAITING_RUNS} runs in the namespace:")
    for name, (cold, warm, rows, asked) in figures.items():
        print(f"  {name:<32} first load {cold * 1000:6.0f} ms, then median {warm * 1000:5.0f} ms;"
              f" {rows} rows; {asked}")  # fmt: skip
    assert figures["first page"][2] == 50
    assert figures["id prefix"][2] == 50 and figures["awaiting_approval"][2] == WAITING_RUNS
    assert figures["stop (memo, row by row)"][2] == 50
    assert figures["error (none: the bounded scan)"][2] == 0


async def _measure(
    served: Served, http: httpx.AsyncClient, url: str
) -> tuple[float, float, int, str]:
    """The first load (the open runs' counts asked), the median of the next LOADS, the rows,
    and what the first load asked of Temporal."""
    calls = dict(served.polls.calls)
    cold, response = await _timed(http, url)
    assert response.status_code == 200, response.text
    asked = {k: v - calls.get(k, 0) for k, v in served.polls.calls.items() if v != calls.get(k)}
    rows = response.text.count('class="run-row"')
    warm = statistics.median([(await _timed(http, url))[0] for _ in range(LOADS)])
    summary = ", ".join(f"{v} {k}" for k, v in sorted(asked.items()))
    return cold, warm, rows, summary
