"""A long session against a model with a small window, through a real worker: the real
activities and their httpx client against the strict fake server on 127.0.0.1 behaving as
llama.cpp with `--ctx-size 2048` (its `/props` says `n_ctx`, a request that does not fit gets its
400 `exceed_context_size_error`). A `--keep-alive` session of user messages that each make the
model read a 2-12 KB file runs to the end with no error; the record keeps every message."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.tools import build_default_registry
from tests.fake_openai import FakeOpenAI, prompt_tokens
from tests.helpers import events, of_type, start_run, wait_for_phase
from tests.workflow.test_llm_local_models import settings_for
from workflows import names
from workflows.conversation.record import invariant_violations
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage
from workflows.run.agent import AgentWorkflow

WINDOW = 2_048
SIZES = [2_000, 12_000, 4_000, 9_000, 3_000, 12_000, 6_000, 2_500, 11_000, 7_000]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i, size in enumerate(SIZES):
        line = f"line of file {i}: the quick brown fox jumps over the lazy dog\n"
        (ws / f"f{i}.txt").write_text((line * (size // len(line) + 1))[:size])
    return ws


async def test_a_keep_alive_session_outlives_a_2048_token_window(
    client: Client, task_queue: str, workspace: Path
) -> None:
    with FakeOpenAI() as fake:
        fake.flavour = "llama.cpp"
        fake.context_tokens = WINDOW
        settings = settings_for(fake.base_url, workspace, stream_deltas=False, llm_max_tokens=256)
        async with httpx.AsyncClient() as http:
            acts = AgentActivities(client, settings, build_default_registry(workspace), http)
            async with Worker(
                client, task_queue=task_queue, workflows=[AgentWorkflow], activities=acts.all()
            ):
                options = AgentRunOptions(keep_alive=True)
                run_input = AgentRunInput.from_prompt("read f0.txt", options)
                handle = await start_run(client, task_queue, run_input, f"long-{uuid.uuid4()}")
                for i in range(1, len(SIZES)):
                    await wait_for_phase(handle, "waiting_for_message", timeout=60)
                    await handle.signal(names.SIGNAL_SEND_MESSAGE, {"content": f"read f{i}.txt"})
                    await asyncio.sleep(0)
                await wait_for_phase(handle, "waiting_for_message", timeout=60)
                record = await handle.query(names.QUERY_MESSAGES, result_type=list[ChatMessage])
                log = await events(handle)
                await handle.signal(names.SIGNAL_CANCEL)
                result = await handle.result()
        prompts = [prompt_tokens(body) for body in fake.requests]
        refused = len(fake.refusals)
    assert of_type(log, "error") == [] or result.finish_reason == "cancelled"
    assert [e.message for e in of_type(log, "error")] in ([], ["Agent run cancelled"])
    compactions = of_type(log, "compaction")
    assert compactions, "the session never compacted"
    # Every user message, every read and every answer is in the record.
    users = [m.content for m in record if m.role == "user"]
    assert users == [f"read f{i}.txt" for i in range(len(SIZES))]
    reads = [m for m in record if m.role == "tool"]
    assert len(reads) == len(SIZES)
    assert invariant_violations([m for m in record if m.role != "system"]) == []
    print(
        f"{len(SIZES)} messages, {len(compactions)} compactions, {refused} requests refused,"
        f" peak prompt sent {max(p for p in prompts if p < WINDOW)} of {WINDOW} tokens"
    )
    accepted = [p for p in prompts if p < WINDOW]
    assert len(accepted) == len(prompts) - refused and refused <= 2
