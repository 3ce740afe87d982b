"""Two people means two people, in the web inbox (a real headless Chromium, the web app on
127.0.0.1, a production worker on the dev server): three people sign in with passwords, and the
approvers file (keys made by `ssh-keygen -t ed25519 -N ""`) lets the web app's signing service
sign for each of them: ann and ben of ops, dora of dev. The header shows each person's groups as
the approvers file has them. A call under a run's rule that needs two of ops offers Approve and
Reject to ann and ben only; dora's card says who may and why not her. Ann's approval counts 1 of
2 with her reason shown; her second answer (from a page that did not hear of the first) is
refused, beside that card, naming the run; ben's approval completes it, the delete runs, and the
run's page shows each vote with its reason. A run at its token budget, where only ops may grant
(AGENT_BUDGET_GROUPS), offers Grant and Stop run to ann only; a question says anyone may answer."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Locator, Page, async_playwright, expect
from temporalio.client import Client, WorkflowHandle

from runtime.settings import Settings
from starter.web.auth import add_user
from tests.fake_openai import FakeOpenAI, FakeOpenAIServer, tool_calls
from tests.helpers import events, of_type, wait_for_phase
from tests.people import People, make_people
from tests.web.conftest import CHROMIUM, PASSWORD, Served, serve_web
from worker import run_worker
from workflows.contract.rules import ApprovalPolicy, Approvers, PolicyRule
from workflows.model import AgentRunInput, AgentRunOptions, AgentRunResult

pytestmark = pytest.mark.web

expect.set_options(timeout=20_000)

TWO_OF_OPS = ApprovalPolicy(
    rules=[
        PolicyRule(tool="list_dir", decision="allow"),
        PolicyRule(
            tool="delete_path", decision="ask", approvers=Approvers(groups=("ops",), count=2)
        ),
    ]
)


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> People:
    """ann and ben of ops, dora of dev, each signing through the web app's service `web`, whose
    key ssh-keygen makes."""
    return make_people(
        tmp_path_factory.mktemp("people"),
        {"ann": ["ops"], "ben": ["ops"], "dora": ["dev"]},
        via={"web": ["ann", "ben", "dora"]},
        keygen=True,
        own_keys=False,
    )


@pytest.fixture(scope="module")
async def ops_worker(
    client: Client, people: People, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[str, FakeOpenAIServer, Path]]:
    """A production worker with the approvers file, where only ops may grant tokens; its queue,
    model and workspace."""
    tmp = tmp_path_factory.mktemp("people-worker")
    workspace = tmp / "ws"
    workspace.mkdir()
    queue = f"people-{uuid.uuid4()}"
    with FakeOpenAI() as fake:
        settings = Settings(
            llm_base_url=fake.base_url,
            llm_api_key="sk-test",
            llm_model="fake-model",
            workspace=workspace,
            state_dir=tmp / "state",
            approvers_file=people.path,
            budget_groups=("ops",),
        )
        stop, ready = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(
            run_worker(client, settings, queue=queue, stop=stop, ready=lambda _q: ready.set())
        )
        await asyncio.wait_for(ready.wait(), 30)
        try:
            yield queue, fake, workspace
        finally:
            stop.set()
            await task


@pytest.fixture(scope="module")
async def web(
    client: Client,
    people: People,
    ops_worker: tuple[str, FakeOpenAIServer, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Served]:
    """The web app holding the service's key (AGENT_WEB_SIGNING_KEY), with ann, ben and dora
    signing in with passwords (the users file gives them no groups)."""
    async with serve_web(
        client, ops_worker[0], tmp_path_factory.mktemp("people-web"), signed_in=True
    ) as served:
        served.web.signing_key = people.key("web")
        assert served.users_file is not None
        for name in ("ann", "ben", "dora"):
            add_user(served.users_file, name, PASSWORD, with_token=False)
        yield served


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            await launched.close()


async def signed_in(browser: Browser, served: Served, name: str) -> Page:
    """A page of its own browser context, signed in as `name`, on the inbox."""
    page = await (await browser.new_context(base_url=served.url)).new_page()
    await page.goto("/signin")
    await page.get_by_label("Username").fill(name)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page).to_have_url(served.url + "/")
    return page


async def start(
    client: Client, queue: str, prompt: str, options: AgentRunOptions
) -> WorkflowHandle[Any, AgentRunResult]:
    return await client.start_workflow(
        "AgentWorkflow",
        AgentRunInput.from_prompt(prompt, options),
        id=f"agent-people-{uuid.uuid4().hex[:10]}",
        task_queue=queue,
        result_type=AgentRunResult,
    )


def card_of(page: Page, workflow_id: str, call_id: str | None = None) -> Locator:
    selector = f'article[data-workflow-id="{workflow_id}"]'
    selector += f'[data-call-id="{call_id}"]' if call_id else "[data-budget]"
    return page.locator(selector)


async def test_the_header_shows_the_signed_in_persons_groups_from_the_approvers_file(
    web: Served, browser: Browser
) -> None:
    for name, groups in (("ann", "ops"), ("dora", "dev")):
        page = await signed_in(browser, web, name)
        shown = page.locator("header.top .who .groups")
        await expect(shown).to_have_text(f"(groups: {groups})")
        await expect(shown).to_have_attribute("data-groups", groups)
        await page.context.close()
    alice = await signed_in(browser, web, "bob")  # in the users file, not in the approvers file
    await expect(alice.locator("header.top .who .groups")).to_have_text(
        "(not in the approvers file)"
    )
    await alice.context.close()


async def test_two_of_ops_in_the_inbox_each_vote_with_its_reason_and_one_person_counts_once(
    client: Client,
    web: Served,
    browser: Browser,
    ops_worker: tuple[str, FakeOpenAIServer, Path],
) -> None:
    queue, _fake, workspace = ops_worker
    (workspace / "logs").mkdir()
    (workspace / "logs" / "old.log").write_text("old\n")
    handle = await start(
        client, queue, "Please delete the logs folder", AgentRunOptions(approval_policy=TWO_OF_OPS)
    )
    status = await wait_for_phase(handle, "awaiting_approval")
    [call] = status.pending_approvals
    assert call.name == "delete_path"

    ann = await signed_in(browser, web, "ann")
    stale = await signed_in(browser, web, "ann")  # a second tab of ann's that goes stale
    dora = await signed_in(browser, web, "dora")
    try:
        mine, hers = card_of(ann, handle.id, call.id), card_of(dora, handle.id, call.id)
        await expect(mine.get_by_role("button", name="Approve")).to_have_count(1)
        await expect(mine.get_by_role("button", name="Reject")).to_have_count(1)
        await expect(mine.locator("p.who-may")).to_have_text("who may answer: 2 of ops")
        await expect(mine).to_have_attribute("data-who-may", "2 of ops")
        # dora (dev) sees the card, who may answer it and why not her: no Approve, no Reject
        await expect(hers.locator("p.who-may")).to_have_text(
            "who may answer: 2 of ops; you may not: you are in dev"
        )
        await expect(hers).to_have_attribute("data-may-answer", "false")
        await expect(hers.get_by_role("button", name="Approve")).to_have_count(0)
        await expect(hers.get_by_role("button", name="Reject")).to_have_count(0)
        await expect(hers.get_by_label("Select")).to_have_count(0)

        old = card_of(stale, handle.id, call.id)
        await expect(old.get_by_role("button", name="Approve")).to_have_count(1)
        await stale.route("**/inbox/live*", lambda route: route.abort())  # it hears no more

        await mine.get_by_label("Reason").fill("checked the folder")
        await mine.get_by_role("button", name="Approve").click()
        await expect(ann.locator("#notes")).to_have_text(
            f"{call.id}: approval counted, waiting for more approvers"
        )
        # the card comes back: ann's vote counts 1 of 2, with her reason; she may not answer again
        await expect(mine.locator("p.quorum")).to_have_text(
            "1 of 2 approvals: ann; who may answer: ops"
        )
        await expect(mine.locator("li.vote")).to_have_text(
            ["ann approved (1 of 2): checked the folder"]
        )
        await expect(mine.get_by_role("button", name="Approve")).to_have_count(0)
        await expect(mine.locator("p.who-may")).to_have_text(
            "who may answer: 2 of ops; you may not: you have approved it (the same person counts"
            " once)"
        )
        # dora's open page hears of the vote too
        await expect(hers.locator("li.vote")).to_have_text(
            ["ann approved (1 of 2): checked the folder"]
        )

        # ann again, from the tab that did not hear of her vote: refused beside that card
        await old.get_by_role("button", name="Approve").click()
        refusal = old.locator("[data-refusal]")
        await expect(refusal).to_have_text(
            f"{handle.id} {call.id}: ann has already answered call '{call.id}' (the same person"
            " counts once)"
        )
        await expect(refusal).to_have_attribute("role", "alert")
        await expect(stale.locator("#alerts")).to_have_text("")
        await expect(stale.get_by_role("alert")).to_have_count(1)
        assert [v.approver for v in of_type(await events(handle), "approval_vote")] == ["ann"]

        ben = await signed_in(browser, web, "ben")
        try:
            his = card_of(ben, handle.id, call.id)
            await expect(his.locator("p.who-may")).to_have_text("who may answer: 2 of ops")
            await his.get_by_label("Reason").fill("logs are archived")
            await his.get_by_role("button", name="Approve").click()
            await expect(ben.locator("#notes")).to_have_text(f"{call.id} approved")
            result = await handle.result()
            assert result.finish_reason == "stop"
            assert not (workspace / "logs").exists()  # the delete ran

            # the run's page: each vote with its reason, in the events and in the audit
            await ben.goto(f"/runs/{handle.id}")
            decision = ben.locator(f'[data-audit-call-id="{call.id}"]')
            await expect(decision.locator(".by")).to_have_text("people ann, ben")
            await expect(decision.locator(".reason")).to_have_text(
                ["ann: checked the folder", "ben: logs are archived"]
            )
            votes = ben.locator("#events li").filter(has_text="approval_vote")
            await expect(votes).to_have_count(2)
            await expect(votes.nth(0)).to_contain_text(
                f"approval_vote {call.id} approved by ann (ops): 1 of 2 approvals; reason: checked"
                " the folder"
            )
            await expect(votes.nth(1)).to_contain_text(
                f"approval_vote {call.id} approved by ben (ops): 2 of 2 approvals; reason: logs"
                " are archived"
            )
            decided = ben.locator("#events li").filter(has_text=f"approval {call.id} approved")
            await expect(decided).to_contain_text(
                f"approval {call.id} approved by ann, ben: ann: checked the folder; ben: logs are"
                " archived"
            )
        finally:
            await ben.context.close()
    finally:
        for page in (ann, stale, dora):
            await page.context.close()
    [approval] = [e for e in of_type(await events(handle), "approval") if e.call_id == call.id]
    assert approval.reasons == {"ann": "checked the folder", "ben": "logs are archived"}


async def test_a_budget_card_offers_grant_only_to_the_budget_groups_and_says_who_may(
    client: Client,
    web: Served,
    browser: Browser,
    ops_worker: tuple[str, FakeOpenAIServer, Path],
) -> None:
    queue, fake, _workspace = ops_worker
    fake.enqueue(tool_calls(("call_1", "list_dir", '{"path": "."}')))
    handle = await start(client, queue, "list", AgentRunOptions(max_run_tokens=5))
    await wait_for_phase(handle, "budget_exhausted")
    dora = await signed_in(browser, web, "dora")
    ann = await signed_in(browser, web, "ann")
    try:
        hers, mine = card_of(dora, handle.id), card_of(ann, handle.id)
        await expect(hers.locator("p.who-may")).to_have_text(
            "who may grant: ops; you may not: you are in dev"
        )
        await expect(hers.get_by_role("button", name="Grant")).to_have_count(0)
        await expect(hers.get_by_role("button", name="Stop run")).to_have_count(0)
        await expect(mine.locator("p.who-may")).to_have_text("who may grant: ops")
        await mine.get_by_role("button", name="Stop run").click()
        assert (await handle.result()).finish_reason == "budget"
    finally:
        await dora.context.close()
        await ann.context.close()
    [stopped] = of_type(await events(handle), "budget_stopped")
    assert stopped.approver == "ann"


async def test_a_question_card_says_anyone_may_answer(
    client: Client,
    web: Served,
    browser: Browser,
    ops_worker: tuple[str, FakeOpenAIServer, Path],
) -> None:
    queue, _fake, _workspace = ops_worker
    handle = await start(
        client, queue, "ask me: Which folder? (options: tmp, logs)", AgentRunOptions(ask_user=True)
    )
    await wait_for_phase(handle, "awaiting_answer")
    dora = await signed_in(browser, web, "dora")
    try:
        card = card_of(dora, handle.id, "call_1")
        await expect(card.locator("p.who-may")).to_have_text("who may answer: anyone")
        await card.get_by_label("tmp").check()
        await card.get_by_role("button", name="Send answer").click()
        assert (await handle.result()).finish_reason == "stop"
    finally:
        await dora.context.close()


async def test_a_web_app_without_its_key_says_so_on_the_card_and_in_the_refusal(
    client: Client,
    web: Served,
    browser: Browser,
    ops_worker: tuple[str, FakeOpenAIServer, Path],
) -> None:
    """The web app started without AGENT_WEB_SIGNING_KEY: ann's answers go unsigned, and the
    run refuses them under the two-of-ops rule. Her card says why she may not answer, and an
    answer sent anyway (the JSON API) is refused with the one line saying what is missing, not
    only `only ops may approve`, which ann is."""
    queue, _fake, workspace = ops_worker
    (workspace / "old").mkdir(exist_ok=True)
    handle = await start(
        client, queue, "Please delete the old folder", AgentRunOptions(approval_policy=TWO_OF_OPS)
    )
    status = await wait_for_phase(handle, "awaiting_approval")
    [call] = status.pending_approvals
    key = web.web.signing_key
    web.web.signing_key = None
    try:
        ann = await signed_in(browser, web, "ann")
        try:
            card = card_of(ann, handle.id, call.id)
            await expect(card.locator("p.who-may")).to_have_text(
                "who may answer: 2 of ops; you may not: this web app signs nothing"
                " (AGENT_WEB_SIGNING_KEY is not set)"
            )
            await expect(card.get_by_role("button", name="Approve")).to_have_count(0)
            sent = await ann.evaluate(
                """async ([url, body]) => {
                    const csrf = document.querySelector('meta[name="csrf-token"]').content;
                    const r = await fetch(url, {method: "POST", credentials: "same-origin",
                        headers: {"content-type": "application/json", "x-csrf-token": csrf},
                        body: JSON.stringify(body)});
                    return [r.status, await r.json()];
                }""",
                [f"/api/runs/{handle.id}/approvals", {"call_id": call.id, "approved": True}],
            )
        finally:
            await ann.context.close()
    finally:
        web.web.signing_key = key
    assert sent == [
        409,
        {
            "error": "only ops may approve delete_path, each with a signed answer (this one is"
            " not signed): this web app signs nothing (AGENT_WEB_SIGNING_KEY is not set), so"
            " this answer went unsigned"
        },
    ]
    assert of_type(await events(handle), "approval_vote") == []
    await handle.terminate("test over")
