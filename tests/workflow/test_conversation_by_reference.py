"""A worker that holds a run's conversation and returned the results of its last round reads
the next conversation without a query (`LlmRequest.tail`, `conversation_by_reference`), and the
model still receives exactly the run's conversation. A run's first model call carries a small
prompt itself (`first_request_inline`), so a short run makes no query at all. Through real
workers (the real `AgentActivities` against the strict fake model server on 127.0.0.1), on the
dev server, the queries counted by a client interceptor. A round on another worker (another cache) or one
after the cache lost the run is read by query, and every conversation is still the run's."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
)
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.conversation_cache import ConversationCache
from activities.tools import build_default_registry
from runtime.settings import Settings
from tests.fake_openai import FakeOpenAI, FakeOpenAIServer, text, tool_calls
from tests.helpers import start_run, wait_for_phase, wait_until
from tests.workflow.test_conversation_tail import settings
from workflows import names
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage, LlmRequest
from workflows.run.agent import AgentWorkflow


class Queries(Interceptor):
    """Counts the queries its client makes, by name."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self.counts)


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, counts: Counter[str]) -> None:
        super().__init__(next)
        self._counts = counts

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        self._counts[input.query] += 1
        return await super().query_workflow(input)


def counted(client: Client, queries: Queries) -> Client:
    config = client.config()
    config["interceptors"] = [*config["interceptors"], queries]
    return Client(**config)


class Sent(AgentActivities):
    """The real activities, keeping every conversation given to the model (with its request)."""

    def __init__(self, client: Client, settings: Settings, workspace: Path, http: Any) -> None:
        super().__init__(client, settings, build_default_registry(workspace), http)
        self.sent: list[tuple[LlmRequest, list[ChatMessage]]] = []

    @property
    def cache(self) -> ConversationCache:
        return self._conversations

    async def _conversation(self, request: LlmRequest) -> list[ChatMessage]:
        got = await super()._conversation(request)
        self.sent.append((request, got))
        return got


