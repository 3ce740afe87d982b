"""Fork and what-if on the web, against the dev server and a production worker (the fake
OpenAI-compatible server answering as the scripted assistant): `POST /api/runs/W/fork`, the run
page's `Fork from here` in a real headless Chromium, and the `/what-if` page."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect
from temporalio.client import Client, WorkflowHandle

from starter.handle import AgentHandle
from tests.helpers import events, history_length, messages, wait_for_phase
from tests.web.conftest import CHROMIUM, PASSWORD, Served, Worker, serve_web
from workflows.model import AgentRunInput, AgentRunResult, ToolApprovalResponse

pytestmark = pytest.mark.web

expect.set_options(timeout=20_000)


@pytest.fixture(scope="module")
async def served(
    client: Client, worker: Worker, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    async with serve_web(
        client, worker.queue, tmp_path_factory.mktemp("web"), signed_in=True
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


@pytest.fixture(scope="module")
async def signed_in(browser: Browser, served: Served) -> AsyncIterator[BrowserContext]:
    ctx = await browser.new_context(base_url=served.url)
    page = await ctx.new_page()
    await page.goto("/")
    await page.get_by_label("Username").fill("alice")
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page).to_have_url(served.url + "/")
    await page.close()
    yield ctx
    await ctx.close()


@pytest.fixture
async def page(signed_in: BrowserContext) -> AsyncIterator[Page]:
    opened = await signed_in.new_page()
    yield opened
    await opened.close()


_started: list[str] = []


@pytest.fixture(autouse=True)
async def tidy(client: Client) -> AsyncIterator[None]:
    yield
    while _started:
        with contextlib.suppress(Exception):
            await client.get_workflow_handle(_started.pop()).terminate("test over")


async def approved_delete(client: Client, worker: Worker) -> WorkflowHandle[Any, AgentRunResult]:
    """A finished run: round 0 lists the workspace, round 1 deletes logs (approved by ann),
    round 2 says so."""
    (worker.workspace / "logs").mkdir(exist_ok=True)  # an earlier test's run deleted it
    (worker.workspace / "logs" / "old.log").write_text("old\n")
    workflow_id = f"web-fork-{uuid.uuid4().hex[:10]}"
    handle = await client.start_workflow(
        "AgentWorkflow",
        AgentRunInput.from_prompt("Please delete the logs folder"),
        id=workflow_id,
        task_queue=worker.queue,
        result_type=AgentRunResult,
    )
    _started.append(workflow_id)
    waiting = await wait_for_phase(handle, "awaiting_approval")
    await AgentHandle(client, workflow_id).answer(
        ToolApprovalResponse(
            call_id=waiting.pending_approvals[0].id, approved=True, approver="ann", remember=True
        )
    )
    assert (await handle.result()).finish_reason == "stop"
    return handle


async def test_the_fork_api_starts_a_fork_and_refuses_what_it_cannot_do(
    client: Client, worker: Worker, served: Served
) -> None:
    original = await approved_delete(client, worker)
    before = await history_length(client, original.id)
    auth = {"Authorization": f"Bearer {served.token}"}
    async with httpx.AsyncClient(base_url=served.url, headers=auth, timeout=60) as http:
        response = await http.post(f"/api/runs/{original.id}/fork", json={"round": 0})
        assert response.status_code == 201, response.text
        body = response.json()
        _started.append(body["workflow_id"])
        assert response.headers["location"] == f"/runs/{body['workflow_id']}"
        assert body["forked_from"]["workflow_id"] == original.id
        assert body["forked_from"]["round"] == 0
        assert body["forked_from"]["run_id"] == original.first_execution_run_id
        fork = client.get_workflow_handle(body["workflow_id"])
        waiting = await wait_for_phase(fork, "awaiting_approval")
        assert [c.name for c in waiting.pending_approvals] == ["delete_path"]
        assert (await events(fork))[0].type == "forked"
        seen = (await http.get(f"/api/runs/{body['workflow_id']}")).json()
        assert seen["status"]["forked_from"] == body["forked_from"]
        assert seen["events"][0]["type"] == "forked"

        missing = await http.post(f"/api/runs/{original.id}/fork", json={"round": 9})
        assert missing.status_code == 400
        assert missing.json()["error"] == f"run '{original.id}' has rounds 0 to 2; no round 9"
        for bad in ({"round": "1"}, {"round": -1}, {"rounds": 1}, {"say": 3}, [1]):
            refused = await http.post(f"/api/runs/{original.id}/fork", json=bad)
            assert refused.status_code == 400, (bad, refused.text)
        unknown = await http.post("/api/runs/no-such-run-here/fork", json={})
        assert unknown.status_code == 404
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as anonymous:
        refused = await anonymous.post(f"/api/runs/{original.id}/fork", json={})
        assert refused.status_code == 401
    assert await history_length(client, original.id) == before


async def test_fork_from_here_on_the_run_page(
    client: Client, worker: Worker, served: Served, page: Page
) -> None:
    original = await approved_delete(client, worker)
    before = await history_length(client, original.id)
    await page.goto(f"/runs/{original.id}")
    rounds = page.locator("li.message.assistant")
    await expect(rounds).to_have_count(3)
    assert await rounds.evaluate_all("els => els.map(e => e.dataset.round)") == ["0", "1", "2"]
    await rounds.nth(0).get_by_role("button", name="Fork from here").click()
    await expect(page).to_have_url(re.compile(r"/runs/fork-[0-9a-f]{12}$"))
    fork_id = page.url.rsplit("/", 1)[1]
    _started.append(fork_id)
    forked = page.locator("p.forked")
    await expect(forked).to_have_text(f"forked from {original.id} after round 0")
    await expect(forked.get_by_role("link", name=original.id)).to_have_attribute(
        "href", f"/runs/{original.id}"
    )
    await expect(page.locator("#phase [data-phase]")).to_have_attribute(
        "data-phase", "awaiting_approval"
    )
    await expect(page.locator("[data-call-id]")).to_have_count(1)
    fork = client.get_workflow_handle(fork_id)
    record = await messages(fork)
    assert [m.role for m in record] == ["user", "assistant", "tool", "assistant"]
    assert await history_length(client, original.id) == before


WHAT_IF_POLICY = (
    '{\n  "enforced": [\n    {"tool": "delete_path", "decision": "deny", "reason": "no"}\n  ]\n}'
)


async def test_the_what_if_api_for_signed_in_people(
    client: Client, worker: Worker, served: Served
) -> None:
    original = await approved_delete(client, worker)
    before = await history_length(client, original.id)
    auth = {"Authorization": f"Bearer {served.token}"}
    async with httpx.AsyncClient(base_url=served.url, headers=auth, timeout=60) as http:
        response = await http.post(
            "/api/what-if", json={"policy": WHAT_IF_POLICY, "runs": [original.id]}
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert [
            (c["call_id"], c["then"]["by"], c["now"]["by"], c["changed"]) for c in body["calls"]
        ] == [
            ("call_1", "ran without asking", "allow (the tool's default)", False),
            ("call_2", "approved by ann", "deny by rule 0 (enforced): no", True),
        ]
        assert body["summary"]["summary"] == (
            "2 calls: 1 would be denied (approved by a person then), 1 unchanged"
        )
        as_object = await http.post(
            "/api/what-if", json={"policy": json.loads(WHAT_IF_POLICY), "runs": [original.id]}
        )
        assert as_object.json()["summary"] == body["summary"]
        broken = await http.post(
            "/api/what-if", json={"policy": WHAT_IF_POLICY.replace('"no"', '"no",'), "runs": []}
        )
        assert broken.status_code == 400
        assert broken.json()["error"].startswith("the policy: line 3, column ")
        missing = await http.post("/api/what-if", json={"policy": "{}", "runs": ["no-such-run-x"]})
        assert missing.status_code == 404
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as anonymous:
        refused = await anonymous.post("/api/what-if", json={"policy": "{}"})
        assert refused.status_code == 401
        page = await anonymous.get("/what-if", follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"].startswith("/signin")
    assert await history_length(client, original.id) == before


async def test_the_what_if_page_shows_every_call_decided_again(
    client: Client, worker: Worker, served: Served, page: Page
) -> None:
    original = await approved_delete(client, worker)
    before = await history_length(client, original.id)
    await page.goto("/")
    await page.get_by_role("link", name="What if").click()
    await expect(page).to_have_url(served.url + "/what-if")
    await page.get_by_label("Policy").fill(WHAT_IF_POLICY.replace('"decision"', '"desicion"'))
    await page.get_by_label("Runs").fill(original.id)
    await page.get_by_role("button", name="Decide again").click()
    await expect(page.get_by_role("alert")).to_have_text(
        "the policy: line 3: enforced.0.decision: Field required"
    )
    await expect(page.get_by_label("Runs")).to_have_value(original.id)
    await page.get_by_label("Policy").fill(WHAT_IF_POLICY)
    await page.get_by_role("button", name="Decide again").click()
    summary = page.locator("p.what-if-summary")
    await expect(summary).to_have_text(
        "2 calls: 1 would be denied (approved by a person then), 1 unchanged"
    )
    rows = page.locator("tr.what-if-call")
    await expect(rows).to_have_count(2)
    changed = page.locator(f'tr[data-workflow-id="{original.id}"][data-call-id="call_2"]')
    await expect(changed).to_have_attribute("data-changed", "true")
    await expect(changed.locator("td.tool")).to_have_text("delete_path")
    await expect(changed.locator("td.arguments")).to_have_text('{"path": "logs"}')
    await expect(changed.locator("td.then")).to_have_text("approved by ann")
    await expect(changed.locator("td.now")).to_have_text("deny by rule 0 (enforced): no")
    await expect(changed.locator("td.changed")).to_have_text("changed")
    assert await history_length(client, original.id) == before
