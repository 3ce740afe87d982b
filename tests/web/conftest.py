"""Fixtures for the web inbox: a production worker against the OpenAI-compatible test server (which
answers as the scripted assistant unless a test queues a behaviour), the web app served by uvicorn
on 127.0.0.1 with a client that counts the stream long-polls it holds, and a headless Chromium
from the OS (Playwright drives it; it is never downloaded)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from temporalio.client import (
    Client,
    Interceptor,
    ListWorkflowsInput,
    OutboundInterceptor,
    QueryWorkflowInput,
    StartWorkflowInput,
    StartWorkflowUpdateInput,
    WorkflowExecutionAsyncIterator,
    WorkflowHandle,
    WorkflowUpdateHandle,
)

from runtime.settings import Settings
from starter.web.app import WebApp, build_app
from starter.web.auth import Signer, UsersFile, add_user
from starter.web.security import Guard
from tests.fake_openai import FakeOpenAI, FakeOpenAIServer
from tests.ports import free_port
from worker import run_worker

POLL_UPDATE = "__temporal_workflow_stream_poll"
PASSWORD = "correct horse battery staple"
CHROMIUM = os.environ.get("AGENT_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


@dataclass
class PollCounter:
    """The stream long-poll updates a client holds, per workflow id: now, and at most."""

    in_flight: collections.Counter[str] = field(default_factory=collections.Counter)
    most: collections.Counter[str] = field(default_factory=collections.Counter)
    started: collections.Counter[str] = field(default_factory=collections.Counter)
    calls: collections.Counter[str] = field(default_factory=collections.Counter)
    """Every visibility listing and query the server made (`list`, `query:status`, …)."""
    listings: list[str] = field(default_factory=list)
    """The query of every visibility listing, in order."""


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, counter: PollCounter) -> None:
        super().__init__(next)
        self._counter = counter

    def list_workflows(self, input: ListWorkflowsInput) -> WorkflowExecutionAsyncIterator:
        self._counter.calls["list"] += 1
        self._counter.listings.append(input.query or "")
        return super().list_workflows(input)

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        self._counter.calls["start"] += 1
        return await super().start_workflow(input)

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        self._counter.calls[f"query:{input.query}"] += 1
        return await super().query_workflow(input)

    async def start_workflow_update(
        self, input: StartWorkflowUpdateInput
    ) -> WorkflowUpdateHandle[Any]:
        if input.update != POLL_UPDATE:
            return await super().start_workflow_update(input)
        counter, workflow_id = self._counter, input.id
        counter.in_flight[workflow_id] += 1
        counter.started[workflow_id] += 1
        counter.most[workflow_id] = max(counter.most[workflow_id], counter.in_flight[workflow_id])
        try:
            handle = await super().start_workflow_update(input)
        except BaseException:
            counter.in_flight[workflow_id] -= 1
            raise
        result = handle.result

        async def counted_result(*args: Any, **kwargs: Any) -> Any:
            try:
                return await result(*args, **kwargs)
            finally:
                counter.in_flight[workflow_id] -= 1

        handle.result = counted_result  # type: ignore[method-assign]
        return handle


class CountPolls(Interceptor):
    def __init__(self, counter: PollCounter) -> None:
        self.counter = counter

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self.counter)


@dataclass
class Served:
    url: str
    web: WebApp
    polls: PollCounter
    users_file: Path | None
    token: str | None


@contextlib.asynccontextmanager
async def serve_web(
    client: Client, queue: str, tmp: Path, *, signed_in: bool
) -> AsyncIterator[Served]:
    """The app on 127.0.0.1 (uvicorn, in this event loop) with a poll-counting client."""
    counter = PollCounter()
    config = client.config()
    config["interceptors"] = [*config.get("interceptors", []), CountPolls(counter)]
    counted = Client(**config)
    users_file: Path | None = None
    token: str | None = None
    users: UsersFile | None = None
    if signed_in:
        users_file = tmp / "users"
        token = add_user(users_file, "alice", PASSWORD, with_token=True)
        add_user(users_file, "bob", PASSWORD, with_token=False)
        users = UsersFile(users_file)
    guard = Guard(Signer(os.urandom(32)), users, local_user="local-os-user")
    web, app = build_app(counted, queue=queue, guard=guard)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(server.serve())
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as http:
        for _ in range(100):
            with contextlib.suppress(httpx.HTTPError):
                await http.get(url + "/signin")
                break
            await asyncio.sleep(0.05)
    try:
        yield Served(url, web, counter, users_file, token)
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)


@dataclass
class Worker:
    queue: str
    fake: FakeOpenAIServer
    workspace: Path


@contextlib.contextmanager
def _fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
async def worker(client: Client, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Worker]:
    """A production worker on its own task queue; the model answers as the scripted assistant
    unless a test queues a behaviour on `worker.fake`."""
    tmp = tmp_path_factory.mktemp("web-worker")
    workspace = tmp / "ws"
    (workspace / "logs").mkdir(parents=True)
    (workspace / "logs" / "old.log").write_text("old\n")
    queue = f"web-{uuid.uuid4()}"
    with _fake() as fake:
        settings = Settings(
            llm_base_url=fake.base_url,
            llm_api_key="sk-test",
            llm_model="fake-model",
            workspace=workspace,
            state_dir=tmp / "state",
            stream_flush_seconds=0.2,
        )
        stop = asyncio.Event()
        task = asyncio.create_task(run_worker(client, settings, queue=queue, stop=stop))
        try:
            yield Worker(queue, fake, workspace)
        finally:
            stop.set()
            await task
