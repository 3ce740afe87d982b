"""The end-to-end story against a real OpenAI-compatible server (llama.cpp's `llama-server`,
vLLM, a hosted API): a real worker with the real activities on the dev server, a model asked to
list the workspace and run a command that needs approval, the approval given, the run finished.

Skipped unless `AGENT_E2E_LLM_BASE_URL` is set (see docs/real-model-servers.md):

    AGENT_E2E_LLM_BASE_URL=http://127.0.0.1:8080/v1 .venv/bin/pytest -s tests/test_real_model_server.py

Optional: `AGENT_E2E_LLM_MODEL` (default `local`: llama-server serves the model it loaded, whatever
the name), `AGENT_E2E_LLM_API_KEY`, `AGENT_E2E_LLM_MAX_TOKENS` (default 512, so a model that does
not stop cannot run a round to its context limit), `AGENT_E2E_LLM_TIMEOUT_SECONDS` (default 900,
the whole story).

A small model is not reliable, so the tests assert only what must hold whatever it says: the run
closes `stop` or `max_rounds` with no `error` event, every request the server got was accepted
(no 4xx/5xx: the conversation is always one a strict server takes, even with a cut-off call in its
history), approvals are asked only for tools that need them, and the ordering invariant holds on
the final messages. What the model did is printed (run with `-s` to see it).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.llm import OpenAIChatClient
from activities.settings import Settings
from activities.tools import build_default_registry
from tests.helpers import events, status
from workflows import names
from workflows.agent import AgentWorkflow
from workflows.conversation import invariant_violations
from workflows.model import (
    AgentEvent,
    AgentRunInput,
    AgentRunOptions,
    AgentRunResult,
    ChatMessage,
    ErrorEvent,
    ToolApprovalResponse,
    ToolCall,
)
from workflows.tool_results import invalid_arguments_message

BASE_URL = (os.environ.get("AGENT_E2E_LLM_BASE_URL") or "").strip()
MODEL = (os.environ.get("AGENT_E2E_LLM_MODEL") or "").strip() or "local"
API_KEY = (os.environ.get("AGENT_E2E_LLM_API_KEY") or "").strip() or None
MAX_TOKENS = int(os.environ.get("AGENT_E2E_LLM_MAX_TOKENS") or 512)
TIMEOUT = float(os.environ.get("AGENT_E2E_LLM_TIMEOUT_SECONDS") or 900)

pytestmark = pytest.mark.skipif(
    not BASE_URL,
    reason=(
        "needs a real OpenAI-compatible server: set AGENT_E2E_LLM_BASE_URL (e.g."
        " http://127.0.0.1:8080/v1 for `llama-server --jinja`; optional AGENT_E2E_LLM_MODEL,"
        " AGENT_E2E_LLM_API_KEY); see docs/real-model-servers.md"
    ),
)

SYSTEM = (
    "You are a file manager assistant working in a workspace folder. You act only through the"
    " tools you are given: list_dir, read_file, run_command (needs a person's approval) and"
    " delete_path (needs approval). Call a tool when the user asks for something; answer in one"
    " short sentence when you are done."
)
PROMPT = (
    "List the files in the workspace with list_dir, then use run_command to run `ls -la` and"
    " tell me what you found."
)
SAFE_COMMAND = re.compile(r"^\s*(ls|pwd|cat|head|wc|echo|date|whoami)\b[^;&|`$><]*$")
"""Commands this test approves: they read and print, nothing else (the workspace is a temporary
folder, but a command can reach beyond it). Anything else is rejected with a reason."""


@dataclass
class Exchange:
    """What went over the wire: the status of every response the server sent."""

    statuses: list[int] = field(default_factory=list)

    async def on_response(self, response: httpx.Response) -> None:
        self.statuses.append(response.status_code)


@pytest.fixture
async def watched_http() -> AsyncIterator[tuple[httpx.AsyncClient, Exchange]]:
    exchange = Exchange()
    hooks: dict[str, list[Any]] = {"response": [exchange.on_response]}
    async with httpx.AsyncClient(event_hooks=hooks) as http:
        yield http, exchange


def seeded_workspace(root: Path) -> Path:
    workspace = root / "workspace"
    (workspace / "logs").mkdir(parents=True)
    (workspace / "logs" / "app.log").write_text("started\nstopped\n")
    (workspace / "notes.txt").write_text("remember the milk\n")
    return workspace


def real_settings(workspace: Path) -> Settings:
    return Settings(
        llm_base_url=BASE_URL,
        llm_api_key=API_KEY,
        llm_model=MODEL,
        workspace=workspace,
        state_dir=workspace.parent / "state",
        llm_timeout_seconds=300.0,
        llm_max_tokens=MAX_TOKENS,
    )


def story_input() -> AgentRunInput:
    """The prompt, after an earlier turn whose reply was cut off mid-arguments: the first request
    already carries a call whose arguments (`{"path":`) a strict server cannot parse."""
    cut = ToolCall(id="earlier_1", name="list_dir", arguments='{"path":')
    return AgentRunInput(
        messages=[
            ChatMessage.system(SYSTEM),
            ChatMessage.user("What is in the workspace?"),
            ChatMessage.assistant("", [cut]),
            ChatMessage.tool(cut, invalid_arguments_message("Expecting value at position 8")),
            ChatMessage.assistant("That call was cut off; ask me again."),
            ChatMessage.user(PROMPT),
        ],
        options=AgentRunOptions(max_rounds=6),
    )


async def drive(
    handle: WorkflowHandle[Any, Any], guarded: set[str], approvals: list[tuple[ToolCall, bool]]
) -> AgentRunResult:
    """Answer every approval the run asks for until it finishes: safe commands and deletions in
    the temporary workspace are approved, anything else rejected with a reason."""
    answered: set[str] = set()
    deadline = time.monotonic() + TIMEOUT
    result_task = asyncio.ensure_future(handle.result())
    try:
        while not result_task.done():
            if time.monotonic() > deadline:
                raise AssertionError(f"the run did not finish in {TIMEOUT:.0f} s")
            current = await status(handle)
            for call in current.pending_approvals:
                if call.id in answered:
                    continue
                answered.add(call.id)
                approve = call.name != "run_command" or _safe(call.arguments)
                approvals.append((call, approve))
                assert call.name in guarded, f"approval asked for {call.name}, which needs none"
                await handle.signal(
                    names.SIGNAL_TOOL_APPROVAL,
                    ToolApprovalResponse(
                        call_id=call.id,
                        approved=approve,
                        reason=None if approve else "only read-only commands are approved here",
                        approver="real-model-test",
                    ),
                )
            await asyncio.wait({result_task}, timeout=0.5)
        result: AgentRunResult = result_task.result()
        return result
    finally:
        result_task.cancel()


def _safe(arguments: Any) -> bool:
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return False
    command = value.get("command") if isinstance(value, dict) else None
    return isinstance(command, str) and bool(SAFE_COMMAND.match(command))


def report(
    result: AgentRunResult,
    log: list[AgentEvent],
    approvals: list[tuple[ToolCall, bool]],
    exchange: Exchange,
) -> None:
    calls = [c for m in result.messages if m.tool_calls for c in m.tool_calls]
    print(f"\n--- real model server {BASE_URL} (model {MODEL}) ---")
    print(f"finish_reason={result.finish_reason} rounds={result.rounds} usage={result.usage}")
    print(f"requests={len(exchange.statuses)} statuses={exchange.statuses}")
    for call in calls:
        print(f"tool call {call.id} {call.name} {str(call.arguments)[:120]!r}")
    for call, approved in approvals:
        print(f"approval {call.id} {call.name}: {'approved' if approved else 'rejected'}")
    for event in log:
        if event.type in ("warning", "error", "finished"):
            print(f"event {event.model_dump(mode='json')}")
    print(f"last message: {result.messages[-1].content[:300]!r}")


async def test_the_story_against_a_real_model_server(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    watched_http: tuple[httpx.AsyncClient, Exchange],
) -> None:
    http, exchange = watched_http
    workspace = seeded_workspace(tmp_path)
    settings = real_settings(workspace)
    registry = build_default_registry(workspace)
    guarded = {spec.name for spec in registry.specs() if spec.requires_approval}
    acts = AgentActivities(client, settings, registry, http)
    approvals: list[tuple[ToolCall, bool]] = []
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=acts.all()
    ):
        handle = await client.start_workflow(
            AgentWorkflow.run, story_input(), id=f"real-{uuid.uuid4()}", task_queue=task_queue
        )
        result = await drive(handle, guarded, approvals)
        log = await events(handle)
    report(result, log, approvals, exchange)

    assert result.finish_reason in ("stop", "max_rounds"), result.error
    assert [e.message for e in log if isinstance(e, ErrorEvent)] == []
    assert exchange.statuses and all(s < 400 for s in exchange.statuses), exchange.statuses
    assert invariant_violations(result.messages, allow_open_tail=False) == []
    answered = {m.tool_call_id for m in result.messages if m.role == "tool"}
    assert all(call.id in answered for call, _ in approvals)  # every answer reached the model
    assert (workspace / "notes.txt").exists()  # nothing the test did not approve happened


async def test_max_tokens_bounds_a_real_reply(watched_http: tuple[httpx.AsyncClient, Exchange]):
    http, exchange = watched_http
    llm = OpenAIChatClient(http, BASE_URL, API_KEY, MODEL, timeout=httpx.Timeout(300.0))
    reply = await llm.complete(
        [ChatMessage.user("Count from one to two hundred, one number per line.")], max_tokens=8
    )
    print(f"\nmax_tokens=8: finish_reason={reply.finish_reason} usage={reply.usage}")
    assert exchange.statuses == [200]
    assert reply.finish_reason in ("length", "stop")
    assert reply.usage.completion_tokens <= 8
