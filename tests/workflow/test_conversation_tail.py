"""A model call fetches only what is new of the conversation, and the model still receives
exactly what the whole conversation says: through a real worker (the real `AgentActivities`
against the strict fake server on 127.0.0.1), on the dev server. Every fetch is checked against
the whole `messages`/`model_view` query, across rounds, after a compaction, after a user message
of a session, with the worker's cache cold (a fresh worker), warm, and holding a wrong prefix."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.conversation_cache import ConversationCache, Held
from activities.tools import build_default_registry
from runtime.settings import Settings
from tests.fake_openai import FakeOpenAI, FakeOpenAIServer, text, tool_calls
from tests.helpers import events, of_type, start_run, wait_for_phase, wait_until
from tests.workflow.test_compaction_cache import BIG, SMALL_READS, WINDOW
from workflows import names
from workflows.conversation.tail import EMPTY_DIGEST, ConversationTail, TailRequest, extend
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage, LlmRequest
from workflows.run.agent import AgentWorkflow


class Checked(AgentActivities):
    """The real activities, each fetch compared with the whole conversation the run holds."""

    def __init__(self, client: Client, settings: Settings, workspace: Path, http: Any) -> None:
        super().__init__(client, settings, build_default_registry(workspace), http)
        self.fetched: list[tuple[bool, list[ChatMessage], list[ChatMessage]]] = []

    @property
    def cache(self) -> ConversationCache:
        return self._conversations

    async def _conversation(self, request: LlmRequest) -> list[ChatMessage]:
        got = await super()._conversation(request)
        handle = self._temporal().get_workflow_handle(request.workflow_id, run_id=request.run_id)
        query = names.QUERY_MODEL_VIEW if request.view else names.QUERY_MESSAGES
        whole = await handle.query(query, result_type=list[ChatMessage])
        self.fetched.append((request.view, got, whole[: request.message_count]))
        return got


async def answered(handle: Any, fake: FakeOpenAIServer, requests: int) -> None:
    """Wait until the model was asked `requests` times and the session waits again."""
    await wait_until(lambda: len(fake.requests) == requests)
    await wait_for_phase(handle, "waiting_for_message")


def settings(fake: FakeOpenAIServer, workspace: Path) -> Settings:
    return Settings(
        llm_base_url=fake.base_url,
        llm_api_key=None,
        llm_model="fake-model",
        workspace=workspace,
        state_dir=workspace.parent / "state",
        stream_deltas=False,
    )


async def test_across_rounds_and_a_compaction_the_model_receives_the_whole_conversation(
    client, task_queue, tmp_path
):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "big.txt").write_text("lorem " * (BIG // 6))
    for i in range(SMALL_READS):
        (workspace / f"small{i}.txt").write_text(f"note {i}\n")
    with FakeOpenAI() as fake:
        fake.flavour = "llama.cpp"
        fake.context_tokens = WINDOW
        fake.enqueue(
            tool_calls(("c0", "read_file", '{"path": "big.txt"}')),
            *(
                tool_calls((f"c{i + 1}", "read_file", f'{{"path": "small{i}.txt"}}'))
                for i in range(SMALL_READS)
            ),
            text("All read."),
        )
        options = AgentRunOptions(max_rounds=30, keep_rounds=4, max_tokens=100)
        async with httpx.AsyncClient() as http:
            acts = Checked(client, settings(fake, workspace), workspace, http)
            async with Worker(
                client, task_queue=task_queue, workflows=[AgentWorkflow], activities=acts.all()
            ):
                handle = await start_run(
                    client,
                    task_queue,
                    AgentRunInput.from_prompt("Read big.txt, then each small file.", options),
                    f"tail-{uuid.uuid4()}",
                )
                result = await asyncio.wait_for(handle.result(), 120)
                log = await events(handle)
        received = fake.received_messages()
    assert result.finish_reason == "stop", result.error
    assert len(of_type(log, "compaction")) == 1
    assert len(acts.fetched) == SMALL_READS + 2
    assert any(view for view, _, _ in acts.fetched)  # the compacted view was fetched too
    for _, got, whole in acts.fetched:
        assert got == whole
    assert [m.content for m in received[-1] if m.role != "system"] == [
        m.content for m in acts.fetched[-1][2] if m.role != "system"
    ]
    # Only the fetch right after the compaction (its view changed) read the whole conversation;
    # the first request carried its short prompt, and every other was rebuilt from what the
    # worker held and the results it returned (`LlmRequest.tail`), with no query.
    assert (acts.cache.whole, acts.cache.reused, acts.cache.unqueried) == (1, 0, SMALL_READS + 1)


PROMPT = "read a.txt " + "please " * 400
"""Too long for a request to carry (`conversation_parts.INLINE_BYTES`): a cold worker reads it."""


async def test_a_session_with_a_cold_a_warm_and_a_wrong_cache(client, task_queue, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("text of a\n")
    with FakeOpenAI() as fake:
        fake.enqueue(
            tool_calls(("c1", "read_file", '{"path": "a.txt"}')),
            text("It says: text of a."),
            text("Yes."),
            text("Still yes."),
            text("Bye."),
        )
        options = AgentRunOptions(keep_alive=True, max_rounds=5)
        async with httpx.AsyncClient() as http:
            first = Checked(client, settings(fake, workspace), workspace, http)
            async with Worker(
                client, task_queue=task_queue, workflows=[AgentWorkflow], activities=first.all()
            ):
                handle = await start_run(
                    client, task_queue, AgentRunInput.from_prompt(PROMPT, options)
                )
                await wait_for_phase(handle, "waiting_for_message")
                # Cold, then warm: rebuilt from this worker's results, no query.
                assert (first.cache.whole, first.cache.reused, first.cache.unqueried) == (1, 0, 1)
                await handle.signal("send_message", {"content": "sure?"})
                await answered(handle, fake, 3)
                # The user's message is carried in the request.
                assert (first.cache.whole, first.cache.reused, first.cache.unqueried) == (1, 0, 2)
                # A prefix of the right length but not the run's: never used (neither to rebuild the
                # conversation nor as a prefix the run confirms).
                [key] = first.cache.keys()
                held = first.cache.get(key)
                wrong = [*held.messages[:-1], ChatMessage.assistant("Nope.")]
                digest, size = extend(EMPTY_DIGEST, wrong)
                first.cache.put(key, Held(wrong, digest, size))
                await handle.signal("send_message", {"content": "really?"})
                await answered(handle, fake, 4)
                assert (first.cache.whole, first.cache.reused, first.cache.unqueried) == (2, 0, 2)
                confirmed = await handle.query(
                    names.QUERY_CONVERSATION_TAIL,
                    TailRequest(after=len(wrong), digest=digest),
                    result_type=ConversationTail,
                )
                assert confirmed.start == 0  # the run does not confirm it
            # A fresh worker: nothing held, the whole conversation once.
            second = Checked(client, settings(fake, workspace), workspace, http)
            async with Worker(
                client, task_queue=task_queue, workflows=[AgentWorkflow], activities=second.all()
            ):
                await handle.signal("send_message", {"content": "bye"})
                await answered(handle, fake, 5)
                assert (second.cache.whole, second.cache.reused, second.cache.unqueried) == (
                    1,
                    0,
                    0,
                )
                await handle.signal("cancel")
                await handle.result()
    fetched = first.fetched + second.fetched
    assert len(fetched) == 5
    for _, got, whole in fetched:
        assert got == whole
    assert [m.content for m in fetched[-1][1] if m.role == "user"] == [
        PROMPT,
        "sure?",
        "really?",
        "bye",
    ]
