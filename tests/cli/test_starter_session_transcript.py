"""A session's transcript shows its turns apart: a real `python -m starter run --keep-alive`
and a real `python -m starter watch` follow a session whose model (the real client against the
fake OpenAI-compatible server on 127.0.0.1) streams its replies, while a second message arrives
during the first reply. Each user message is a line of its own (`user: …`) where its turn
begins, and each streamed answer ends its own line; a closed session's watch shows them the same
way, from its history."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from runtime.settings import Settings
from tests import fake_openai
from tests.cli.test_starter import Agent, new_id, seed
from tests.cli.test_starter_watch_outage import Follower, starter_process
from tests.helpers import wait_for_phase, wait_until
from worker import run_worker
from workflows import names

FIRST, SECOND = "What does item 1 say?", "And the report?"
ANSWER_1, ANSWER_2 = 'It says "item 1".', "The report says 2 sites need attention."


@pytest.fixture
def model() -> Iterator[fake_openai.FakeOpenAIServer]:
    with fake_openai.FakeOpenAI() as server:
        yield server


@pytest.fixture
async def agent(
    client: Client, task_queue: str, tmp_path: Path, model: fake_openai.FakeOpenAIServer
) -> AsyncIterator[Agent]:
    workspace = seed(tmp_path / "workspace")
    settings = Settings.from_env(
        {
            "AGENT_WORKSPACE": str(workspace),
            "AGENT_STATE_DIR": str(tmp_path / "state"),
            "LLM_BASE_URL": model.base_url,
            "LLM_API_KEY": "sk-test",
            "LLM_MODEL": "fake-model",
            "AGENT_STREAM_FLUSH_SECONDS": "0.2",
        }
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        run_worker(client, settings, queue=task_queue, stop=stop, ready=lambda _q: ready.set())
    )
    await asyncio.wait_for(ready.wait(), 30)
    try:
        yield Agent(client, client.service_client.config.target_host, task_queue, workspace)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def printed(follower: Follower, text: str) -> Callable[[], bool]:
    return lambda: text in follower.out


def assert_turns_apart(transcript: str, said: str) -> None:
    lines = transcript.splitlines()
    wanted = [
        f"user: {FIRST}",
        f"assistant: {ANSWER_1}",
        f"user: {SECOND}",
        f"assistant: {ANSWER_2}",
    ]
    for line in wanted:
        assert line in lines, said
    assert [lines.index(line) for line in wanted] == sorted(lines.index(line) for line in wanted), (
        said
    )
    assert lines.count(f"user: {SECOND}") == 1, said


async def test_run_and_watch_show_each_user_message_and_end_each_answer(
    agent: Agent, model: fake_openai.FakeOpenAIServer
) -> None:
    # The first reply waits a little, so the second message arrives while the model answers:
    # the second turn's text then follows the first's at once, with nothing printed between.
    # Both stream at a reading pace, so followers get them piece by piece.
    model.enqueue(
        fake_openai.Stall(seconds=4.0, then=fake_openai.text(ANSWER_1, chunk_delay=0.1)),
        fake_openai.text(ANSWER_2, chunk_delay=0.1),
    )
    workflow_id = new_id()
    async with starter_process(agent, "run", "--keep-alive", "--id", workflow_id, FIRST) as run:
        handle = agent.handle(workflow_id)
        await wait_until(lambda: model.request_count >= 1, timeout=40)
        async with starter_process(agent, "watch", workflow_id) as watcher:
            await handle.signal(names.SIGNAL_SEND_MESSAGE, {"content": SECOND})
            await wait_until(lambda: model.request_count >= 2, timeout=40)
            await wait_for_phase(handle, "waiting_for_message", timeout=40)
            for follower in (run, watcher):
                await wait_until(printed(follower, ANSWER_2), timeout=30)
            await handle.signal(names.SIGNAL_CANCEL, {"reason": "test over"})
            for follower in (run, watcher):
                assert follower.pump is not None
                await asyncio.wait_for(follower.pump, 60)
    for follower in (run, watcher):
        assert follower.proc.returncode == 3, follower.said()  # followed to its cancel
        assert_turns_apart(follower.out, follower.said())

    closed = await agent.cli("watch", workflow_id)  # the closed session, from its history
    assert closed.code == 3, closed
    assert_turns_apart(closed.stdout, str(closed))
