"""Questions (`ask_user`) in the web app, against the dev server and a production worker whose
model answers as the scripted assistant: `POST /api/runs/{id}/answers` over real HTTP with a
bearer-token user (refusals are 4xx with the reason and change nothing), and the inbox's question
card in a real headless Chromium (radio buttons, checkboxes, a text field labelled `Answer`, the
button `Send answer`); the answer reaches the model as the tool's result."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from playwright.async_api import Page, expect
from temporalio.client import Client, WorkflowHandle

from tests.helpers import events, of_type, wait_for_phase, wait_until
from tests.web import test_browser
from tests.web.conftest import Served, Worker
from workflows.model import AgentRunOptions, AgentRunResult

pytestmark = pytest.mark.web

served = test_browser.served
browser = test_browser.browser
context = test_browser.context
page = test_browser.page
tidy = test_browser.tidy

ASK = "ask me: Which folder should I clean up next? (options: tmp, logs)"


async def asking(
    client: Client, worker: Worker, prompt: str = ASK
) -> WorkflowHandle[Any, AgentRunResult]:
    handle = await test_browser.start(client, worker, prompt, AgentRunOptions(ask_user=True))
    status = await wait_for_phase(handle, "awaiting_answer")
    assert [q.call_id for q in status.pending_questions] == ["call_1"]
    return handle


def answer_of(result: AgentRunResult) -> Any:
    tool = next(m for m in result.messages if m.role == "tool")
    return json.loads(tool.content)["data"]["answer"]


async def test_a_bearer_token_answers_a_question_and_refusals_change_nothing(
    client: Client, worker: Worker, served: Served
) -> None:
    handle = await asking(client, worker)
    url = f"/api/runs/{handle.id}/answers"
    auth = {"Authorization": f"Bearer {served.token}"}
    async with httpx.AsyncClient(base_url=served.url, headers=auth) as http:

        async def listed() -> Any:
            runs = (await http.get("/api/pending")).json()
            return next((r for r in runs if r["workflow_id"] == handle.id), None)

        mine = await wait_until(listed)
        assert mine["questions"][0]["options"] == ["tmp", "logs"]
        chosen = await http.post(url, json={"call_id": "call_1", "answer": "tmp", "approver": "x"})
        assert chosen.status_code == 400 and "approver" in chosen.json()["error"]
        shapeless = await http.post(url, json={"call_id": "call_1"})
        assert shapeless.status_code == 400 and "answer" in shapeless.json()["error"]
        other = await http.post(url, json={"call_id": "call_1", "answer": "home"})
        assert other.status_code == 409
        assert other.json() == {"error": "'home' is not one of the options: tmp, logs"}
        unknown = await http.post(url, json={"call_id": "call_9", "answer": "tmp"})
        assert unknown.status_code == 409
        assert unknown.json() == {"error": "unknown question 'call_9' (waiting: call_1)"}
        assert of_type(await events(handle), "answer") == []  # nothing recorded
        taken = await http.post(url, json={"call_id": "call_1", "answer": "logs"})
        assert taken.status_code == 200 and taken.json() == {"questions": []}
        result = await handle.result()
        again = await http.post(url, json={"call_id": "call_1", "answer": "logs"})
        assert again.status_code == 409, again.text
    assert answer_of(result) == "logs"
    assert result.messages[-1].content == "You answered: logs"
    [answer] = of_type(await events(handle), "answer")
    assert answer.approver == "alice"


async def test_the_inbox_shows_the_question_and_sends_the_answer(
    client: Client, worker: Worker, page: Page
) -> None:
    single = await asking(client, worker)
    await page.goto("/")
    card = test_browser.call_of(page, single.id, "call_1")
    await expect(card).to_have_count(1)
    await expect(card.locator(".question-text")).to_have_text(
        "Which folder should I clean up next?"
    )
    await expect(card.get_by_role("radio")).to_have_count(2)
    await expect(card.get_by_role("group", name="Answer")).to_have_count(1)
    await card.get_by_role("radio", name="logs").check()
    await card.get_by_role("button", name="Send answer").click()
    result = await single.result()
    assert answer_of(result) == "logs"
    [answer] = of_type(await events(single), "answer")
    assert answer.approver == "alice"
    await expect(card).to_have_count(0)

    several = await asking(client, worker, "ask me: Which ones? (any of: tmp, logs, notes)")
    free = await asking(client, worker, "ask me: What should the report be called?")
    await page.goto("/")
    card = test_browser.call_of(page, several.id, "call_1")
    await expect(card.get_by_role("checkbox")).to_have_count(3)
    await card.get_by_role("checkbox", name="notes").check()
    await card.get_by_role("checkbox", name="tmp").check()
    await card.get_by_role("button", name="Send answer").click()
    assert answer_of(await several.result()) == ["tmp", "notes"]

    card = test_browser.call_of(page, free.id, "call_1")
    await card.get_by_label("Answer").fill("weekly report")
    await card.get_by_role("button", name="Send answer").click()
    result = await free.result()
    assert answer_of(result) == "weekly report"
    assert result.messages[-1].content == "You answered: weekly report"


async def test_an_expired_question_shows_ask_again_and_refuses_an_answer(
    client: Client, worker: Worker, served: Served, page: Page
) -> None:
    """The approval timeout passed: the question's card says `expired` and has `Ask again` and
    no `Send answer`; an answer over the API is refused (409, the reason); asking again from the
    card reopens it as the signed-in user."""
    options = AgentRunOptions(ask_user=True, approval_timeout_seconds=1)  # expire: the default
    handle = await test_browser.start(client, worker, ASK, options)
    st = await wait_for_phase(handle, "approval_expired")
    assert st.expired == ["call_1"]
    auth = {"Authorization": f"Bearer {served.token}"}
    async with httpx.AsyncClient(base_url=served.url, headers=auth) as http:
        late = await http.post(
            f"/api/runs/{handle.id}/answers", json={"call_id": "call_1", "answer": "tmp"}
        )
    assert late.status_code == 409
    assert late.json()["error"].startswith("question 'call_1' has expired: ask again first")
    await page.goto("/")
    card = test_browser.call_of(page, handle.id, "call_1")
    await expect(card).to_have_attribute("data-expired", "true")
    await expect(card.locator(".expired-label")).to_have_text("expired")
    await expect(card.get_by_role("button", name="Send answer")).to_have_count(0)
    await card.get_by_role("button", name="Ask again").click()
    await expect(page.locator("#notes")).to_have_text("call_1 asked again")
    [reopened] = of_type(await events(handle), "approval_reopened")
    assert (reopened.call_id, reopened.approver) == ("call_1", "alice")
    assert of_type(await events(handle), "answer") == []
