"""The approval inbox in a real headless Chromium, against the dev server and a production worker:
people sign in, see every waiting call, answer it, watch runs live; the pages load nothing from
another origin, and twenty viewers of one run cost it one stream long-poll."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, BrowserContext, Locator, Page, async_playwright, expect
from temporalio.client import Client, WorkflowHandle

from tests.fake_openai import Slow, text, tool_calls
from tests.helpers import events, of_type, wait_for_phase, wait_until
from tests.helpers import status as status_of
from tests.web.conftest import CHROMIUM, PASSWORD, Served, Worker, serve_web
from workflows.contract.arguments import arguments_digest
from workflows.model import AgentRunInput, AgentRunOptions, AgentRunResult

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


class Requests(list[str]):
    """Every URL any page of the context asked for."""


@pytest.fixture(scope="module")
async def context(
    browser: Browser, served: Served
) -> AsyncIterator[tuple[BrowserContext, Requests]]:
    """One signed-in browser context for the module (alice, through the sign-in page)."""
    ctx = await browser.new_context(base_url=served.url)
    requests = Requests()
    ctx.on("request", lambda request: requests.append(request.url))
    page = await ctx.new_page()
    await page.goto("/")
    await expect(page).to_have_url(re.compile(r"/signin"))
    await page.get_by_label("Username").fill("alice")
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page).to_have_url(served.url + "/")
    await page.close()
    yield ctx, requests
    await ctx.close()


@pytest.fixture(scope="module")
async def page(context: tuple[BrowserContext, Requests]) -> AsyncIterator[Page]:
    ctx, _ = context
    first = await ctx.new_page()
    yield first
    await first.close()


_started: list[WorkflowHandle[Any, Any]] = []


@pytest.fixture(autouse=True)
async def tidy(worker: Worker) -> AsyncIterator[None]:
    """A test that fails leaves nothing behind for the next: no open run, no queued reply."""
    yield
    while _started:  # first the runs, then their replies (a model call of theirs may come between)
        with contextlib.suppress(Exception):
            await _started.pop().terminate("test over")
    with worker.fake._lock:
        worker.fake._queue.clear()


async def start(
    client: Client,
    worker: Worker,
    prompt: str,
    options: AgentRunOptions | None = None,
    *,
    workflow_id: str | None = None,
) -> WorkflowHandle[Any, AgentRunResult]:
    handle = await client.start_workflow(
        "AgentWorkflow",
        AgentRunInput.from_prompt(prompt, options),
        id=workflow_id or f"agent-web-{uuid.uuid4().hex[:10]}",
        task_queue=worker.queue,
        result_type=AgentRunResult,
    )
    _started.append(handle)
    return handle


async def signals_sent(client: Client, workflow_id: str, name: str) -> list[Any]:
    """The payloads of the signals `name` the run received, as its history holds them."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    sent: list[Any] = []
    for event in history.events:
        if event.HasField("workflow_execution_signaled_event_attributes"):
            signal = event.workflow_execution_signaled_event_attributes
            if signal.signal_name == name:
                sent += await client.data_converter.decode(signal.input.payloads)
    return sent


def call_of(page: Page, workflow_id: str, call_id: str | None = None) -> Locator:
    selector = f'[data-workflow-id="{workflow_id}"]'
    if call_id is not None:
        selector += f'[data-call-id="{call_id}"]'
    return page.locator(selector)


async def waiting_call(handle: WorkflowHandle[Any, Any]) -> str:
    status = await wait_for_phase(handle, "awaiting_approval")
    return status.pending_approvals[0].id


async def outcome(page: Page, item: Locator) -> list[str]:
    """After answering: the refusals shown (none when the answer was taken and the call left)."""
    alert = page.get_by_role("alert")

    async def settled() -> bool:
        return await item.count() == 0 or await alert.count() > 0

    await wait_until(settled, timeout=20.0)
    return await alert.all_inner_texts()


async def approvals(handle: WorkflowHandle[Any, Any]) -> list[Any]:
    return of_type(await events(handle), "approval")


