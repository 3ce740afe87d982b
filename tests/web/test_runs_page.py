"""The runs page and the audit, from outside: a real headless Chromium and httpx against the web
app on 127.0.0.1, the dev server and a production worker whose model is the OpenAI-compatible
test server. A run decided by rules, people and the approval timeout, continued as new on the
way, shows every decision of its chain in order on its page, in `GET /api/runs/{id}/audit` and
in its row of `/runs`; the listing filters by status and workflow id and pages."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect
from temporalio.client import Client, WorkflowHandle

from tests.fake_openai import text, tool_calls
from tests.helpers import wait_for_phase, wait_until
from tests.web.conftest import CHROMIUM, PASSWORD, Served, Worker, serve_web
from workflows.contract.arguments import arguments_value
from workflows.model import AgentRunInput, AgentRunOptions, AgentRunResult, AuditView

pytestmark = pytest.mark.web

expect.set_options(timeout=20_000)

RULES = {
    "rules": [
        {"tool": "list_dir", "decision": "allow"},
        {
            "tool": "delete_path",
            "when": {"path": "secret*"},
            "decision": "deny",
            "reason": "not today",
        },
    ]
}


@pytest.fixture(scope="module")
async def served(
    client: Client, worker: Worker, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    async with serve_web(
        client, worker.queue, tmp_path_factory.mktemp("runs-web"), signed_in=True
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
async def page(browser: Browser, served: Served) -> AsyncIterator[Page]:
    """A page of a browser context signed in as alice through the sign-in page."""
    ctx: BrowserContext = await browser.new_context(base_url=served.url)
    first = await ctx.new_page()
    await first.goto("/runs")
    await expect(first).to_have_url(re.compile(r"/signin"))
    await first.get_by_label("Username").fill("alice")
    await first.get_by_label("Password").fill(PASSWORD)
    await first.get_by_role("button", name="Sign in").click()
    await expect(first).to_have_url(served.url + "/runs")
    yield first
    await ctx.close()


@pytest.fixture
async def api(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {served.token}"}
    async with httpx.AsyncClient(base_url=served.url, headers=headers, timeout=60) as http:
        yield http


_open: list[WorkflowHandle[Any, Any]] = []


@pytest.fixture(autouse=True)
async def tidy(worker: Worker) -> AsyncIterator[None]:
    yield
    with worker.fake._lock:
        worker.fake._queue.clear()
    while _open:
        with contextlib.suppress(Exception):
            await _open.pop().terminate("test over")


async def start(
    client: Client,
    queue: str,
    prompt: str,
    options: AgentRunOptions | None = None,
    *,
    workflow_id: str,
) -> WorkflowHandle[Any, AgentRunResult]:
    handle = await client.start_workflow(
        "AgentWorkflow",
        AgentRunInput.from_prompt(prompt, options),
        id=workflow_id,
        task_queue=queue,
        result_type=AgentRunResult,
    )
    _open.append(handle)
    return handle


async def listed(api: httpx.AsyncClient, count: int, **params: str) -> dict[str, Any]:
    """`GET /api/runs` once it lists `count` rows (visibility is eventually consistent)."""

    async def ready() -> dict[str, Any] | None:
        response = await api.get("/api/runs", params=params)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body if len(body["runs"]) == count else None

    found: dict[str, Any] = await wait_until(ready, timeout=30, interval=0.3)
    return found


async def answer(api: httpx.AsyncClient, workflow_id: str, **body: Any) -> None:
    response = await api.post(f"/api/runs/{workflow_id}/approvals", json=body)
    assert response.status_code == 200, response.text


async def test_a_run_decided_by_rules_people_and_the_timeout_across_continue_as_new(
    client: Client, worker: Worker, served: Served, page: Page, api: httpx.AsyncClient
) -> None:
    workflow_id = f"audit-chain-{uuid.uuid4().hex[:8]}"
    worker.fake.enqueue(
        tool_calls(
            ("c1", "list_dir", '{"path": "."}'),
            ("c2", "delete_path", '{"path": "secret.txt"}'),
            ("c3", "delete_path", '{"path": "logs"}'),
        ),
        tool_calls(("c4", "delete_path", '{"path": "notes.txt"}')),
        tool_calls(("c5", "delete_path", '{"path": "tmp"}')),
        text("done"),
    )
    options = AgentRunOptions(
        approval_policy=RULES,
        approval_timeout_seconds=6,
        on_approval_timeout="reject",
        max_history_events=100,
    )
    handle = await start(client, worker.queue, "tidy up", options, workflow_id=workflow_id)
    await wait_for_phase(handle, "awaiting_approval")
    await answer(api, workflow_id, call_id="c3", approved=True, arguments={"path": "logs/old.log"})

    async def waits_for(call_id: str) -> bool:
        status = await wait_for_phase(client.get_workflow_handle(workflow_id), "awaiting_approval")
        return [c.id for c in status.pending_approvals] == [call_id]

    await wait_until(lambda: waits_for("c4"), timeout=30)
    # Enough history that the run continues as new before its next round: signals it ignores.
    latest = client.get_workflow_handle(workflow_id)
    await asyncio.gather(*(latest.signal("padding", {}) for _ in range(60)))
    await answer(api, workflow_id, call_id="c4", approved=False, reason="keep it")
    # c5 is left to the approval timeout (rejected), then the model says "done".
    result = await client.get_workflow_handle(workflow_id, result_type=AgentRunResult).result()
    assert result.finish_reason == "stop"
    generations = [e async for e in client.list_workflows(f'WorkflowId="{workflow_id}"')]
    assert len(generations) > 1, "the run never continued as new"
    first_start = min(e.start_time for e in generations)

    # The API: the whole chain's decisions, in order, with the arguments that ran.
    response = await api.get(f"/api/runs/{workflow_id}/audit")
    assert response.status_code == 200, response.text
    audit = AuditView.model_validate(response.json())
    rows = [(d.call_id, d.source, d.approved, d.rule, d.approver) for d in audit.decisions]
    assert rows == [
        ("c1", "policy", True, 0, None),
        ("c2", "policy", False, 1, None),
        ("c3", "person", True, None, "alice"),
        ("c4", "person", False, None, "alice"),
        ("c5", "timeout", False, None, None),
    ]
    edited = audit.decisions[2]
    assert edited.edited and arguments_value(edited.arguments) == {"path": "logs/old.log"}
    assert audit.decisions[1].reason == "not today" and audit.decisions[3].reason == "keep it"
    counts = audit.counts
    assert (counts.approved_by_person, counts.rejected_by_person) == (1, 1)
    assert (counts.by_rule, counts.by_timeout, counts.seeded) == (2, 1, 0)
    assert (audit.usage.prompt_tokens, audit.usage.completion_tokens) == (44, 28)

    # The run's page: every decision in order, who or which rule, edits marked, reasons.
    await page.goto(f"/runs/{workflow_id}")
    decisions = page.locator("#audit .decision")
    await expect(decisions).to_have_count(5)
    ids = await decisions.evaluate_all("els => els.map(e => e.dataset.auditCallId)")
    assert ids == ["c1", "c2", "c3", "c4", "c5"]
    await expect(decisions.nth(0).locator(".by")).to_have_text("rule 0")
    await expect(decisions.nth(1).locator(".by")).to_have_text("rule 1")
    await expect(decisions.nth(1).locator(".verdict")).to_have_text("rejected")
    await expect(decisions.nth(1).locator(".reason")).to_have_text("not today")
    await expect(decisions.nth(1).locator(".arguments")).to_have_text('{"path": "secret.txt"}')
    await expect(decisions.nth(2).locator(".by")).to_have_text("person alice")
    await expect(decisions.nth(2).locator(".arguments")).to_have_text('{"path": "logs/old.log"}')
    await expect(decisions.nth(2).locator(".edited")).to_have_text("edited")
    await expect(decisions.nth(3).locator(".reason")).to_have_text("keep it")
    await expect(decisions.nth(4).locator(".by")).to_have_text("the approval timeout")
    for index in (0, 1, 3, 4):
        await expect(decisions.nth(index).locator(".edited")).to_have_count(0)
    at = await decisions.nth(4).locator("time").get_attribute("datetime")
    assert at == audit.decisions[4].at.isoformat()
    await expect(page.locator("#audit .audit-counts")).to_contain_text(
        "approved by people 1, rejected by people 1, decided by rules 2, by the approval timeout 1"
    )

    # Its row on the runs page, reached from the inbox: one row for the chain, from its first
    # start, with its counts and tokens from the memo.
    await page.goto("/")
    await page.get_by_role("link", name="Runs").click()
    await expect(page).to_have_url(served.url + "/runs")
    await page.get_by_label("Workflow id starts with").fill(workflow_id)
    await page.get_by_role("button", name="Filter").click()
    row = page.locator(f'tr[data-workflow-id="{workflow_id}"]')
    await expect(row).to_have_count(1)
    await expect(row).to_have_attribute("data-status", "stop")
    await expect(row.locator(".approved")).to_have_text("1")
    await expect(row.locator(".rejected")).to_have_text("1")
    await expect(row.locator(".by-rule")).to_have_text("2")
    await expect(row.locator(".by-timeout")).to_have_text("1")
    await expect(row.locator(".tokens")).to_have_text("44 + 28")
    started = await row.locator("time").get_attribute("datetime")
    assert started == first_start.isoformat()
    body = await listed(api, 1, q=workflow_id)
    assert body["runs"][0]["started_at"] == first_start.isoformat()
    assert body["runs"][0]["decisions"] == counts.model_dump()
    assert body["runs"][0]["counts_from"] == "memo"
    await row.get_by_role("link", name=workflow_id).click()
    await expect(page).to_have_url(f"{served.url}/runs/{workflow_id}")
    await expect(page.locator("#audit .decision")).to_have_count(5)


async def test_the_audit_on_a_run_page_follows_decisions_as_they_are_made(
    client: Client, worker: Worker, page: Page, api: httpx.AsyncClient
) -> None:
    workflow_id = f"audit-live-{uuid.uuid4().hex[:8]}"
    worker.fake.enqueue(
        tool_calls(("c1", "list_dir", '{"path": "."}'), ("c2", "delete_path", '{"path": "x"}')),
        text("done"),
    )
    handle = await start(
        client, worker.queue, "go", AgentRunOptions(approval_policy=RULES), workflow_id=workflow_id
    )
    await wait_for_phase(handle, "awaiting_approval")
    await page.goto(f"/runs/{workflow_id}")
    decisions = page.locator("#audit .decision")
    await expect(decisions).to_have_count(1)
    await expect(decisions.nth(0)).to_have_attribute("data-source", "policy")
    await answer(api, workflow_id, call_id="c2", approved=False, reason="nope\u202e")
    await expect(decisions).to_have_count(2)  # without a reload
    await expect(decisions.nth(1)).to_have_attribute("data-approved", "false")
    # The same visible rendering as the inbox: the override is shown as its escape.
    await expect(decisions.nth(1).locator(".reason")).to_have_text("nope\\u202e")


async def test_the_listing_filters_by_status_and_pages_newest_first(
    client: Client, worker: Worker, served: Served, page: Page, api: httpx.AsyncClient
) -> None:
    prefix = f"runs-{uuid.uuid4().hex[:6]}-"
    finished = [f"{prefix}stop-{i}" for i in range(4)]
    for workflow_id in finished:  # one after another: they close in this order
        handle = await start(client, worker.queue, "hello", workflow_id=workflow_id)
        await handle.result()
    rounds = await start(
        client, worker.queue, "hello", AgentRunOptions(max_rounds=0), workflow_id=prefix + "max"
    )
    await rounds.result()
    waiting = await start(
        client,
        worker.queue,
        "Please delete the logs folder",
        AgentRunOptions(approval_policy=RULES),
        workflow_id=prefix + "waiting",
    )
    await wait_for_phase(waiting, "awaiting_approval")
    ended = await start(
        client, worker.queue, "Please delete the logs folder", workflow_id=prefix + "ended"
    )
    await wait_for_phase(ended, "awaiting_approval")
    await ended.terminate("ended by the test")
    cancelled = await start(
        client, worker.queue, "Please delete the logs folder", workflow_id=prefix + "cancelled"
    )
    await wait_for_phase(cancelled, "awaiting_approval")
    await cancelled.signal("cancel", {"reason": "test"})
    await cancelled.result()

    listing = {
        **{w: "stop" for w in finished},
        prefix + "max": "max_rounds",
        prefix + "waiting": "awaiting_approval",
        prefix + "ended": "terminated",
        prefix + "cancelled": "cancelled",
    }

    async def settled() -> dict[str, Any] | None:
        """The listing once visibility caught up with the last run's close (it may still list
        the cancelled run as it was a moment before: visibility is eventually consistent)."""
        body = await listed(api, 8, q=prefix)
        return body if {r["workflow_id"]: r["status"] for r in body["runs"]} == listing else None

    with contextlib.suppress(TimeoutError):
        await wait_until(settled, timeout=30, interval=0.3)
    everything = await listed(api, 8, q=prefix)
    statuses = {r["workflow_id"]: r["status"] for r in everything["runs"]}
    assert statuses == listing
    order = [r["workflow_id"] for r in everything["runs"]]
    assert order[0] == prefix + "waiting", "open runs come first"
    assert order.index(finished[3]) < order.index(finished[0]), "newest first"
    ended_row = next(r for r in everything["runs"] if r["workflow_id"] == prefix + "ended")
    assert ended_row["decisions"] is None  # Temporal ended it: no memo
    # The open run's counts come from its audit query (the rule allowed its list_dir).
    waiting_row = everything["runs"][0]
    assert waiting_row["counts_from"] == "audit"
    assert waiting_row["decisions"]["by_rule"] == 1

    for status, expected in {
        "stop": set(finished),
        "finished": {*finished, prefix + "max", prefix + "cancelled"},
        "max_rounds": {prefix + "max"},
        "cancelled": {prefix + "cancelled"},
        "awaiting_approval": {prefix + "waiting"},
        "terminated": {prefix + "ended"},
        "running": set(),
        "error": set(),
    }.items():
        response = await api.get("/api/runs", params={"status": status, "q": prefix})
        assert response.status_code == 200, response.text
        got = {r["workflow_id"] for r in response.json()["runs"]}
        assert got == expected, status

    # Pages of 3 (the page token of visibility; and of a filter checked row by row).
    served.web.runs_page_size = 3
    try:
        for params, expected_ids in (
            ({"q": prefix}, order),
            (
                {"q": prefix, "status": "stop"},
                [w for w in order if w in finished],
            ),
        ):
            seen: list[str] = []
            sizes: list[int] = []
            query: dict[str, str] = dict(params)
            while True:
                response = await api.get("/api/runs", params=query)
                assert response.status_code == 200, response.text
                body = response.json()
                seen += [r["workflow_id"] for r in body["runs"]]
                sizes.append(len(body["runs"]))
                if body["next_page"] is None:
                    break
                query = {**params, "page": body["next_page"]}
            assert seen == expected_ids
            assert all(size == 3 for size in sizes[:-1])

        # In the browser: the status filter, data-status on every row, the next page's link.
        await page.goto("/runs?" + urlencode({"q": prefix}))
        rows = page.locator("tr.run-row")
        await expect(rows).to_have_count(3)
        await page.get_by_label("Status").select_option("stop")
        await page.get_by_role("button", name="Filter").click()
        await expect(rows).to_have_count(3)
        assert set(await rows.evaluate_all("els => els.map(e => e.dataset.status)")) == {"stop"}
        first_page = await rows.evaluate_all("els => els.map(e => e.dataset.workflowId)")
        await page.get_by_role("link", name="Older runs").click()
        await expect(rows).to_have_count(1)
        second_page = await rows.evaluate_all("els => els.map(e => e.dataset.workflowId)")
        assert first_page + second_page == [w for w in order if w in finished]
        await expect(page.get_by_role("link", name="Older runs")).to_have_count(0)
        await expect(page.get_by_label("Status")).to_have_value("stop")
    finally:
        served.web.runs_page_size = 50


async def test_the_id_filter_is_the_exact_start_of_the_id_whatever_it_holds(
    client: Client, api: httpx.AsyncClient
) -> None:
    """`WorkflowId STARTS_WITH` for what visibility matches as it is; the rest of the text (a
    quote, a backslash, a tab…) checked row by row: the filter is the plain start of the id."""
    base = f"odd-{uuid.uuid4().hex[:6]}"
    tails = ['a"b', 'a"c', "a\\b", "a\tb", "a'b", "a%b", "a_b", "a b", "axb", "é"]
    queue = f"nobody-{uuid.uuid4()}"  # no worker: the runs stay open with no AgentStatus
    for tail in tails:
        await start(client, queue, "hello", workflow_id=base + tail)
    await listed(api, len(tails), q=base)
    for tail in tails:
        for text_ in {tail[:2], tail}:
            response = await api.get("/api/runs", params={"q": base + text_})
            assert response.status_code == 200, response.text
            got = sorted(r["workflow_id"] for r in response.json()["runs"])
            assert got == sorted(base + t for t in tails if t.startswith(text_)), text_
    response = await api.get("/api/runs", params={"q": base + "a", "status": "running"})
    rows = response.json()["runs"]
    assert len(rows) == len(tails) - 1 and {r["status"] for r in rows} == {"running"}
    assert all(r["decisions"] is None for r in rows)  # no worker answers their audit


async def test_bad_filters_and_forged_pages_are_refused_at_once(
    client: Client, worker: Worker, served: Served, page: Page, api: httpx.AsyncClient
) -> None:
    response = await api.get("/api/runs", params={"status": "done"})
    assert response.status_code == 400
    assert response.json()["error"].startswith("unknown status 'done': one of running,")
    response = await api.get("/api/runs", params={"q": "x" * 201})
    assert response.status_code == 400 and "at most 200" in response.json()["error"]
    await page.goto("/runs?status=done")
    await expect(page.get_by_role("alert")).to_contain_text("unknown status 'done'")

    prefix = f"pages-{uuid.uuid4().hex[:6]}-"
    for i in range(3):
        await (await start(client, worker.queue, "hello", workflow_id=f"{prefix}{i}")).result()
    await listed(api, 3, q=prefix)
    served.web.runs_page_size = 1
    try:
        real = (await api.get("/api/runs", params={"q": prefix})).json()["next_page"]
        assert real
        listings = len(served.polls.listings)
        for params in (
            {"q": prefix, "page": real[:-2] + "xx"},  # a signature that does not match
            {"q": prefix, "page": "eyJ0IjoiZ2FyYmFnZSIsInMiOjB9.abc"},  # a token of one's own
            {"q": prefix + "1", "page": real},  # the page of another filter
            {"q": prefix, "status": "stop", "page": real},
            {"q": prefix, "page": "é"},
        ):
            began = time.monotonic()
            response = await api.get("/api/runs", params=params)
            assert response.status_code == 400, params
            assert response.json()["error"].startswith("page: not a page of this listing")
            assert time.monotonic() - began < 1.0
        asked = served.polls.listings[listings:]
        assert not [q for q in asked if prefix in q], "a refused page never reaches Temporal"
        ok = await api.get("/api/runs", params={"q": prefix, "page": real})
        assert ok.status_code == 200 and len(ok.json()["runs"]) == 1
    finally:
        served.web.runs_page_size = 50


async def test_the_audit_api_answers_like_the_workflow_and_refuses_unknown_runs(
    client: Client, worker: Worker, served: Served, api: httpx.AsyncClient
) -> None:
    workflow_id = f"audit-api/{uuid.uuid4().hex[:6]}"  # a `/` in the id: one path segment
    handle = await start(
        client,
        worker.queue,
        "Please delete the logs folder",
        AgentRunOptions(approval_policy=RULES),
        workflow_id=workflow_id,
    )
    await wait_for_phase(handle, "awaiting_approval")
    segment = workflow_id.replace("/", "%2F")
    response = await api.get(f"/api/runs/{segment}/audit")
    assert response.status_code == 200, response.text
    queried = await handle.query("audit", result_type=AuditView)
    assert response.json() == queried.model_dump(mode="json")
    assert [d["source"] for d in response.json()["decisions"]] == ["policy"]
    missing = await api.get("/api/runs/no-such-run-anywhere/audit")
    assert missing.status_code == 404 and "no-such-run-anywhere" in missing.json()["error"]
    async with httpx.AsyncClient(base_url=served.url) as anonymous:
        assert (await anonymous.get(f"/api/runs/{segment}/audit")).status_code == 401
        assert (await anonymous.get("/api/runs")).status_code == 401
        signin = await anonymous.get("/runs")
        assert signin.status_code == 303 and signin.headers["location"].startswith("/signin")


async def test_older_decisions_past_the_budget_are_counted_on_the_page(
    client: Client, worker: Worker, page: Page, api: httpx.AsyncClient
) -> None:
    """Three replies of 64 calls with long arguments, each denied by a rule with a long reason:
    more than the audit's 200 KB, so the oldest are dropped and the page says how many."""
    workflow_id = f"audit-big-{uuid.uuid4().hex[:8]}"
    reason = "r" * 600
    rules = {"rules": [{"tool": "delete_path", "decision": "deny", "reason": reason}]}
    for batch in range(3):
        calls = [
            (f"b{batch}c{i}", "delete_path", f'{{"path": "{"p" * 600}{i}"}}') for i in range(64)
        ]
        worker.fake.enqueue(tool_calls(*calls, chunk_size=400))
    worker.fake.enqueue(text("done"))
    handle = await start(
        client, worker.queue, "go", AgentRunOptions(approval_policy=rules), workflow_id=workflow_id
    )
    await handle.result()
    audit = AuditView.model_validate((await api.get(f"/api/runs/{workflow_id}/audit")).json())
    assert audit.dropped > 0 and audit.counts.by_rule == 192
    assert audit.dropped + len(audit.decisions) == 192
    assert audit.decisions[-1].call_id == "b2c63"
    assert str(audit.decisions[-1].arguments).endswith("more characters]")
    await page.goto(f"/runs/{workflow_id}")
    await expect(page.locator("#audit .dropped")).to_have_text(
        f"{audit.dropped} older decisions not kept"
    )
    decisions = page.locator("#audit .decision")
    await expect(decisions).to_have_count(len(audit.decisions))
    last = decisions.nth(len(audit.decisions) - 1)
    shown = await last.locator(".arguments").inner_text()
    assert shown.startswith('{"path":"ppp') and re.search(r"…\[\d+ more characters\]$", shown)
    assert "(invalid JSON)" not in shown


