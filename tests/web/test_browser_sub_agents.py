"""Sub-agents in a real headless Chromium, against the dev server and a production worker whose
model is the scripted OpenAI-compatible server (it answers the parent and the sub-agent by
their own conversations): a sub-agent's call waits in the inbox on a card naming its parent and
task, is answered there on the sub-agent, and `/runs` lists the sub-agent under its parent."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.async_api import Page, expect
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from tests.helpers import events, of_type, status, wait_for_phase, wait_until
from tests.web.conftest import Served, Worker
from tests.web.test_browser import (  # noqa: F401 - the module's fixtures
    _started,
    browser,
    call_of,
    context,
    page,
    served,
    start,
    tidy,
)
from workflows.model import AgentRunOptions, AgentRunResult

pytestmark = pytest.mark.web


async def started_child(client: Client, workflow_id: str) -> WorkflowHandle[Any, AgentRunResult]:
    handle = client.get_workflow_handle(workflow_id, result_type=AgentRunResult)

    async def exists() -> bool:
        try:
            await handle.describe()
        except RPCError:
            return False
        return True

    await wait_until(exists)
    _started.append(handle)  # terminated after the test if it fails midway
    return handle


async def test_a_sub_agents_call_is_answered_in_the_inbox_under_its_parent(
    client: Client,
    worker: Worker,
    page: Page,  # noqa: F811 - the fixture
) -> None:
    task = "delete the logs folder"
    parent = await start(client, worker, f"delegate: {task}", AgentRunOptions(sub_agents=True))
    child = await started_child(client, f"{parent.id}.call_1")
    waiting = await wait_for_phase(child, "awaiting_approval")
    [call] = waiting.pending_approvals
    assert call.name == "delete_path"

    await page.goto("/")
    card = call_of(page, child.id, call.id)
    await expect(card).to_be_visible()
    named = card.locator(".parent")
    await expect(named).to_have_text(f"sub-agent of {parent.id} (call call_1): {task}")
    await expect(named).to_have_attribute("data-parent-workflow-id", parent.id)
    await expect(named.get_by_role("link", name=parent.id)).to_have_attribute(
        "href", f"/runs/{parent.id}"
    )
    await expect(call_of(page, parent.id)).to_have_count(0)  # the parent waits on its sub-agent

    # The runs page lists the sub-agent right under its parent.
    await page.goto("/runs")
    rows = page.locator("tr.run-row")
    await expect(page.locator(f'tr[data-workflow-id="{child.id}"]')).to_be_visible()
    ids = [await r.get_attribute("data-workflow-id") for r in await rows.all()]
    assert ids.index(child.id) == ids.index(parent.id) + 1
    child_row = page.locator(f'tr[data-workflow-id="{child.id}"]')
    await expect(child_row).to_have_attribute("data-parent-workflow-id", parent.id)
    await expect(child_row).to_have_attribute("data-status", "awaiting_approval")
    await expect(child_row.locator(".parent")).to_have_text(f"sub-agent of {parent.id}")
    parent_row = page.locator(f'tr[data-workflow-id="{parent.id}"]')
    await expect(parent_row).to_have_attribute("data-status", "waiting_for_sub_agents")

    # The parent's page names its sub-agent and shows its events.
    await page.goto(f"/runs/{parent.id}")
    await expect(page.locator(f'a.sub-agent[data-sub-agent="{child.id}"]')).to_have_attribute(
        "data-phase", "awaiting_approval"
    )
    lines = page.locator("#events li")
    await expect(
        lines.filter(has_text=f"sub_agent_started call_1 {child.id}: {task}")
    ).to_have_count(1)
    await expect(
        lines.filter(has_text=f"sub_agent_waiting call_1 {child.id} waits for")
    ).to_have_count(1)

    # Answered on the card: the sub-agent runs its delete, the parent takes its answer.
    await page.goto("/")
    await card.get_by_role("button", name="Approve").click()
    await expect(card).to_have_count(0)
    result = await parent.result()
    assert result.finish_reason == "stop"
    assert not (worker.workspace / "logs").exists()
    [approved] = of_type(await events(child), "approval")
    assert (approved.call_id, approved.approver) == (call.id, "alice")
    assert f"Sub-agent {child.id} answered: Deleted logs." in result.messages[-1].content
    await page.goto(f"/runs/{parent.id}")
    await expect(
        lines.filter(has_text=f"sub_agent_finished call_1 {child.id}: stop")
    ).to_have_count(1)
    audit = page.locator(f'#audit li[data-sub-agent="{child.id}"]')
    await expect(audit).to_have_count(1)
    await expect(audit.locator(".by")).to_have_text("person alice")
    assert (await status(parent)).sub_agents == []


async def test_a_start_from_the_web_may_offer_delegate_but_never_claim_a_parent(
    client: Client,
    worker: Worker,
    served: Served,  # noqa: F811 - the fixture
) -> None:
    auth = {"Authorization": f"Bearer {served.token}"}
    async with httpx.AsyncClient(base_url=served.url, headers=auth, timeout=30) as http:
        forged = {"workflow_id": "x", "run_id": "r", "call_id": "c"}
        refused = await http.post(
            "/api/runs", json={"prompt": "list", "options": {"parent": forged}}
        )
        assert refused.status_code == 400
        assert refused.json() == {"error": "unknown option 'parent'"}
        started = await http.post(
            "/api/runs", json={"prompt": "delegate: list", "options": {"sub_agents": True}}
        )
        assert started.status_code == 201, started.text
    workflow_id = started.json()["workflow_id"]
    result = await client.get_workflow_handle(workflow_id, result_type=AgentRunResult).result()
    assert result.finish_reason == "stop"
    said = result.messages[-1].content
    assert said.startswith(f"Sub-agent {workflow_id}.call_1 answered: The "), said