async def test_the_inbox_lists_two_waiting_runs_and_answers_them(
    client: Client, worker: Worker, served: Served, page: Page
) -> None:
    echo = await start(client, worker, "run: echo hi")
    echo_call = await waiting_call(echo)
    delete = await start(client, worker, "Please delete the logs folder")
    delete_call = await waiting_call(delete)
    await page.goto("/")
    echo_item = call_of(page, echo.id, echo_call)
    delete_item = call_of(page, delete.id, delete_call)
    await expect(echo_item).to_have_count(1)
    await expect(delete_item).to_have_count(1)
    # What the call will do, and the conversation that led there.
    await expect(echo_item.locator(".tool")).to_have_text("run_command")
    await expect(echo_item.locator("pre.arguments")).to_have_text('{"command": "echo hi"}')
    await expect(echo_item).to_contain_text("run: echo hi")
    await expect(delete_item.locator(".tool")).to_have_text("delete_path")
    await expect(delete_item).to_contain_text("Please delete the logs folder")
    await expect(echo_item.get_by_role("link", name=echo.id)).to_have_attribute(
        "href", f"/runs/{echo.id}"
    )
    since = await echo_item.locator("[data-waiting-since]").get_attribute("data-waiting-since")
    assert since and datetime.fromisoformat(since).tzinfo is not None
    await expect(echo_item.get_by_label("Arguments")).to_have_value('{"command": "echo hi"}')
    await expect(echo_item.get_by_label("Remember for this run")).not_to_be_checked()
    # Newest wait first.
    ids = await page.locator("[data-call-id]").evaluate_all(
        "els => els.map(e => e.getAttribute('data-workflow-id'))"
    )
    assert ids.index(delete.id) < ids.index(echo.id)

    await echo_item.get_by_role("button", name="Approve").click()
    result = await echo.result()
    assert result.finish_reason == "stop"
    tool = next(m for m in result.messages if m.role == "tool")
    assert '"stdout": "hi\\n"' in tool.content
    [answer] = await approvals(echo)
    assert answer.approved and answer.approver == "alice"
    await expect(echo_item).to_have_count(0)

    await delete_item.get_by_label("Reason").fill("keep the logs")
    await delete_item.get_by_role("button", name="Reject").click()
    result = await delete.result()
    assert [m.content for m in result.messages if m.role == "tool"][-1] == "Rejected: keep the logs"
    assert (worker.workspace / "logs" / "old.log").exists()
    [answer] = await approvals(delete)
    assert not answer.approved and answer.approver == "alice"
    await expect(delete_item).to_have_count(0)


async def test_ask_again_on_an_expired_call_then_reject_it(
    client: Client, worker: Worker, page: Page
) -> None:
    """The approval timeout passed: the inbox shows the call as expired, with `Ask again` and
    no `Approve`; asking again reopens it (as the signed-in user); expired again, it is
    rejected from its card."""
    options = AgentRunOptions(approval_timeout_seconds=1)  # expire: the default of new runs
    handle = await start(client, worker, "run: echo again", options)
    st = await wait_for_phase(handle, "approval_expired")
    [call_id] = st.expired
    await page.goto("/")
    item = call_of(page, handle.id, call_id)
    await expect(item).to_have_attribute("data-expired", "true")
    await expect(item.locator(".expired-label")).to_have_text("expired")
    await expect(item.get_by_role("button", name="Approve")).to_have_count(0)
    await item.get_by_role("button", name="Ask again").click()
    await expect(page.locator("#notes")).to_have_text(f"{call_id} asked again")
    [reopened] = of_type(await events(handle), "approval_reopened")
    assert (reopened.call_id, reopened.approver) == (call_id, "alice")

    async def expired_again() -> bool:
        return len(of_type(await events(handle), "approval_expired")) == 2

    await wait_until(expired_again)
    await expect(item).to_have_attribute("data-expired", "true")
    await item.get_by_label("Reason").fill("too late now")
    await item.get_by_role("button", name="Reject").click()
    result = await handle.result()
    assert [m.content for m in result.messages if m.role == "tool"] == ["Rejected: too late now"]
    [answer] = await approvals(handle)
    assert not answer.approved and answer.approver == "alice"


