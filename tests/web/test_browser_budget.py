"""Budgets that ask, in a real headless Chromium: a run at its token budget is a card "used N of M
tokens" in the inbox and on its page, with a field `Grant tokens` and the buttons `Grant` and
`Stop run`; a bad number is refused with the workflow's or the server's reason and nothing
changes; a grant lets the run go on, a stop finishes it with reason `budget`."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Locator, Page, expect
from temporalio.client import Client, WorkflowHandle

from tests.fake_openai import tool_calls
from tests.helpers import events, of_type, wait_for_phase
from tests.web.conftest import Worker
from tests.web.test_browser import (  # noqa: F401 - the module's fixtures
    browser,
    context,
    page,
    served,
    start,
    tidy,
)
from workflows.model import AgentRunOptions

pytestmark = pytest.mark.web


def budget_card(shown: Page, workflow_id: str) -> Locator:
    return shown.locator(f'[data-workflow-id="{workflow_id}"][data-budget]')


async def at_budget(client: Client, worker: Worker, limit: int) -> WorkflowHandle[Any, Any]:
    """A run whose first reply (a call that runs without asking, 18 tokens) spends its budget."""
    worker.fake.enqueue(tool_calls(("call_1", "list_dir", '{"path": "."}')))
    handle = await start(client, worker, "list", AgentRunOptions(max_run_tokens=limit))
    await wait_for_phase(handle, "budget_exhausted")
    return handle


async def test_grant_from_the_inbox_card_lets_the_run_go_on(
    client: Client,
    worker: Worker,
    page: Page,  # noqa: F811 - the fixture
) -> None:
    handle = await at_budget(client, worker, 10)
    await page.goto("/")
    card = budget_card(page, handle.id)
    await expect(card).to_have_count(1)
    await expect(card.locator(".used")).to_have_text("used 18 of 10 tokens")
    await expect(card).to_contain_text("list")  # what the run was asked

    alert = page.get_by_role("alert")
    for bad in ("0", "many", "-5"):
        await card.get_by_label("Grant tokens").fill(bad)
        await card.get_by_role("button", name="Grant").click()
        await expect(alert).to_have_text(f"{handle.id}: tokens must be a whole number from 1")
    status = await wait_for_phase(handle, "budget_exhausted")
    assert status.budget is not None and status.budget.limit == 10  # nothing changed

    await card.get_by_label("Grant tokens").fill("500")
    await card.get_by_role("button", name="Grant").click()
    await expect(card).to_have_count(0)
    await expect(alert).to_have_count(0)
    assert (await handle.result()).finish_reason == "stop"
    (granted,) = of_type(await events(handle), "budget_granted")
    assert granted.tokens == 500 and granted.limit == 510 and granted.approver == "alice"
    # in the audit of its page, and counted on the runs page
    await page.goto(f"/runs/{handle.id}")
    decision = page.locator('[data-audit-call-id="budget"]')
    await expect(decision.locator(".verdict")).to_have_text("granted")
    await expect(decision).to_contain_text("person alice")
    await expect(page.locator(".audit-counts")).to_contain_text("tokens granted 500")
    await page.goto(f"/runs?q={handle.id}")
    await expect(page.locator(f'[data-workflow-id="{handle.id}"] [data-granted]')).to_have_text(
        "(500 granted)"
    )


async def test_stop_run_on_the_run_page_finishes_it_with_reason_budget(
    client: Client,
    worker: Worker,
    page: Page,  # noqa: F811 - the fixture
) -> None:
    handle = await at_budget(client, worker, 5)
    await page.goto(f"/runs/{handle.id}")
    card = budget_card(page, handle.id)
    await expect(card.locator(".used")).to_have_text("used 18 of 5 tokens")
    await expect(page.locator("#phase [data-phase]")).to_have_text("budget_exhausted")
    await card.get_by_role("button", name="Stop run").click()
    result = await handle.result()
    assert result.finish_reason == "budget" and result.error is None
    (stopped,) = of_type(await events(handle), "budget_stopped")
    assert stopped.approver == "alice"
    await expect(page.locator("[data-finish-reason]")).to_have_text("budget")
    await expect(card).to_have_count(0)
