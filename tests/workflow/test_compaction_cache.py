"""Compaction as a server's prompt cache sees it, through a real worker: the real
`AgentActivities` and tools against the strict fake server on 127.0.0.1 (as llama.cpp: its window
read from `/props`, requests past it refused), on the dev server.

A big file read once and then many small ones: the request with the big file fits the window, so
it is sent whole; the view is compacted once, when the big round leaves the last rounds (its
result dropped, which makes room for many rounds), and between compactions every request the
server received starts with the one before it."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.tools import build_default_registry
from runtime.settings import Settings
from tests.fake_openai import FakeOpenAI, text, tool_calls
from tests.helpers import events, of_type, start_run
from workflows.conversation.record import invariant_violations
from workflows.model import AgentRunInput, AgentRunOptions
from workflows.run.agent import AgentWorkflow

WINDOW = 5_300
BIG = 11_400
"""The big file: with it the request passes `compact_at` (0.8) of the window, within it."""
SMALL_READS = 11


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        server.flavour = "llama.cpp"
        server.context_tokens = WINDOW
        yield server


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.txt").write_text("lorem " * (BIG // 6))
    for i in range(SMALL_READS):
        (ws / f"small{i}.txt").write_text(f"note {i}\n")
    return ws


async def run_session(client: Any, task_queue: str, fake: Any, workspace: Path) -> Any:
    settings = Settings(
        llm_base_url=fake.base_url,
        llm_api_key=None,
        llm_model="fake-model",
        workspace=workspace,
        state_dir=workspace.parent / "state",
        stream_deltas=False,
    )
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
        acts = AgentActivities(client, settings, build_default_registry(workspace), http)
        async with Worker(
            client, task_queue=task_queue, workflows=[AgentWorkflow], activities=acts.all()
        ):
            handle = await start_run(
                client,
                task_queue,
                AgentRunInput.from_prompt("Read big.txt, then each small file.", options),
                f"cache-{uuid.uuid4()}",
            )
            result = await asyncio.wait_for(handle.result(), 120)
            log = await events(handle)
    return result, log


async def test_a_compaction_is_rare_and_between_two_the_requests_share_their_prefix(
    client, task_queue, fake, workspace
):
    result, log = await run_session(client, task_queue, fake, workspace)
    assert result.finish_reason == "stop", result.error
    assert fake.refusals == [] and fake.rejected == 0
    sent = [request["messages"] for request in fake.requests]
    assert len(sent) == SMALL_READS + 2
    # The request right after the big read fits the window: the big file goes whole.
    assert sent[1][-1]["role"] == "tool" and len(sent[1][-1]["content"]) > BIG
    assert "cut to fit" not in sent[1][-1]["content"]
    # One compaction in the whole session (the big result dropped once it is old) ...
    compactions = of_type(log, "compaction")
    assert len(compactions) == 1, [c.model_dump() for c in compactions]
    [compaction] = compactions
    assert compaction.dropped_results == 1 and compaction.cut_results == 0
    assert compaction.after_tokens <= 0.5 * WINDOW
    # ... and every other request the server received extends the one before it.
    breaks = [n for n in range(1, len(sent)) if sent[n][: len(sent[n - 1])] != sent[n - 1]]
    assert len(breaks) == 1, breaks
    for conversation in fake.received_messages():
        assert invariant_violations(conversation, allow_open_tail=False) == []
