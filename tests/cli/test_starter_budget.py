"""Budgets that ask, end to end: a production worker (in-process) against the OpenAI-compatible
test server, which reports the tokens of every reply; `starter run --max-run-tokens`, the run
pausing in `budget_exhausted` with the model not called again, `starter grant W TOKENS` and
`starter grant W --stop` as real processes, the worker's cap (`AGENT_MAX_RUN_TOKENS`) that a
run's options cannot raise, and grants refused with a clear reason that change nothing."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from runtime.settings import Settings
from tests.cli.test_starter import Agent
from tests.fake_openai import FakeOpenAI, FakeOpenAIServer, text, tool_calls
from tests.helpers import events, of_type, status, wait_for_phase
from tests.people import make_people
from worker import run_worker
from workflows import names
from workflows.model import AgentRunInput, AgentRunOptions, AgentRunResult, BudgetStatus

TOKENS_PER_REPLY = 18
"""What the test server reports for each reply queued here (11 prompt + 7 completion)."""


def listing(fake: FakeOpenAIServer) -> None:
    """The model lists the workspace (a call that runs without asking); then the scripted
    assistant answers."""
    fake.enqueue(tool_calls(("call_1", "list_dir", '{"path": "."}')))


def deleting(fake: FakeOpenAIServer) -> None:
    """The model asks to delete a folder (a call that waits for a person)."""
    fake.enqueue(tool_calls(("call_1", "delete_path", '{"path": "logs"}')))


@contextlib.contextmanager
def _fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAI() as fake:
        yield fake


@contextlib.asynccontextmanager
async def budget_worker(
    client: Client, tmp: Path, **settings: Any
) -> AsyncIterator[tuple[Agent, FakeOpenAIServer]]:
    workspace = tmp / "ws"
    (workspace / "logs").mkdir(parents=True)
    queue = f"budget-{uuid.uuid4()}"
    with _fake() as fake:
        worker_settings = Settings(
            llm_base_url=fake.base_url,
            llm_api_key="sk-test",
            llm_model="fake-model",
            workspace=workspace,
            state_dir=tmp / "state",
            **settings,
        )
        stop, ready = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(
            run_worker(
                client, worker_settings, queue=queue, stop=stop, ready=lambda _q: ready.set()
            )
        )
        await asyncio.wait_for(ready.wait(), 30)
        try:
            address = client.service_client.config.target_host
            yield Agent(client, address, queue, workspace), fake
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)


@pytest.fixture
async def agent(client: Client, tmp_path: Path) -> AsyncIterator[tuple[Agent, FakeOpenAIServer]]:
    async with budget_worker(client, tmp_path) as pair:
        yield pair


async def start(agent: Agent, prompt: str, **options: Any) -> WorkflowHandle[Any, AgentRunResult]:
    return await agent.client.start_workflow(
        "AgentWorkflow",
        AgentRunInput.from_prompt(prompt, AgentRunOptions(**options)),
        id=f"budget-{uuid.uuid4().hex[:10]}",
        task_queue=agent.queue,
        result_type=AgentRunResult,
    )


async def test_the_run_pauses_at_its_budget_and_a_grant_lets_it_go_on(
    agent: tuple[Agent, FakeOpenAIServer],
) -> None:
    cli, fake = agent
    listing(fake)
    workflow_id = f"budget-{uuid.uuid4().hex[:10]}"
    started = await cli.cli(
        "run", "--no-follow", "--id", workflow_id, "--max-run-tokens", "18", "list"
    )
    assert started.code == 0, started
    handle = cli.handle(workflow_id)
    paused = await wait_for_phase(handle, "budget_exhausted")
    assert paused.budget is not None
    assert (paused.budget.used, paused.budget.limit) == (TOKENS_PER_REPLY, 18)
    assert fake.request_count == 1  # the reply that spent the budget; none since
    (exhausted,) = of_type(await events(handle), "budget_exhausted")
    assert (exhausted.used, exhausted.limit) == (18, 18)
    described = await handle.describe()
    assert described.typed_search_attributes.get(names.AGENT_STATUS) == "budget_exhausted"

    granted = await cli.cli("grant", workflow_id, "100")
    assert granted.code == 0, granted
    assert f"granted 100 tokens to {workflow_id}: used 18 of 118 tokens" in granted.stdout
    result = await handle.result()
    assert result.finish_reason == "stop"
    assert fake.request_count == 2
    evs = await events(handle)
    (grant,) = of_type(evs, "budget_granted")
    assert grant.tokens == 100 and grant.limit == 118 and grant.approver
    watched = await cli.cli("watch", workflow_id)
    assert "budget_exhausted: used 18 of 18 tokens" in watched.stdout
    assert "budget_granted: 100 more tokens by" in watched.stdout
    audit = await cli.cli("audit", workflow_id)
    assert audit.code == 0, audit
    assert "tokens granted 100" in audit.stdout
    (line,) = [x for x in audit.stdout.splitlines() if "grant_budget" in x]
    assert "budget" in line and "granted" in line and '{"tokens": 100}' in line


async def test_a_model_that_reports_no_usage_is_counted_by_estimate_and_said_once(
    agent: tuple[Agent, FakeOpenAIServer],
) -> None:
    """A model server that reports no token usage: the run's budget counts an estimate (the
    size of the request and the reply), so a run with `max_run_tokens: 100` still pauses at
    its budget; one warning says so, however many replies follow without usage."""
    cli, fake = agent
    unreported = dataclasses.replace(
        tool_calls(("call_1", "list_dir", '{"path": "."}')), usage=None
    )
    fake.enqueue(unreported, dataclasses.replace(text("Listed."), usage=None))
    handle = await start(cli, "list", max_run_tokens=100)
    paused = await wait_for_phase(handle, "budget_exhausted")
    assert paused.budget is not None and paused.budget.used >= 100, paused.budget
    assert fake.request_count == 1
    granted = await cli.cli("grant", handle.id, "100000")
    assert granted.code == 0, granted
    result = await handle.result()
    assert result.finish_reason == "stop" and fake.request_count == 2
    warnings = [w.message for w in of_type(await events(handle), "warning")]
    assert len([w for w in warnings if "reports no token usage" in w]) == 1, warnings
    assert warnings[0].startswith(
        "the model server reports no token usage: the token budget counts an estimate instead"
    )


async def test_stop_run_finishes_it_with_reason_budget(
    agent: tuple[Agent, FakeOpenAIServer],
) -> None:
    cli, fake = agent
    listing(fake)
    handle = await start(cli, "list", max_run_tokens=10)
    await wait_for_phase(handle, "budget_exhausted")
    stopped = await cli.cli("grant", handle.id, "--stop")
    assert stopped.code == 0, stopped
    assert "stops at its budget (used 18 of 10 tokens)" in stopped.stdout
    result = await handle.result()
    assert result.finish_reason == "budget" and result.error is None
    assert fake.request_count == 1
    final = await status(handle)
    assert final.phase == "finished" and final.finish_reason == "budget"
    (stop,) = of_type(await events(handle), "budget_stopped")
    assert stop.used == 18 and stop.limit == 10
    audit = await cli.cli("audit", handle.id)
    (line,) = [x for x in audit.stdout.splitlines() if "grant_budget" in x]
    assert "stopped" in line and '{"stop": true}' in line
    late = await cli.cli("grant", handle.id, "50")
    assert late.code != 0 and "has already finished" in late.stderr


async def test_bad_grants_are_refused_with_why_and_change_nothing(
    agent: tuple[Agent, FakeOpenAIServer],
) -> None:
    cli, fake = agent
    deleting(fake)
    no_budget = await start(cli, "Please delete the logs folder")
    await wait_for_phase(no_budget, "awaiting_approval")
    refused = await cli.cli("grant", no_budget.id, "100")
    assert refused.code == 1, refused
    assert refused.stderr.strip().splitlines() == [
        "error: the workflow refused the grant: this run has no token budget"
        " (options.max_run_tokens, AGENT_MAX_RUN_TOKENS)"
    ]
    assert (await status(no_budget)).budget is None

    await no_budget.terminate("test over")
    deleting(fake)
    roomy = await start(cli, "Please delete the logs folder", max_run_tokens=10_000)
    await wait_for_phase(roomy, "awaiting_approval")
    not_yet = await cli.cli("grant", roomy.id, "--stop")
    assert not_yet.code == 1, not_yet
    assert "the run is not at its token budget (used 18 of 10000 tokens)" in not_yet.stderr
    for bad in (["0"], ["-5"], ["many"], [], ["10", "--stop"]):
        result = await cli.cli("grant", roomy.id, *bad)
        assert result.code == 2, (bad, result)
        if bad and bad[0] in ("0", "-5", "many"):
            assert f"tokens must be a whole number from 1, got {bad[0]}" in result.stderr
    after = await status(roomy)
    assert after.phase == "awaiting_approval"
    assert after.budget is not None and after.budget.limit == 10_000
    assert after.budget.granted == 0
    assert not of_type(await events(roomy), "budget_granted")

    # a grant before the budget is spent raises it: the run then goes further before it asks
    early = await cli.cli("grant", roomy.id, "500")
    assert early.code == 0 and "used 18 of 10,500 tokens" in early.stdout, early
    await roomy.terminate("test over")


async def test_the_worker_cap_is_not_raised_by_the_run(client: Client, tmp_path: Path) -> None:
    async with budget_worker(client, tmp_path, max_run_tokens=10) as (cli, fake):
        listing(fake)
        handle = await start(cli, "list", max_run_tokens=1_000_000)
        paused = await wait_for_phase(handle, "budget_exhausted")
        assert paused.budget is not None and paused.budget.limit == 10
        assert paused.budget.used == TOKENS_PER_REPLY and fake.request_count == 1
        listing(fake)
        lower = await start(cli, "list", max_run_tokens=5)
        low = await wait_for_phase(lower, "budget_exhausted")
        assert low.budget is not None and low.budget.limit == 5
        # a person may grant beyond the cap: the cap bounds what a run asks for itself
        granted = await cli.cli("grant", handle.id, "1000")
        assert granted.code == 0, granted
        assert (await handle.result()).finish_reason == "stop"
        await lower.terminate("test over")


async def test_a_grant_is_signed_with_the_persons_own_key_of_the_budget_group(
    client: Client, tmp_path: Path
) -> None:
    people = make_people(tmp_path / "people", {"olga": ["ops"], "dave": ["dev"]}, keygen=True)
    home = tmp_path / "home"
    home.mkdir()
    file = str(people.path)
    async with budget_worker(
        client, tmp_path, approvers_file=people.path, budget_groups=("ops",)
    ) as (cli, fake):
        listing(fake)
        handle = await start(cli, "list", max_run_tokens=5)
        await wait_for_phase(handle, "budget_exhausted")
        unsigned = await cli.cli(  # no key: not signed, whoever USER says
            "grant", handle.id, "50", USER="olga", AGENT_APPROVERS_FILE=file, HOME=str(home)
        )
        assert unsigned.code == 1 and "only ops may grant tokens" in unsigned.stderr, unsigned
        assert "the grant goes unsigned" in unsigned.stdout
        dave = str(people.key_files["dave"])
        elsewhere = await cli.cli(
            "grant", handle.id, "50", "--key", dave, AGENT_APPROVERS_FILE=file, HOME=str(home)
        )
        assert elsewhere.code == 1 and "only ops may grant tokens" in elsewhere.stderr, elsewhere
        assert (await status(handle)).budget == BudgetStatus(used=18, limit=5, groups=["ops"])
        olga = str(people.key_files["olga"])
        signed = await cli.cli(
            "grant", handle.id, "50", "--key", olga, USER="dave", AGENT_APPROVERS_FILE=file,
            HOME=str(home),
        )  # fmt: skip
        assert signed.code == 0, signed
        assert (await handle.result()).finish_reason == "stop"
        (granted,) = of_type(await events(handle), "budget_granted")
        assert granted.approver == "olga" and granted.tokens == 50
