"""Who may grant tokens (`AGENT_BUDGET_GROUPS`), over real HTTP: the web app on 127.0.0.1 and a
production worker with an approvers file that lets the web app's signing service sign for
olga (ops) and dave (dev), the worker with `AGENT_BUDGET_GROUPS=ops`.
A bearer-token user outside the group is refused with the reason and nothing changes; a grant
that only claims the group (unsigned), a forged one, and a signed grant sent again after it took
effect are refused too; a person of the group grants, signed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from runtime.settings import Settings
from starter.handle import AgentHandle
from starter.signed_grant import grant_as_sent
from starter.web.auth import add_user
from tests.fake_openai import FakeOpenAI, FakeOpenAIServer, tool_calls
from tests.helpers import events, of_type, status, wait_for_phase
from tests.people import module_people
from tests.web.conftest import PASSWORD, Served, serve_web
from worker import run_worker
from workflows.model import AgentRunInput, AgentRunOptions, AgentRunResult, BudgetGrant

pytestmark = pytest.mark.web

PEOPLE = module_people({"olga": ["ops"], "dave": ["dev"]}, via={"web": ["olga", "dave"]})
STRANGER = module_people({"olga": ["ops"]}, via={"web": ["olga"]})
"""Another file's `web` service: a key the worker does not know."""


@pytest.fixture(scope="module")
async def ops_worker(
    client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[str, FakeOpenAIServer]]:
    """A production worker with the approvers file, where only `ops` may grant; its queue and
    model."""
    tmp = tmp_path_factory.mktemp("budget-groups-worker")
    (tmp / "ws").mkdir()
    queue = f"budget-groups-{uuid.uuid4()}"
    with FakeOpenAI() as fake:
        settings = Settings(
            llm_base_url=fake.base_url,
            llm_api_key="sk-test",
            llm_model="fake-model",
            workspace=tmp / "ws",
            state_dir=tmp / "state",
            approvers_file=PEOPLE.path,
            budget_groups=("ops",),
        )
        stop, ready = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(
            run_worker(client, settings, queue=queue, stop=stop, ready=lambda _q: ready.set())
        )
        await asyncio.wait_for(ready.wait(), 30)
        try:
            yield queue, fake
        finally:
            stop.set()
            await task


@pytest.fixture(scope="module")
async def ops_web(
    client: Client,
    ops_worker: tuple[str, FakeOpenAIServer],
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[Served, dict[str, str]]]:
    """The web app holding the signing service's key, with token users: olga, dave."""
    async with serve_web(
        client, ops_worker[0], tmp_path_factory.mktemp("budget-groups-web"), signed_in=True
    ) as served:
        served.web.signing_key = PEOPLE.key("web")
        assert served.users_file is not None
        tokens = {
            name: add_user(served.users_file, name, PASSWORD, with_token=True)
            for name in ("olga", "dave")
        }
        yield served, {name: str(token) for name, token in tokens.items()}


async def at_budget(
    client: Client, ops_worker: tuple[str, FakeOpenAIServer]
) -> WorkflowHandle[Any, AgentRunResult]:
    queue, fake = ops_worker
    fake.enqueue(tool_calls(("call_1", "list_dir", '{"path": "."}')))
    handle = await client.start_workflow(
        "AgentWorkflow",
        AgentRunInput.from_prompt("list", AgentRunOptions(max_run_tokens=5)),
        id=f"budget-groups-{uuid.uuid4().hex[:10]}",
        task_queue=queue,
        result_type=AgentRunResult,
    )
    await wait_for_phase(handle, "budget_exhausted")
    return handle


async def post_grant(served: Served, token: str, workflow_id: str, body: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=served.url) as http:
        return await http.post(
            f"/api/runs/{workflow_id}/budget",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
        )


async def unchanged(handle: WorkflowHandle[Any, Any]) -> None:
    now = await status(handle)
    assert now.phase == "budget_exhausted"
    assert now.budget is not None and (now.budget.limit, now.budget.granted) == (5, 0)
    assert not of_type(await events(handle), "budget_granted")


async def test_only_people_of_the_budget_groups_may_grant(
    client: Client,
    ops_worker: tuple[str, FakeOpenAIServer],
    ops_web: tuple[Served, dict[str, str]],
) -> None:
    served, tokens = ops_web
    handle = await at_budget(client, ops_worker)

    refused = await post_grant(served, tokens["dave"], handle.id, {"tokens": 100})
    assert refused.status_code == 409, refused.text
    assert refused.json() == {"error": "only ops may grant tokens or stop a run at its budget"}
    stop = await post_grant(served, tokens["dave"], handle.id, {"stop": True})
    assert stop.status_code == 409 and "only ops may" in stop.json()["error"]
    for body, why in (
        ({"tokens": 0}, "tokens must be a whole number from 1"),
        ({"tokens": -5}, "tokens must be a whole number from 1"),
        ({"tokens": 5, "signed_by": "web"}, "'signed_by' is set by the server"),
        ({"tokens": 5, "groups": ["ops"]}, "'groups' is set by the server"),
        ({"tokens": 5, "approver": "olga"}, "'approver' is set by the server"),
        ([5], "the body must be a JSON object"),
    ):
        bad = await post_grant(served, tokens["olga"], handle.id, body)
        assert bad.status_code == 400 and why in bad.json()["error"], bad.text
    await unchanged(handle)

    # Through Temporal directly: groups a grant only claims are not believed, a forged
    # signature does not verify.
    claimed = BudgetGrant(tokens=100, approver="mallory", groups=["ops"])
    with pytest.raises(WorkflowUpdateFailedError) as unsigned:
        await AgentHandle(client, handle.id).grant(claimed)
    assert "with a signed grant (their key in the worker's AGENT_APPROVERS_FILE)" in str(
        unsigned.value.cause
    )
    forged = claimed.model_copy(
        update={
            "approver": "olga",
            "signed_at": "2026-12-02T14:00:00.000000Z",
            "signature": "A" * 86 + "==",
        }
    )
    with pytest.raises(WorkflowUpdateFailedError) as bad_signature:
        await AgentHandle(client, handle.id).grant(forged)
    assert "the grant is refused: its signature does not verify" in str(bad_signature.value.cause)
    await unchanged(handle)

    granted = await post_grant(served, tokens["olga"], handle.id, {"tokens": 100})
    assert granted.status_code == 200, granted.text
    assert granted.json()["budget"] == {"used": 18, "limit": 105, "granted": 100, "groups": ["ops"]}
    assert (await handle.result()).finish_reason == "stop"
    (event,) = of_type(await events(handle), "budget_granted")
    assert event.approver == "olga" and event.tokens == 100


async def test_a_signed_grant_is_taken_once(
    client: Client, ops_worker: tuple[str, FakeOpenAIServer]
) -> None:
    handle = await at_budget(client, ops_worker)
    agent = AgentHandle(client, handle.id)
    signed = await grant_as_sent(
        agent, BudgetGrant(tokens=1), key=PEOPLE.key("olga"), approver="olga"
    )
    assert signed.signature is not None
    budget = await agent.grant(signed)
    assert (budget.limit, budget.granted) == (6, 1)  # still spent: the run waits on
    with pytest.raises(WorkflowUpdateFailedError) as again:
        await agent.grant(signed)  # signed for the budget as it stood (5): not any more
    assert "its signature does not verify" in str(again.value.cause)
    now = await status(handle)
    assert now.budget is not None and (now.budget.limit, now.budget.granted) == (6, 1)
    await handle.terminate("test over")