async def test_the_inbox_updates_itself_when_runs_start_and_stop_waiting_elsewhere(
    client: Client, worker: Worker, page: Page
) -> None:
    await page.goto("/")
    handle = await start(client, worker, "run: echo elsewhere")
    item = call_of(page, handle.id)
    await expect(item).to_have_count(1)  # no reload
    call_id = await waiting_call(handle)
    await handle.execute_update(
        "submit_approval", {"call_id": call_id, "approved": True, "approver": "carol"}
    )
    await expect(item).to_have_count(0)
    assert (await handle.result()).finish_reason == "stop"


async def test_arguments_are_shown_with_invisible_characters_made_visible(
    client: Client, worker: Worker, page: Page
) -> None:
    sneaky = "echo \u202eabc\x1b[2J"
    said = "I will run this for you. " + "x" * 600
    worker.fake.enqueue(
        tool_calls(("call_x", "run_command", json.dumps({"command": sneaky})), content=said),
        text("ok"),
    )
    prompt = "please " + "y" * 600
    handle = await start(client, worker, prompt)
    call_id = await waiting_call(handle)
    await page.goto("/")
    item = call_of(page, handle.id, call_id)
    # The context: in full up to 500 characters, then cut with an ellipsis.
    await expect(item.locator(".first-user")).to_have_text(prompt[:500] + "…")
    await expect(item.locator(".round-text")).to_have_text(said[:500] + "…")
    shown = '{"command": "echo \\u202eabc\\u001b[2J"}'
    await expect(item.locator("pre.arguments")).to_have_text(shown)
    await expect(item.get_by_label("Arguments")).to_have_value(shown)
    # The field's text is the same JSON value: approving unchanged sends no `arguments`.
    await item.get_by_role("button", name="Reject").click()
    assert (await handle.result()).finish_reason == "stop"
    [answer] = await approvals(handle)
    assert not answer.approved


async def test_a_stale_answer_shows_the_workflows_reason(
    client: Client, worker: Worker, page: Page
) -> None:
    stale = await start(client, worker, "run: echo stale")
    stale_call = await waiting_call(stale)
    other = await start(client, worker, "run: echo other")
    other_call = await waiting_call(other)
    await page.goto("/")
    await expect(call_of(page, stale.id, stale_call)).to_have_count(1)
    await expect(call_of(page, other.id, other_call)).to_have_count(1)
    # The page stops hearing from the server (a laptop asleep): what it shows goes stale.
    await page.route("**/inbox/live*", lambda route: route.abort())
    await stale.execute_update(
        "submit_approval", {"call_id": stale_call, "approved": True, "approver": "carol"}
    )
    await call_of(page, stale.id, stale_call).get_by_role("button", name="Reject").click()
    await expect(page.get_by_role("alert")).to_contain_text(
        f"call '{stale_call}' was already answered"
    )
    await expect(call_of(page, other.id, other_call)).to_have_count(1)
    [answer] = await approvals(stale)
    assert answer.approved and answer.approver == "carol"  # the stale rejection was not recorded
    assert (await stale.result()).finish_reason == "stop"
    # The run has finished meanwhile: answering it again is refused too, and says why.
    await call_of(page, stale.id, stale_call).get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("alert")).to_contain_text("has already finished")
    assert len(await approvals(stale)) == 1
    await page.unroute("**/inbox/live*")
    await call_of(page, other.id, other_call).get_by_role("button", name="Approve").click()
    assert (await other.result()).finish_reason == "stop"
    await expect(call_of(page, stale.id)).to_have_count(0)


async def test_start_a_run_and_watch_its_text_while_the_model_streams(
    client: Client, worker: Worker, served: Served, page: Page
) -> None:
    worker.fake.enqueue(Slow(chunks=40, delay=0.15, piece="tick "))
    await page.goto("/")
    await page.get_by_label("Prompt", exact=True).fill("tell me slowly")
    await page.get_by_role("button", name="Start run").click()
    await expect(page).to_have_url(re.compile(r"/runs/agent-[0-9a-f]+$"))
    workflow_id = page.url.rsplit("/", 1)[1]
    handle = client.get_workflow_handle(workflow_id, result_type=AgentRunResult)
    await expect(page.locator("#live-text")).to_contain_text("tick tick")
    # The model is still streaming: its reply is not yet in the run's event log.
    assert of_type(await events(handle), "text_delta") == []
    result = await handle.result()
    assert result.finish_reason == "stop"
    await expect(page.locator("[data-phase]")).to_have_attribute("data-phase", "finished")
    await expect(page.locator("[data-finish-reason]")).to_have_text("stop")
    await expect(page.locator("#conversation .assistant")).to_contain_text("tick " * 40)
    assert served.polls.most[workflow_id] == 1


