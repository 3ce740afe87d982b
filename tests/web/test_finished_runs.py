"""A run that is over, on the web: its page offers no `Cancel run` and no `Send` (served that way,
and taken away live when the run ends while the page is open), its status line reads
`finished stop round N`, and `/runs` shows each run's prompt (its first user message, shortened).
A real headless Chromium and httpx against the web app on 127.0.0.1, the dev server and a
production worker whose model is the OpenAI-compatible test server."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect
from temporalio.client import Client, WorkflowHandle

from tests.helpers import wait_for_phase, wait_until
from tests.web.conftest import CHROMIUM, Served, Worker, serve_web
from workflows.model import AgentRunInput, AgentRunResult

pytestmark = pytest.mark.web

expect.set_options(timeout=20_000)

LONG_PROMPT = "Please delete the logs folder " + "and say what was in it " * 10


@pytest.fixture(scope="module")
async def served(
    client: Client, worker: Worker, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    async with serve_web(
        client, worker.queue, tmp_path_factory.mktemp("finished-web"), signed_in=False
    ) as served:
        yield served


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        yield chromium
        await chromium.close()


@pytest.fixture
async def page(browser: Browser, served: Served) -> AsyncIterator[Page]:
    ctx = await browser.new_context(base_url=served.url)
    yield await ctx.new_page()
    await ctx.close()


_open: list[WorkflowHandle[Any, Any]] = []


@pytest.fixture(autouse=True)
async def tidy(worker: Worker) -> AsyncIterator[None]:
    yield
    while _open:
        with contextlib.suppress(Exception):
            await _open.pop().terminate("test over")


async def start(client: Client, worker: Worker, prompt: str) -> WorkflowHandle[Any, AgentRunResult]:
    handle = await client.start_workflow(
        "AgentWorkflow",
        AgentRunInput.from_prompt(prompt),
        id=f"agent-finished-{uuid.uuid4().hex[:10]}",
        task_queue=worker.queue,
        result_type=AgentRunResult,
    )
    _open.append(handle)
    return handle


def status_line(html: str) -> str:
    """The run page's status line as a reader sees it (tags gone, white space one space)."""
    found = re.search(r'<p id="phase" class="status">(.*?)</p>', html, re.S)
    assert found is not None
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", found.group(1))).strip()


async def test_a_finished_run_offers_no_cancel_and_no_send(
    client: Client, worker: Worker, served: Served
) -> None:
    waiting = await start(client, worker, "Please delete the logs folder")
    finished = await start(client, worker, "list")
    await finished.result()
    await wait_for_phase(waiting, "awaiting_approval")
    async with httpx.AsyncClient(base_url=served.url, timeout=60) as http:
        open_page = (await http.get(f"/runs/{waiting.id}")).text
        assert 'data-form="cancel"' in open_page and 'data-form="message"' in open_page
        assert ">Cancel run<" in open_page and ">Send<" in open_page
        page = await http.get(f"/runs/{finished.id}")
        assert page.status_code == 200
        assert 'data-form="cancel"' not in page.text and 'data-form="message"' not in page.text
        assert ">Cancel run<" not in page.text and ">Send<" not in page.text
        assert re.fullmatch(r"finished stop round \d+", status_line(page.text))


async def test_the_controls_go_when_the_run_ends_while_its_page_is_open(
    client: Client, worker: Worker, page: Page
) -> None:
    handle = await start(client, worker, "Please delete the logs folder")
    await wait_for_phase(handle, "awaiting_approval")
    await page.goto(f"/runs/{handle.id}")
    await expect(page.get_by_role("button", name="Cancel run")).to_be_visible()
    await expect(page.get_by_role("button", name="Send")).to_be_visible()
    await page.get_by_role("button", name="Cancel run").click()
    assert (await handle.result()).finish_reason == "cancelled"
    await expect(page.locator("[data-finish-reason]")).to_have_text("cancelled")
    await expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)
    await expect(page.get_by_role("button", name="Send")).to_have_count(0)
    assert re.fullmatch(r"finished cancelled round \d+", await page.locator("#phase").inner_text())


async def test_runs_lists_each_runs_prompt_shortened(
    client: Client, worker: Worker, served: Served, page: Page
) -> None:
    short = await start(client, worker, "list")
    long = await start(client, worker, LONG_PROMPT)
    await short.result()
    await wait_for_phase(long, "awaiting_approval")
    async with httpx.AsyncClient(base_url=served.url, timeout=60) as http:

        async def rows() -> dict[str, Any] | None:
            body = (await http.get("/api/runs", params={"q": "agent-finished-"})).json()
            found = {r["workflow_id"]: r for r in body["runs"]}
            return found if {short.id, long.id} <= found.keys() else None

        listed = await wait_until(rows, timeout=30, interval=0.3)
    assert listed[short.id]["prompt"] == "list"
    assert listed[long.id]["prompt"].startswith("Please delete the logs folder and say")
    await page.goto("/runs?q=agent-finished-")
    header = page.locator("table.runs thead th")
    await expect(header.nth(1)).to_have_text("Prompt")
    await expect(page.locator(f'tr[data-workflow-id="{short.id}"] td.prompt')).to_have_text("list")
    cell = page.locator(f'tr[data-workflow-id="{long.id}"] td.prompt')
    shown = await cell.inner_text()
    assert shown.startswith("Please delete the logs folder") and shown.endswith("…")
    assert len(shown) == 81  # 80 characters and the ellipsis
    assert (await cell.get_attribute("title") or "").startswith(LONG_PROMPT[:100])
