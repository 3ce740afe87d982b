"""Signed answers to questions through the web app (uvicorn on 127.0.0.1, a production worker
with an approvers file, bearer-token users): the web app signs the answer through its signing
service, the worker verifies it; a web app with another service key is refused and nothing is
recorded."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowHandle

from tests.helpers import events, of_type, wait_for_phase
from tests.web import test_signed_web
from tests.web.conftest import Served
from workflows.model import AgentRunInput, AgentRunOptions, AgentRunResult

pytestmark = pytest.mark.web

keyed_queue = test_signed_web.keyed_queue
keyed_web = test_signed_web.keyed_web


async def asking(client: Client, queue: str) -> WorkflowHandle[Any, AgentRunResult]:
    handle = await client.start_workflow(
        "AgentWorkflow",
        AgentRunInput.from_prompt(
            "ask me: Which folder? (options: tmp, logs)", AgentRunOptions(ask_user=True)
        ),
        id=f"agent-signed-q-{uuid.uuid4().hex[:10]}",
        task_queue=queue,
        result_type=AgentRunResult,
    )
    await wait_for_phase(handle, "awaiting_answer")
    return handle


async def test_the_web_app_signs_answers_and_the_worker_refuses_another_keys(
    client: Client, keyed_queue: str, keyed_web: tuple[Served, dict[str, str]]
) -> None:
    served, tokens = keyed_web
    handle = await asking(client, keyed_queue)
    url = f"/api/runs/{handle.id}/answers"
    auth = {"Authorization": f"Bearer {tokens['alice']}"}
    async with httpx.AsyncClient(base_url=served.url, headers=auth) as http:
        for own in ("groups", "signature", "signed_at", "signed_by"):
            brought = await http.post(url, json={"call_id": "call_1", "answer": "tmp", own: "x"})
            assert brought.status_code == 400, brought.text
        served.web.signing_key = test_signed_web.STRANGER.key("web")
        try:
            forged = await http.post(url, json={"call_id": "call_1", "answer": "tmp"})
        finally:
            served.web.signing_key = test_signed_web.PEOPLE.key("web")
        assert forged.status_code == 409 and "does not verify" in forged.json()["error"]
        assert of_type(await events(handle), "answer") == []
        taken = await http.post(url, json={"call_id": "call_1", "answer": "tmp"})
        assert taken.status_code == 200, taken.text
    result = await handle.result()
    [answer] = of_type(await events(handle), "answer")
    assert answer.approver == "alice" and answer.groups == ["dev", "ops"]
    assert result.messages[-1].content == "You answered: tmp"