async def test_start_a_run_with_a_system_prompt(client: Client, page: Page) -> None:
    await page.goto("/")
    await page.get_by_label("Prompt", exact=True).fill("list")
    await page.get_by_label("System prompt").fill("Answer in one line.")
    await page.get_by_role("button", name="Start run").click()
    await expect(page).to_have_url(re.compile(r"/runs/agent-[0-9a-f]+$"))
    handle = client.get_workflow_handle(page.url.rsplit("/", 1)[1], result_type=AgentRunResult)
    result = await handle.result()
    assert [(m.role, m.content) for m in result.messages[:2]] == [
        ("system", "Answer in one line."),
        ("user", "list"),
    ]
    await expect(page.locator("[data-finish-reason]")).to_have_text("stop")


async def test_cancel_run_from_its_page(client: Client, worker: Worker, page: Page) -> None:
    worker.fake.enqueue(Slow(chunks=600, delay=0.1, piece="tock "))
    handle = await start(client, worker, "a long story")
    await page.goto(f"/runs/{handle.id}")
    await expect(page.locator("#live-text")).to_contain_text("tock")
    await page.get_by_role("button", name="Cancel run").click()
    result = await handle.result()
    assert result.finish_reason == "cancelled"
    await expect(page.locator("[data-phase]")).to_have_attribute("data-phase", "finished")
    await expect(page.locator("[data-finish-reason]")).to_have_text("cancelled")
    [sent] = await signals_sent(client, handle.id, "cancel")
    assert (sent["immediate"], sent["requested_by"]) == (True, "alice")  # the signed-in user


async def test_send_a_message_to_a_session(client: Client, worker: Worker, page: Page) -> None:
    handle = await start(client, worker, "hello", AgentRunOptions(keep_alive=True))
    await wait_for_phase(handle, "waiting_for_message")
    await page.goto(f"/runs/{handle.id}")
    await expect(page.locator("[data-phase]")).to_have_attribute(
        "data-phase", "waiting_for_message"
    )
    await page.get_by_label("Message").fill("run: echo again")
    await page.get_by_role("button", name="Send").click()
    item = page.locator(f'[data-workflow-id="{handle.id}"][data-call-id]')
    await expect(item).to_have_count(1)
    await item.get_by_role("button", name="Approve").click()
    await wait_for_phase(handle, "waiting_for_message")
    await page.get_by_role("button", name="Cancel run").click()
    assert (await handle.result()).finish_reason == "cancelled"


async def test_twenty_pages_on_one_run_cost_one_long_poll_and_an_answer_lands(
    client: Client, worker: Worker, served: Served, context: tuple[BrowserContext, Requests]
) -> None:
    ctx, _ = context
    handle = await start(client, worker, "run: echo crowd")
    call_id = await waiting_call(handle)
    pages = [await ctx.new_page() for _ in range(20)]
    try:
        for viewer in pages:
            await viewer.goto(f"/runs/{handle.id}")
        for viewer in pages:
            await expect(call_of(viewer, handle.id, call_id)).to_have_count(1)
        await call_of(pages[-1], handle.id, call_id).get_by_role("button", name="Approve").click()
        result = await handle.result()
        assert result.finish_reason == "stop"
        for viewer in pages:
            await expect(viewer.locator("[data-phase]")).to_have_attribute("data-phase", "finished")
            await expect(viewer.locator("#events")).to_contain_text("finished")
        [answer] = await approvals(handle)
        assert answer.approver == "alice"
        assert served.polls.most[handle.id] == 1
    finally:
        for viewer in pages:
            await viewer.close()


async def test_edit_arguments_before_approving(client: Client, worker: Worker, page: Page) -> None:
    handle = await start(client, worker, "run: echo original")
    call_id = await waiting_call(handle)
    await page.goto(f"/runs/{handle.id}")
    item = call_of(page, handle.id, call_id)
    await item.get_by_label("Arguments").fill('{"command": "echo edited"}')
    await item.get_by_role("button", name="Approve").click()
    assert await outcome(page, item) == []  # no refusal
    result = await handle.result()
    tool = next(m for m in result.messages if m.role == "tool")
    assert '"stdout": "edited\\n"' in tool.content