def workspace_of(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("text of a\n")
    (workspace / "b.txt").write_text("text of b\n")
    return workspace


def shape(messages: list[ChatMessage]) -> list[tuple[Any, ...]]:
    """What the model server can tell of a message (its wire form drops nothing else here)."""
    return [
        (m.role, m.content, m.tool_call_id, [(c.id, c.name) for c in m.tool_calls or []])
        for m in messages
    ]


def enqueue_rounds(fake: FakeOpenAIServer) -> None:
    """Four rounds: a read, two calls in one reply reusing the first's id (renamed by the run),
    an answer; then, after a person's message, another answer."""
    fake.enqueue(
        tool_calls(("call_0", "read_file", '{"path": "a.txt"}')),
        tool_calls(
            ("call_0", "read_file", '{"path": "b.txt"}'),
            ("call_0", "list_dir", "{}"),
        ),
        text("Both read."),
        text("Yes, both."),
    )


async def answered(handle: Any, fake: FakeOpenAIServer, requests: int) -> None:
    """Wait until the model was asked `requests` times and the session waits again."""
    await wait_until(lambda: len(fake.requests) == requests)
    await wait_for_phase(handle, "waiting_for_message")


PROMPT = "read a, b"
LONG_PROMPT = "read a, b " + "please " * 400
"""Past the 2 KiB a request carries inline (`conversation_parts.INLINE_BYTES`)."""


async def session(
    client: Client, task_queue: str, fake: FakeOpenAIServer, prompt: str = PROMPT
) -> list[ChatMessage]:
    """The four rounds of `enqueue_rounds`; the run's record at the end."""
    options = AgentRunOptions(keep_alive=True, max_rounds=10)
    handle = await start_run(client, task_queue, AgentRunInput.from_prompt(prompt, options))
    await answered(handle, fake, 3)
    await handle.signal("send_message", {"content": "sure?"})
    await answered(handle, fake, 4)
    record: list[ChatMessage] = await handle.query(
        names.QUERY_MESSAGES, result_type=list[ChatMessage]
    )
    await handle.signal("cancel")
    await asyncio.wait_for(handle.result(), 60)
    return record


@pytest.mark.parametrize(
    ("prompt", "first_queries"),
    [(PROMPT, False), (LONG_PROMPT, True)],
    ids=["short-prompt-no-query", "long-prompt-first-call-queries"],
)
async def test_on_one_worker_only_a_first_call_with_a_long_prompt_queries_the_run(
    client, task_queue, tmp_path, prompt, first_queries
):
    workspace = workspace_of(tmp_path)
    queries = Queries()
    with FakeOpenAI() as fake:
        enqueue_rounds(fake)
        async with httpx.AsyncClient() as http:
            acts = Sent(counted(client, queries), settings(fake, workspace), workspace, http)
            async with Worker(
                client, task_queue=task_queue, workflows=[AgentWorkflow], activities=acts.all()
            ):
                record = await session(client, task_queue, fake, prompt)
        received = fake.received_messages()
    # The conversation query was made for the first round only when its prompt was too long to
    # carry, and nothing else was asked.
    assert dict(queries.counts) == ({names.QUERY_CONVERSATION_TAIL: 1} if first_queries else {})
    assert acts.cache.unqueried == (3 if first_queries else 4)
    assert [r.tail is not None for r, _ in acts.sent] == [not first_queries, True, True, True]
    # The run renamed the reused ids, and the rebuilt conversations carry its names.
    calls = [c.id for m in record if m.role == "assistant" for c in m.tool_calls or []]
    assert calls == ["call_0", "call_0#2", "call_0#3"]
    # Each conversation given to the model is exactly the run's first `message_count` messages,
    # and the model server received exactly those.
    assert [len(got) for _, got in acts.sent] == [1, 3, 6, 8]
    assert len(received) == 4
    for (request, got), wire in zip(acts.sent, received, strict=True):
        assert got == record[: request.message_count]
        assert shape(wire) == shape(got)
    assert [m.content for m in record if m.role == "user"] == [prompt, "sure?"]


async def test_a_round_on_another_worker_or_after_a_cleared_cache_reads_by_query(
    client, task_queue, tmp_path
):
    workspace = workspace_of(tmp_path)
    queries = Queries()
    with FakeOpenAI() as fake:
        enqueue_rounds(fake)
        fake.enqueue(text("Still both."), text("Bye."))
        async with httpx.AsyncClient() as http:
            one = Sent(counted(client, queries), settings(fake, workspace), workspace, http)
            two = Sent(counted(client, queries), settings(fake, workspace), workspace, http)
            async with Worker(
                client, task_queue=task_queue, workflows=[AgentWorkflow], activities=one.all()
            ):
                options = AgentRunOptions(keep_alive=True, max_rounds=10)
                prompt = AgentRunInput.from_prompt("read a, b", options)
                handle = await start_run(client, task_queue, prompt)
                await answered(handle, fake, 3)
                assert (queries.counts[names.QUERY_CONVERSATION_TAIL], one.cache.unqueried) == (
                    0,
                    3,
                )
                for key in one.cache.keys():  # as after an eviction
                    one.cache.drop(key)
                await handle.signal("send_message", {"content": "sure?"})
                await answered(handle, fake, 4)
                assert (queries.counts[names.QUERY_CONVERSATION_TAIL], one.cache.unqueried) == (
                    1,
                    3,
                )
            # Another worker process (its own cache, none of the results): a query, then again
            # by reference.
            async with Worker(
                client, task_queue=task_queue, workflows=[AgentWorkflow], activities=two.all()
            ):
                await handle.signal("send_message", {"content": "really?"})
                await answered(handle, fake, 5)
                assert queries.counts[names.QUERY_CONVERSATION_TAIL] == 2
                await handle.signal("send_message", {"content": "bye"})
                await answered(handle, fake, 6)
                assert queries.counts[names.QUERY_CONVERSATION_TAIL] == 2
                assert two.cache.unqueried == 1
                record: list[ChatMessage] = await handle.query(
                    names.QUERY_MESSAGES, result_type=list[ChatMessage]
                )
                await handle.signal("cancel")
                await asyncio.wait_for(handle.result(), 60)
        received = fake.received_messages()
    sent = one.sent + two.sent
    assert [len(got) for _, got in sent] == [1, 3, 6, 8, 10, 12]
    for (request, got), wire in zip(sent, received, strict=True):
        assert got == record[: request.message_count]
        assert shape(wire) == shape(got)
    assert [m.content for m in record if m.role == "user"] == [
        "read a, b",
        "sure?",
        "really?",
        "bye",
    ]
