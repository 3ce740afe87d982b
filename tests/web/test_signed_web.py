"""Signed answers through the web app (uvicorn on 127.0.0.1, a production worker whose
AGENT_APPROVERS_FILE lets the web app's signing service sign for its users, an enforced approver
rule, bearer-token users, a real headless Chromium): the answer the run records carries the
user's groups from the approvers file and a signature that verifies as the service's for them; a
client cannot bring its own; a service key the worker does not know is refused; two people of
`ops` approve a call that needs two."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from playwright.async_api import async_playwright, expect
from temporalio.client import Client, WorkflowHandle

from runtime.settings import Settings
from starter.web.auth import add_user
from tests.fake_openai import FakeOpenAI
from tests.helpers import events, of_type, wait_for_phase, wait_until
from tests.people import module_people
from tests.web.conftest import CHROMIUM, PASSWORD, Served, serve_web
from worker import run_worker
from workflows.contract.arguments import arguments_digest
from workflows.model import AgentRunInput, AgentRunResult
from workflows.people.signatures import VerifyRequest

pytestmark = pytest.mark.web

expect.set_options(timeout=20_000)

PEOPLE = module_people(
    {"alice": ["dev", "ops"], "bob": ["ops"], "carol": ["ops"], "dave": ["dev"]},
    via={"web": ["alice", "bob", "carol", "dave"]},
)
"""The worker's approvers file: each person may sign through the web app's service `web`."""
STRANGER = module_people({"alice": ["ops"], "carol": ["ops"]}, via={"web": ["alice", "carol"]})
"""Another file's `web` service: a key the worker does not know."""
QUORUM_RULE = {
    "tool": "run_command",
    "when": {"command": "echo quorum*"},
    "decision": "ask",
    "approvers": {"groups": ["ops"], "count": 2},
}
"""The worker's enforced rule: `echo quorum…` runs only with two people of ops."""


@pytest.fixture(scope="module")
async def keyed_queue(
    client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """A production worker with the approvers file; its queue."""
    tmp = tmp_path_factory.mktemp("signed-worker")
    (tmp / "ws").mkdir()
    (tmp / "policy.json").write_text(json.dumps({"enforced": [QUORUM_RULE]}))
    queue = f"signed-{uuid.uuid4()}"
    with FakeOpenAI() as fake:
        settings = Settings(
            llm_base_url=fake.base_url,
            llm_api_key="sk-test",
            llm_model="fake-model",
            workspace=tmp / "ws",
            state_dir=tmp / "state",
            approvers_file=PEOPLE.path,
            policy_file=tmp / "policy.json",
        )
        stop, ready = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(
            run_worker(client, settings, queue=queue, stop=stop, ready=lambda _q: ready.set())
        )
        await asyncio.wait_for(ready.wait(), 30)
        try:
            yield queue
        finally:
            stop.set()
            await task


@pytest.fixture(scope="module")
async def keyed_web(
    client: Client, keyed_queue: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Served, dict[str, str]]]:
    """The web app holding the service's key, with token users alice (ops, dev), carol (ops)
    and dave (dev), and bob (ops), who signs in with his password (their groups are the
    approvers file's; the users file's carry none)."""
    async with serve_web(
        client, keyed_queue, tmp_path_factory.mktemp("signed-web"), signed_in=True
    ) as served:
        served.web.signing_key = PEOPLE.key("web")
        assert served.users_file is not None
        tokens = {
            name: add_user(served.users_file, name, PASSWORD, with_token=True)
            for name in ("alice", "carol", "dave")
        }
        add_user(served.users_file, "bob", PASSWORD, with_token=False)
        yield served, {name: str(token) for name, token in tokens.items()}


async def start(client: Client, queue: str, prompt: str) -> WorkflowHandle[Any, AgentRunResult]:
    return await client.start_workflow(
        "AgentWorkflow",
        AgentRunInput.from_prompt(prompt),
        id=f"agent-signed-{uuid.uuid4().hex[:10]}",
        task_queue=queue,
        result_type=AgentRunResult,
    )


async def test_the_recorded_answer_carries_the_users_groups_and_a_signature_that_verifies(
    client: Client, keyed_queue: str, keyed_web: tuple[Served, dict[str, str]]
) -> None:
    served, tokens = keyed_web
    handle = await start(client, keyed_queue, "run: echo signed")
    status = await wait_for_phase(handle, "awaiting_approval")
    call = status.pending_approvals[0]
    auth = {"Authorization": f"Bearer {tokens['alice']}"}
    url = f"/api/runs/{handle.id}/approvals"
    async with httpx.AsyncClient(base_url=served.url, headers=auth) as http:
        for own in ("groups", "signature", "signed_at", "signed_by"):
            brought = await http.post(url, json={"call_id": call.id, "approved": True, own: "x"})
            assert brought.status_code == 400, brought.text
            assert f"'{own}' is set by the server" in brought.json()["error"]
        taken = await http.post(url, json={"call_id": call.id, "approved": True})
        assert taken.status_code == 200, taken.text
    await handle.result()
    [answer] = of_type(await events(handle), "approval")
    assert answer.approver == "alice" and answer.groups == ["dev", "ops"]
    assert answer.signed_at is not None and answer.signature is not None
    assert answer.signed_by == "web"
    check = VerifyRequest(
        approver="alice",
        workflow_id=handle.id,
        run_id=str(status.run_id),
        call_id=call.id,
        arguments_sha256=arguments_digest(call.arguments),
        decision="approve",
        signed_at=answer.signed_at,
        signature=answer.signature,
        signed_by="web",
    )
    assert PEOPLE.approvers.verify(check).valid
    assert not STRANGER.approvers.verify(check.model_copy(update={"approver": "carol"})).valid