async def test_remember_for_this_run(client: Client, worker: Worker, page: Page) -> None:
    worker.fake.enqueue(
        tool_calls(("call_a", "run_command", '{"command": "echo one"}')),
        tool_calls(("call_b", "run_command", '{"command": "echo two"}')),
        text("both ran"),
    )
    handle = await start(client, worker, "two commands")
    call_id = await waiting_call(handle)
    await page.goto("/")
    item = call_of(page, handle.id, call_id)
    await item.get_by_label("Remember for this run").check()
    await item.get_by_role("button", name="Approve").click()
    assert await outcome(page, item) == []  # no refusal
    result = await handle.result()
    assert result.finish_reason == "stop"
    tools = [m for m in result.messages if m.role == "tool"]
    assert ['"exit_code": 0' in m.content for m in tools] == [True, True]
    waits = of_type(await events(handle), "awaiting_approval")
    assert len(waits) == 1  # the second command was decided by the remembered answer


async def test_an_answer_sends_arguments_only_when_edited_and_remember_when_ticked(
    client: Client, worker: Worker, page: Page
) -> None:
    """What the page sends for each answer (the `approvals` request bodies, as they leave)."""
    sent: list[dict[str, Any]] = []

    async def record(route: Any) -> None:
        sent.append(json.loads(route.request.post_data or "null"))
        await route.continue_()

    await page.route("**/api/runs/*/approvals", record)
    try:
        plain = await start(client, worker, "run: echo plain")
        plain_call = await waiting_call(plain)
        edited = await start(client, worker, "run: echo before")
        edited_call = await waiting_call(edited)
        refused = await start(client, worker, "run: echo refused")
        refused_call = await waiting_call(refused)
        await page.goto("/")
        item = call_of(page, plain.id, plain_call)
        await item.get_by_label("Reason").fill("looks fine")
        await item.get_by_role("button", name="Approve").click()
        assert (await plain.result()).finish_reason == "stop"
        item = call_of(page, edited.id, edited_call)
        await item.get_by_label("Arguments").fill('{"command": "echo after"}')
        await item.get_by_label("Remember for this run").check()
        await item.get_by_role("button", name="Approve").click()
        await wait_until(lambda: len(sent) == 2)
        item = call_of(page, refused.id, refused_call)
        await item.get_by_label("Arguments").fill('{"command": "echo other"}')
        await item.get_by_role("button", name="Reject").click()
        await wait_until(lambda: len(sent) == 3)
        # Both runs end before the next test: a model call of theirs still to come would take
        # the reply the next test puts on the shared fake model server.
        assert (await edited.result()).finish_reason == "stop"
        assert (await refused.result()).finish_reason == "stop"
    finally:
        await page.unroute("**/api/runs/*/approvals")
    # Every answer names the run and the arguments it was shown (the model's, also when the
    # person edited them), so it cannot land on another run or another call.
    assert sent == [
        {
            "call_id": plain_call,
            "approved": True,
            "reason": "looks fine",
            "run_id": plain.result_run_id,
            "arguments_sha256": arguments_digest('{"command": "echo plain"}'),
        },
        {
            "call_id": edited_call,
            "approved": True,
            "arguments": '{"command": "echo after"}',
            "remember": True,
            "run_id": edited.result_run_id,
            "arguments_sha256": arguments_digest('{"command": "echo before"}'),
        },
        {  # a rejection runs nothing: no arguments
            "call_id": refused_call,
            "approved": False,
            "run_id": refused.result_run_id,
            "arguments_sha256": arguments_digest('{"command": "echo refused"}'),
        },
    ]


