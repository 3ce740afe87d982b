"""Signed answers through the web app (uvicorn on 127.0.0.1, a production worker holding
AGENT_APPROVER_KEY, bearer-token users with groups): the answer the run records carries the
signed-in user's groups and a signature that verifies; a client cannot bring its own."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowHandle

from activities.approver_key import ApproverKey
from activities.settings import Settings
from starter.web.auth import add_user
from tests.fake_openai import FakeOpenAI
from tests.helpers import events, of_type, wait_for_phase
from tests.web.conftest import PASSWORD, Served, serve_web
from worker import run_worker
from workflows.arguments import arguments_digest
from workflows.model import AgentRunInput, AgentRunResult
from workflows.signing import SignedFields

pytestmark = pytest.mark.web

RAW_KEY = os.urandom(32)


@pytest.fixture(scope="module")
async def keyed_queue(
    client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """A production worker holding the approver key; its queue."""
    tmp = tmp_path_factory.mktemp("signed-worker")
    (tmp / "ws").mkdir()
    queue = f"signed-{uuid.uuid4()}"
    with FakeOpenAI() as fake:
        settings = Settings(
            llm_base_url=fake.base_url,
            llm_api_key="sk-test",
            llm_model="fake-model",
            workspace=tmp / "ws",
            state_dir=tmp / "state",
            approver_key=RAW_KEY,
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
    """The web app holding the key, with token users: alice (ops, dev), carol (ops)."""
    async with serve_web(
        client, keyed_queue, tmp_path_factory.mktemp("signed-web"), signed_in=True
    ) as served:
        served.web.approver_key = ApproverKey(RAW_KEY)
        assert served.users_file is not None
        tokens = {
            name: add_user(served.users_file, name, PASSWORD, with_token=True, groups=groups)
            for name, groups in {"alice": ["ops", "dev"], "carol": ["ops"]}.items()
        }
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
        for own in ("groups", "signature", "signed_at"):
            brought = await http.post(url, json={"call_id": call.id, "approved": True, own: "x"})
            assert brought.status_code == 400, brought.text
            assert f"'{own}' is set by the server" in brought.json()["error"]
        taken = await http.post(url, json={"call_id": call.id, "approved": True})
        assert taken.status_code == 200, taken.text
    await handle.result()
    [answer] = of_type(await events(handle), "approval")
    assert answer.approver == "alice" and answer.groups == ["dev", "ops"]
    assert answer.signed_at is not None and answer.signature is not None
    fields = SignedFields(
        approver="alice",
        groups=("dev", "ops"),
        workflow_id=handle.id,
        run_id=str(status.run_id),
        call_id=call.id,
        arguments_sha256=arguments_digest(call.arguments),
        decision="approve",
        signed_at=answer.signed_at,
    )
    assert ApproverKey(RAW_KEY).verifies(fields, answer.signature)
    assert not ApproverKey(os.urandom(32)).verifies(fields, answer.signature)


async def test_a_web_app_with_another_key_is_refused_by_the_worker(
    client: Client, keyed_queue: str, keyed_web: tuple[Served, dict[str, str]]
) -> None:
    served, tokens = keyed_web
    handle = await start(client, keyed_queue, "run: echo forged")
    status = await wait_for_phase(handle, "awaiting_approval")
    call_id = status.pending_approvals[0].id
    served.web.approver_key = ApproverKey(os.urandom(32))
    try:
        async with httpx.AsyncClient(
            base_url=served.url, headers={"Authorization": f"Bearer {tokens['carol']}"}
        ) as http:
            url = f"/api/runs/{handle.id}/approvals"
            refused = await http.post(url, json={"call_id": call_id, "approved": True})
            assert refused.status_code == 409
            assert "does not verify" in refused.json()["error"]
            served.web.approver_key = ApproverKey(RAW_KEY)
            taken = await http.post(url, json={"call_id": call_id, "approved": False})
            assert taken.status_code == 200, taken.text
    finally:
        served.web.approver_key = ApproverKey(RAW_KEY)
    await handle.result()
    [answer] = of_type(await events(handle), "approval")
    assert answer.approver == "carol" and answer.groups == ["ops"] and answer.approved is False