async def test_a_web_app_with_another_key_is_refused_by_the_worker(
    client: Client, keyed_queue: str, keyed_web: tuple[Served, dict[str, str]]
) -> None:
    served, tokens = keyed_web
    handle = await start(client, keyed_queue, "run: echo forged")
    status = await wait_for_phase(handle, "awaiting_approval")
    call_id = status.pending_approvals[0].id
    served.web.signing_key = STRANGER.key("web")
    try:
        async with httpx.AsyncClient(
            base_url=served.url, headers={"Authorization": f"Bearer {tokens['carol']}"}
        ) as http:
            url = f"/api/runs/{handle.id}/approvals"
            refused = await http.post(url, json={"call_id": call_id, "approved": True})
            assert refused.status_code == 409
            assert "does not verify" in refused.json()["error"]
            served.web.signing_key = PEOPLE.key("web")
            taken = await http.post(url, json={"call_id": call_id, "approved": False})
            assert taken.status_code == 200, taken.text
    finally:
        served.web.signing_key = PEOPLE.key("web")
    await handle.result()
    [answer] = of_type(await events(handle), "approval")
    assert answer.approver == "carol" and answer.groups == ["ops"] and answer.approved is False


async def test_two_people_of_ops_approve_through_the_web_and_the_card_says_so(
    client: Client, keyed_queue: str, keyed_web: tuple[Served, dict[str, str]]
) -> None:
    served, tokens = keyed_web
    handle = await start(client, keyed_queue, "run: echo quorum reached")
    status = await wait_for_phase(handle, "awaiting_approval")
    call = status.pending_approvals[0]
    url = f"/api/runs/{handle.id}/approvals"
    answer = {"call_id": call.id, "approved": True}
    async with httpx.AsyncClient(base_url=served.url) as http:
        alice = {"Authorization": f"Bearer {tokens['alice']}"}
        taken = await http.post(url, json=answer, headers=alice)
        assert taken.status_code == 200 and [c["id"] for c in taken.json()["pending"]] == [call.id]
        twice = await http.post(url, json=answer, headers=alice)
        assert twice.status_code == 409 and "alice has already answered" in twice.json()["error"]
        dev_only = await http.post(
            url, json=answer, headers={"Authorization": f"Bearer {tokens['dave']}"}
        )
        assert dev_only.status_code == 409
        assert dev_only.json()["error"] == "only ops may approve run_command"

        async def listed() -> list[dict[str, Any]]:
            pending = (await http.get("/api/pending", headers=alice)).json()
            return [r for r in pending if r["workflow_id"] == handle.id]

        [entry] = await wait_until(listed)  # the visibility store lists it shortly
        assert entry["quorums"] == [
            {
                "call_id": call.id,
                "tool": "run_command",
                "groups": ["ops"],
                "needed": 2,
                "approvers": ["alice"],
            }
        ]
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            page = await (await browser.new_context(base_url=served.url)).new_page()
            await page.goto("/signin")
            await page.get_by_label("Username").fill("bob")
            await page.get_by_label("Password").fill(PASSWORD)
            await page.get_by_role("button", name="Sign in").click()
            await expect(page).to_have_url(served.url + "/")
            card = page.locator(
                f'article[data-call-id="{call.id}"][data-workflow-id="{handle.id}"]'
            )
            quorum = card.locator("p.quorum")
            await expect(quorum).to_have_text("1 of 2 approvals: alice; who may answer: ops")
            await expect(card.get_by_label("Remember for this run")).to_have_count(0)
            await card.get_by_role("button", name="Approve").click()
            await expect(page.locator("#notes")).to_have_text(f"{call.id} approved")
        finally:
            await browser.close()
    result = await handle.result()
    assert result.finish_reason == "stop"
    evs = await events(handle)
    votes = [(v.approver, v.votes, v.needed) for v in of_type(evs, "approval_vote")]
    assert votes == [("alice", 1, 2), ("bob", 2, 2)]
    [approval] = of_type(evs, "approval")
    assert approval.approvers == ["alice", "bob"] and approval.approver == "alice, bob"
    [tool] = [m for m in result.messages if m.role == "tool"]
    assert "quorum reached" in (tool.content or "") and "Rejected" not in (tool.content or "")
    assert (await handle.query("audit"))["counts"]["votes"] == 2
