"""The web page's live feed (`starter.web.hub.RunWatch`, one follower shared by a run's viewers)
rides through its way to the Temporal server cut for a while: the real dev server, a real worker
(the real activities, the scripted model) and the hub's client connected through a TCP relay
that is cut and mended. The feed keeps its run, says it is still trying while the cut lasts, and
then shows what happened meanwhile, to the run's end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client

from runtime.connect import binding_interceptors, data_converter
from runtime.settings import Settings
from starter.web.hub import Watches
from tests.cli.test_starter import seed
from tests.helpers import start_run, wait_for_phase, wait_until
from tests.tcp_relay import Relay
from worker import run_worker
from workflows import names
from workflows.model import AgentRunInput, AwaitingApprovalEvent, FinishedEvent

CUT_SECONDS = 30.0
"""Longer than the SDK's own retries of a request, shorter than the server counts as gone."""


@pytest.fixture
async def worker(client: Client, task_queue: str, tmp_path: Path) -> AsyncIterator[str]:
    settings = Settings.from_env(
        {
            "AGENT_WORKSPACE": str(seed(tmp_path / "workspace")),
            "AGENT_STATE_DIR": str(tmp_path / "state"),
        }
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        run_worker(client, settings, queue=task_queue, stop=stop, ready=lambda _q: ready.set())
    )
    await asyncio.wait_for(ready.wait(), 30)
    try:
        yield task_queue
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_the_live_feed_rides_through_its_way_to_the_server_cut(
    client: Client, worker: str
) -> None:
    handle = await start_run(client, worker, AgentRunInput.from_prompt("run: echo hi"))
    await wait_for_phase(handle, "awaiting_approval")
    target = client.service_client.config.target_host
    async with Relay(target) as relay:
        through = await Client.connect(
            relay.address,
            namespace=client.namespace,
            data_converter=data_converter(),
            interceptors=binding_interceptors(),
        )
        watches = Watches(through)
        try:
            watch = watches.get(handle.id)
            state = watch.state
            await wait_until(
                lambda: any(isinstance(e, AwaitingApprovalEvent) for e in state.events), 30
            )

            await relay.cut()
            said: list[str] = []
            loop = asyncio.get_running_loop()
            until = loop.time() + CUT_SECONDS
            while loop.time() < until:
                trouble = getattr(state, "trouble", None)  # what the page says meanwhile
                if trouble and trouble not in said:
                    said.append(trouble)
                await asyncio.sleep(0.2)
            assert not watch.done, state.closed  # still following
            await relay.mend()

            await handle.signal(names.SIGNAL_TOOL_APPROVAL, {"call_id": "call_1", "approved": True})
            await wait_until(
                lambda: any(isinstance(e, FinishedEvent) for e in state.events) or watch.done, 60
            )
            await wait_until(lambda: getattr(state, "trouble", None) is None, 30)
            # The page's status is refreshed after the finished event, as its own step.
            await wait_until(
                lambda: state.status is not None and state.status.phase == "finished", 30
            )
        finally:
            await watches.stop()
    assert any(isinstance(e, FinishedEvent) for e in state.events), (state.closed, state.events)
    assert state.closed is None, state.closed
    assert [e.seq for e in state.events] == list(range(len(state.events)))  # each once, in order
    assert len(said) == 1 and said[0].startswith("still trying to follow the run"), said
    assert state.status is not None and state.status.phase == "finished"