async def test_a_memo_a_client_wrote_counts_nothing(
    client: Client, worker: Worker, api: httpx.AsyncClient
) -> None:
    """A client starts runs with a memo of its own saying 41 calls were approved by people: the
    runs page counts only what the workflow itself recorded. A run Temporal ended keeps the
    forged memo and shows no counts; a run that finished shows its own."""
    prefix = f"forged-{uuid.uuid4().hex[:6]}-"
    forged = {
        "agent": {
            "finish_reason": "stop",
            "decisions": {"approved_by_person": 41, "rejected_by_person": 0, "by_rule": 0},
            "tokens": {"prompt_tokens": 1, "completion_tokens": 1},
            "run_id": "a-guess",
        }
    }
    handles = {}
    for name, prompt in (("ended", "Please delete the logs folder"), ("stop", "hello")):
        handles[name] = await client.start_workflow(
            "AgentWorkflow",
            AgentRunInput.from_prompt(prompt),
            id=prefix + name,
            task_queue=worker.queue,
            memo=forged,
            result_type=AgentRunResult,
        )
        _open.append(handles[name])
    await wait_for_phase(handles["ended"], "awaiting_approval")
    await handles["ended"].terminate("ended by the test")
    await handles["stop"].result()

    rows = {r["workflow_id"]: r for r in (await listed(api, 2, q=prefix))["runs"]}
    ended, stop = rows[prefix + "ended"], rows[prefix + "stop"]
    assert ended["status"] == "terminated"
    assert ended["decisions"] is None and ended["tokens"] is None
    assert ended["counts_from"] is None
    assert stop["status"] == "stop" and stop["counts_from"] == "memo"
    assert stop["decisions"]["approved_by_person"] == 0
    assert stop["tokens"] != forged["agent"]["tokens"]