async def test_an_answer_to_a_run_that_replaced_the_one_shown_is_refused(
    client: Client, worker: Worker, page: Page
) -> None:
    """The card shows `ls -la`; meanwhile another run takes the workflow id and waits on `rm -rf
    important` under the same call id. Approve on the card must not run the other call."""
    important = worker.workspace / "important"
    important.mkdir(exist_ok=True)
    (important / "keep.txt").write_text("keep me\n")
    workflow_id = f"agent-web-{uuid.uuid4().hex[:10]}"
    worker.fake.enqueue(tool_calls(("call_1", "run_command", '{"command": "ls -la"}')))
    shown = await start(client, worker, "look around", workflow_id=workflow_id)
    call_id = await waiting_call(shown)
    await page.goto("/")
    item = call_of(page, workflow_id, call_id)
    await expect(item.locator("pre.arguments")).to_have_text('{"command": "ls -la"}')
    await page.route("**/inbox/live*", lambda route: route.abort())  # the card stays as shown
    try:
        await shown.terminate("replaced")
        worker.fake.enqueue(
            tool_calls(("call_1", "run_command", '{"command": "rm -rf important"}')),
            text("removed"),
        )
        replaced = await start(client, worker, "clean up", workflow_id=workflow_id)
        assert await waiting_call(replaced) == call_id
        await item.get_by_role("button", name="Approve").click()
        await expect(page.get_by_role("alert")).to_contain_text("changed since it was shown")
    finally:
        await page.unroute("**/inbox/live*")
    assert (important / "keep.txt").exists()
    assert await approvals(replaced) == []  # nothing was recorded for the other run
    assert (await status_of(replaced)).phase == "awaiting_approval"


async def test_a_run_whose_workflow_id_has_slashes_opens_and_is_answered(
    client: Client, worker: Worker, page: Page
) -> None:
    workflow_id = f"team/web/{uuid.uuid4().hex[:8]}"
    handle = await start(client, worker, "run: echo slashes", workflow_id=workflow_id)
    call_id = await waiting_call(handle)
    await page.goto("/")
    await call_of(page, workflow_id, call_id).get_by_role("link", name=workflow_id).click()
    await expect(page).to_have_url(re.compile(r"/runs/team%2Fweb%2F[0-9a-f]+$"))
    await expect(page.locator("h1.run-title")).to_have_text(workflow_id)
    await call_of(page, workflow_id, call_id).get_by_role("button", name="Approve").click()
    assert (await handle.result()).finish_reason == "stop"
    await expect(page.locator("[data-finish-reason]")).to_have_text("stop")


async def test_the_pages_load_nothing_from_another_origin(
    client: Client, worker: Worker, served: Served, context: tuple[BrowserContext, Requests]
) -> None:
    ctx, requests = context
    viewer = await ctx.new_page()
    handle = await start(client, worker, "run: echo origins")
    await waiting_call(handle)
    await viewer.goto("/")
    await expect(call_of(viewer, handle.id)).to_have_count(1)
    await viewer.goto(f"/runs/{handle.id}")
    await expect(call_of(viewer, handle.id)).to_have_count(1)
    await call_of(viewer, handle.id).get_by_role("button", name="Approve").click()
    await handle.result()
    await viewer.close()
    # Every request of every page of this module, sign-in included.
    assert f"{served.url}/static/app.js" in requests
    assert f"{served.url}/static/app.css" in requests
    foreign = [u for u in requests if not u.startswith(served.url + "/")]
    assert foreign == [], foreign


async def test_the_inbox_as_the_docs_show_it(
    client: Client, worker: Worker, served: Served, page: Page
) -> None:
    """The picture in the README and docs/web-inbox.md is this page:
    `AGENT_SCREENSHOT_TO=docs/inbox.png ./run tests tests/web/test_browser.py -k as_the_docs`
    draws it again."""
    echo = await start(client, worker, "run: echo hi")
    delete = await start(client, worker, "Please delete the logs folder")
    calls = [await waiting_call(echo), await waiting_call(delete)]
    await page.set_viewport_size({"width": 1100, "height": 900})
    await page.goto("/")
    for handle, call_id in zip((echo, delete), calls, strict=True):
        await expect(call_of(page, handle.id, call_id)).to_have_count(1)
    drawn = await page.screenshot(full_page=True)
    assert drawn.startswith(b"\x89PNG") and len(drawn) > 10_000
    if target := os.environ.get("AGENT_SCREENSHOT_TO"):
        await asyncio.to_thread(Path(target).write_bytes, drawn)
