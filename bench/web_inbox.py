"""`python -m bench.web_inbox [--rounds 20] [--viewers 20]`: the web inbox's figures, measured
against the real `python -m starter web` process (local mode), a dev server, an in-process
production worker (the scripted model) and a headless Chromium from the OS:

- how long after an answer given elsewhere (the `submit_approval` update from another client)
  an open inbox page stops listing the call: median and worst of `--rounds`;
- the web server's resident memory with `--viewers` pages open on one waiting run (and before);
- that an answer still lands while they watch.

Prints one JSON object. Needs `/usr/bin/chromium` (or AGENT_TEST_CHROMIUM).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from playwright.async_api import Page, async_playwright
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from runtime.connect import data_converter
from runtime.search_attributes import ensure_search_attributes
from runtime.settings import Settings
from worker import run_worker
from workflows.model import AgentRunInput, AgentStatus

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def _waiting(client: Client, queue: str, prompt: str) -> tuple[str, str]:
    workflow_id = f"agent-bench-{uuid.uuid4().hex[:10]}"
    handle = await client.start_workflow(
        "AgentWorkflow", AgentRunInput.from_prompt(prompt), id=workflow_id, task_queue=queue
    )
    while True:
        status: AgentStatus = await handle.query("status", result_type=AgentStatus)
        if status.phase == "awaiting_approval" and status.pending_approvals:
            return workflow_id, status.pending_approvals[0].id
        await asyncio.sleep(0.05)


async def _gone(page: Page, workflow_id: str) -> None:
    await page.wait_for_selector(f'[data-workflow-id="{workflow_id}"]', state="detached")


async def measure(rounds: int, viewers: int) -> dict[str, Any]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(Path(sys.executable).parent / "temporal"),
        data_converter=data_converter(),
        dev_server_extra_args=["--log-level", "error"],
    )
    await ensure_search_attributes(env.client)
    client = env.client
    queue = f"bench-web-{uuid.uuid4()}"
    tmp = Path(tempfile.mkdtemp(prefix="bench-web-"))
    settings = Settings(
        llm_base_url=None, llm_api_key=None, llm_model="scripted", workspace=tmp / "ws"
    )
    (tmp / "ws").mkdir()
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(client, settings, queue=queue, stop=stop))
    port = _free_port()
    environ = {k: v for k, v in os.environ.items() if k != "AGENT_WEB_USERS_FILE"}
    environ |= {"TEMPORAL_ADDRESS": env.client.service_client.config.target_host}
    environ |= {"AGENT_TASK_QUEUE": queue}
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "starter",
        "web",
        "--port",
        str(port),
        cwd=ROOT,
        env=environ,
        stdout=asyncio.subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    figures: dict[str, Any] = {}
    try:
        assert server.stdout is not None
        await server.stdout.readline()  # "approval inbox at …": it listens
        chromium = os.environ.get("AGENT_TEST_CHROMIUM") or shutil.which("chromium")
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=chromium, headless=True, args=["--no-sandbox"]
            )
            ctx = await browser.new_context(base_url=url)
            inbox = await ctx.new_page()
            await inbox.goto("/")
            latencies: list[float] = []
            for _ in range(rounds):
                workflow_id, call_id = await _waiting(client, queue, "run: echo bench")
                await inbox.wait_for_selector(f'[data-workflow-id="{workflow_id}"]')
                began = time.monotonic()
                await client.get_workflow_handle(workflow_id).execute_update(
                    "submit_approval", {"call_id": call_id, "approved": True, "approver": "b"}
                )
                await _gone(inbox, workflow_id)
                latencies.append(time.monotonic() - began)
            figures["inbox_update_after_answer_elsewhere_s"] = {
                "median": round(statistics.median(latencies), 3),
                "max": round(max(latencies), 3),
                "rounds": rounds,
            }
            rss_before = _rss_kib(server.pid)
            workflow_id, call_id = await _waiting(client, queue, "run: echo crowd")
            pages = [await ctx.new_page() for _ in range(viewers)]
            for page in pages:
                await page.goto(f"/runs/{workflow_id}")
            for page in pages:
                await page.wait_for_selector(f'[data-call-id="{call_id}"]')
            await asyncio.sleep(3)  # let every page poll a few times
            figures["server_rss_mib"] = {
                "before_viewers": round(rss_before / 1024, 1),
                f"with_{viewers}_viewers": round(_rss_kib(server.pid) / 1024, 1),
            }
            began = time.monotonic()
            await pages[-1].get_by_role("button", name="Approve").click()
            await client.get_workflow_handle(workflow_id).result()
            for page in pages:
                await page.wait_for_selector('[data-phase="finished"]')
            figures[f"answer_with_{viewers}_viewers_to_all_pages_finished_s"] = round(
                time.monotonic() - began, 3
            )
            await browser.close()
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), 10)
        stop.set()
        await worker
        await env.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--viewers", type=int, default=20)
    args = parser.parse_args()
    figures = asyncio.run(measure(args.rounds, args.viewers))
    print(json.dumps(figures, indent=2), flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
