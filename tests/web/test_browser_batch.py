"""Answering several calls at once, in a real headless Chromium: each inbox card has a checkbox
`Select`; `Approve selected` and `Reject selected` send each selected call its own bound answer
(the request its card's own button sends), and a call the workflow refuses says why while the
others still go."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Page, expect
from temporalio.client import Client, WorkflowHandle

from tests.fake_openai import tool_calls
from tests.helpers import events, of_type
from tests.web.conftest import Worker
from tests.web.test_browser import (  # noqa: F401 - the module's fixtures
    browser,
    call_of,
    context,
    page,
    served,
    start,
    tidy,
    waiting_call,
)

pytestmark = pytest.mark.web


async def two_calls_and_one_more(
    client: Client, worker: Worker
) -> tuple[WorkflowHandle[Any, Any], WorkflowHandle[Any, Any]]:
    """One run waiting for two calls (one reply), and another run waiting for one."""
    worker.fake.enqueue(
        tool_calls(
            ("call_a", "run_command", '{"command": "echo a"}'),
            ("call_b", "run_command", '{"command": "echo b"}'),
        )
    )
    pair = await start(client, worker, "two commands")
    await waiting_call(pair)
    single = await start(client, worker, "run: echo c")
    await waiting_call(single)
    return pair, single


async def answers(handle: WorkflowHandle[Any, Any]) -> dict[str, tuple[bool, str | None]]:
    return {e.call_id: (e.approved, e.approver) for e in of_type(await events(handle), "approval")}


async def test_approve_selected_answers_each_selected_call(
    client: Client,
    worker: Worker,
    page: Page,  # noqa: F811 - the fixture
) -> None:
    pair, single = await two_calls_and_one_more(client, worker)
    await page.goto("/")
    a, b = call_of(page, pair.id, "call_a"), call_of(page, pair.id, "call_b")
    c = call_of(page, single.id, await waiting_call(single))
    for card in (a, b, c):
        await expect(card).to_have_count(1)
    await a.get_by_label("Select").check()
    await c.get_by_label("Select").check()
    await page.get_by_role("button", name="Approve selected").click()
    await expect(a).to_have_count(0)
    await expect(c).to_have_count(0)
    assert (await single.result()).finish_reason == "stop"
    assert await answers(single) == {"call_1": (True, "alice")}
    assert await answers(pair) == {"call_a": (True, "alice")}  # call_b was not selected
    await expect(b).to_have_count(1)
    notes = page.locator("#notes p")
    await expect(notes).to_have_count(2)
    assert sorted(await notes.all_inner_texts()) == sorted(
        [f"{pair.id} call_a approved", f"{single.id} call_1 approved"]
    )

    await b.get_by_label("Select").check()
    await b.get_by_label("Reason").fill("not b")
    await page.get_by_role("button", name="Reject selected").click()
    result = await pair.result()
    assert result.finish_reason == "stop"
    tools = {m.tool_call_id: m.content for m in result.messages if m.role == "tool"}
    assert tools["call_b"] == "Rejected: not b" and '"stdout": "a\\n"' in tools["call_a"]


async def test_a_refused_call_in_the_batch_says_why_and_the_others_still_go(
    client: Client,
    worker: Worker,
    page: Page,  # noqa: F811 - the fixture
) -> None:
    pair, single = await two_calls_and_one_more(client, worker)
    await page.goto("/")
    a, b = call_of(page, pair.id, "call_a"), call_of(page, pair.id, "call_b")
    c = call_of(page, single.id, await waiting_call(single))
    for card in (a, b, c):
        await card.get_by_label("Select").check()
    # call_b's card claims other arguments than the call has (as if they changed since shown)
    await b.locator('input[name="arguments_sha256"]').evaluate("el => el.value = '0'.repeat(64)")
    await page.get_by_role("button", name="Reject selected").click()
    alert = page.get_by_role("alert")
    await expect(alert).to_have_count(1)
    await expect(alert).to_contain_text(f"{pair.id} call_b: ")
    await expect(alert).to_contain_text("arguments")
    await expect(a).to_have_count(0)
    await expect(c).to_have_count(0)
    await expect(b).to_have_count(1)  # still waiting, still selected
    await expect(b.get_by_label("Select")).to_be_checked()
    assert (await single.result()).finish_reason == "stop"
    assert await answers(single) == {"call_1": (False, "alice")}
    assert await answers(pair) == {"call_a": (False, "alice")}

    await page.goto("/")  # call_b's card as the server shows it
    await b.get_by_label("Select").check()
    await page.get_by_role("button", name="Reject selected").click()
    assert (await pair.result()).finish_reason == "stop"
    assert await answers(pair) == {"call_a": (False, "alice"), "call_b": (False, "alice")}
