"""What a local model's user meets, through a real worker: the real `AgentActivities` (the real
httpx client) against the strict fake server on 127.0.0.1, on the dev server.

- a call written as text in the reply is run as that call, and the next request is well-formed;
- a server that says nothing for longer than LLM_TIMEOUT_SECONDS costs three attempts, not eight,
  and the run's error names the setting;
- the worker's AGENT_SYSTEM_PROMPT goes first when the run brings no system message;
- a request too long for the window reaches the workflow as `LlmContextExceeded` with the sizes
  in its details, after one request;
- `call_llm` returns the `max_tokens` its request carried.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.tools import build_default_registry
from runtime.settings import Settings
from tests.fake_openai import FakeOpenAI, Stall, text
from tests.helpers import events, start_run, wait_for_phase
from tests.workflow.test_llm_runs import one_call
from workflows import names
from workflows.conversation.record import invariant_violations
from workflows.model import (
    AgentRunInput,
    ChatMessage,
    ErrorEvent,
    LlmRequest,
)
from workflows.run.agent import AgentWorkflow

SYSTEM = "After a tool response, answer in plain text."


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def http():
    async with httpx.AsyncClient() as client:
        yield client


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "logs").mkdir(parents=True)
    (ws / "notes.txt").write_text("remember the milk\n")
    return ws


def settings_for(base_url: str, workspace: Path, **values: Any) -> Settings:
    return Settings(
        llm_base_url=base_url,
        llm_api_key=None,
        llm_model="fake-model",
        workspace=workspace,
        state_dir=workspace.parent / "state",
        **values,
    )


async def run_agent(
    client: Client,
    task_queue: str,
    settings: Settings,
    http: httpx.AsyncClient,
    run_input: AgentRunInput,
) -> tuple[Any, list[Any]]:
    acts = AgentActivities(client, settings, build_default_registry(settings.workspace), http)
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=acts.all()
    ):
        handle = await start_run(client, task_queue, run_input, f"local-{uuid.uuid4()}")
        result = await asyncio.wait_for(handle.result(), 60)
        log = await events(handle)
    return result, log


# ---------------------------------------------------------------- calls written as text


async def test_a_call_written_as_text_runs_and_the_next_request_is_well_formed(
    client, task_queue, fake, workspace, http
):
    fake.enqueue(
        text('```json\n{"name": "read_file", "arguments": {"path": "notes.txt"}}\n```'),
        text("It says: remember the milk."),
    )
    result, log = await run_agent(
        client,
        task_queue,
        settings_for(fake.base_url, workspace),
        http,
        AgentRunInput.from_prompt("What does notes.txt say?"),
    )
    assert result.finish_reason == "stop"
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "assistant"]
    call = (result.messages[1].tool_calls or [])[0]
    assert call.name == "read_file" and json.loads(call.arguments) == {"path": "notes.txt"}
    assert result.messages[1].content == ""
    assert json.loads(result.messages[2].content) == {"ok": True, "data": "remember the milk\n"}
    assert [e.type for e in log if e.type in ("tool_call", "tool_result")] == [
        "tool_call",
        "tool_result",
    ]
    second = fake.requests[1]["messages"]
    assert second[1]["tool_calls"][0]["function"]["name"] == "read_file"
    assert second[2] == {
        "role": "tool",
        "content": result.messages[2].content,
        "tool_call_id": second[1]["tool_calls"][0]["id"],
    }
    assert fake.rejected == 0 and fake.refusals == []
    for conversation in fake.received_messages():
        assert invariant_violations(conversation, allow_open_tail=False) == []


async def test_call_llm_says_the_calls_came_from_text(client, task_queue, fake, workspace, http):
    fake.enqueue(text('<tool_call>{"name": "list_dir", "arguments": {"path": "."}}</tool_call>'))
    settings = settings_for(fake.base_url, workspace, stream_deltas=False)
    response = await one_call(client, task_queue, settings, http, tools=["list_dir"])
    assert response.calls_from_text is True
    assert [c.name for c in response.message.tool_calls or []] == ["list_dir"]


async def test_a_text_call_to_a_tool_the_run_lacks_is_a_warning_in_the_reply(
    client, task_queue, fake, workspace, http
):
    fake.enqueue(
        text('<tool_call>{"name": "delete_path", "arguments": {"path": "logs"}}</tool_call>')
    )
    settings = settings_for(fake.base_url, workspace, stream_deltas=False)
    response = await one_call(client, task_queue, settings, http, tools=["list_dir"])
    assert response.message.tool_calls is None and response.calls_from_text is False
    assert len(response.warnings) == 1 and "`delete_path`" in response.warnings[0]


async def test_a_bare_json_reply_is_an_answer_and_a_template_call_waits_marked_from_text(
    client, task_queue, fake, workspace, http
):
    """The user asked to see a file that holds a call-shaped object: the model's reply, only
    that object, is the run's answer (nothing runs, a warning says how to read it as a call).
    Then a call in `<tool_call>` markers with the chat template's doubled braces is the call it
    is: it waits for a person, marked `from_text` in its event and in the pending call."""
    quoted = '{"name": "delete_path", "arguments": {"path": "logs"}}'
    fake.enqueue(text(quoted))
    result, log = await run_agent(
        client,
        task_queue,
        settings_for(fake.base_url, workspace),
        http,
        AgentRunInput.from_prompt("Show me what plan.json holds, as it is."),
    )
    assert result.finish_reason == "stop" and result.messages[-1].content == quoted
    assert not [e for e in log if e.type == "tool_call"]
    assert any("LLM_TEXT_TOOL_CALLS=bare" in e.message for e in log if e.type == "warning")
    assert (workspace / "logs").is_dir()

    fake.enqueue(
        text('<tool_call>\n{{"name": "delete_path", "arguments": {"path": "logs"}}}\n</tool_call>')
    )
    settings = settings_for(fake.base_url, workspace)
    acts = AgentActivities(client, settings, build_default_registry(workspace), http)
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=acts.all()
    ):
        handle = await start_run(
            client, task_queue, AgentRunInput.from_prompt("Delete logs."), f"local-{uuid.uuid4()}"
        )
        waiting = await wait_for_phase(handle, "awaiting_approval", timeout=30)
        [pending] = waiting.pending_approvals
        assert pending.name == "delete_path" and pending.from_text is True
        [event] = [e for e in await events(handle) if e.type == "tool_call"]
        assert event.from_text is True and event.requires_approval is True
        await handle.terminate("test over")
    assert (workspace / "logs").is_dir()


# ---------------------------------------------------------------- a silent server


async def test_a_silent_server_costs_three_attempts_and_names_the_setting(
    client, task_queue, fake, workspace, http
):
    for _ in range(8):
        fake.enqueue(Stall(seconds=2.0, then=text("too late")))
    settings = settings_for(fake.base_url, workspace, llm_timeout_seconds=0.4)
    result, log = await run_agent(
        client, task_queue, settings, http, AgentRunInput.from_prompt("hello")
    )
    assert result.finish_reason == "error"
    assert fake.request_count == 3  # the workflow's retry policy allows 8
    errors = [e for e in log if isinstance(e, ErrorEvent)]
    assert len(errors) == 1
    assert "timed out after 0.4 s without a byte from the server (LLM_TIMEOUT_SECONDS)" in (
        errors[0].message
    )


# ---------------------------------------------------------------- the worker's system prompt


async def test_the_workers_system_prompt_goes_first(client, task_queue, fake, workspace, http):
    settings = settings_for(fake.base_url, workspace, system_prompt=SYSTEM)
    result, _ = await run_agent(
        client, task_queue, settings, http, AgentRunInput.from_prompt("list")
    )
    assert result.finish_reason == "stop"
    assert fake.request_count == 2
    for body in fake.requests:
        assert body["messages"][0] == {"role": "system", "content": SYSTEM}
        assert body["messages"][1] == {"role": "user", "content": "list"}
    assert all(m.role != "system" for m in result.messages)  # the run's record is its own


async def test_a_runs_own_system_message_wins(client, task_queue, fake, workspace, http):
    settings = settings_for(fake.base_url, workspace, system_prompt=SYSTEM)
    run_input = AgentRunInput(
        messages=[ChatMessage.system("You are terse."), ChatMessage.user("hello")]
    )
    result, _ = await run_agent(client, task_queue, settings, http, run_input)
    assert result.finish_reason == "stop"
    sent = fake.requests[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]
    assert sent[0]["content"] == "You are terse."


# ---------------------------------------------------------------- the window, seen by a workflow


@workflow.defn(name="ContextExceededProbe", sandboxed=False)
class ContextExceededProbe:
    """Calls `call_llm` once (with the workflow's own retry policy of 8 attempts) and returns
    how it failed, as a workflow sees the activity's error."""

    def __init__(self) -> None:
        self._messages: list[ChatMessage] = []

    @workflow.run
    async def run(self, messages: list[ChatMessage]) -> dict[str, Any]:
        self._messages = messages
        info = workflow.info()
        request = LlmRequest(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            message_count=len(messages),
            round=0,
            tools=[],
        )
        try:
            await workflow.execute_activity(
                names.ACTIVITY_CALL_LLM,
                request,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=8, initial_interval=timedelta(seconds=1)),
            )
        except ActivityError as err:
            cause = err.cause
            assert isinstance(cause, ApplicationError)
            return {"type": cause.type, "details": list(cause.details), "message": cause.message}
        return {}

    @workflow.query(name=names.QUERY_MESSAGES)
    def messages(self) -> list[ChatMessage]:
        return self._messages


@pytest.mark.parametrize("flavour", ["llama.cpp", "openai", "vllm"])
async def test_a_request_too_long_reaches_the_workflow_with_the_sizes(
    client, task_queue, fake, workspace, http, flavour
):
    fake.flavour = flavour
    fake.context_tokens = 2048
    settings = settings_for(fake.base_url, workspace, stream_deltas=False)
    acts = AgentActivities(client, settings, build_default_registry(workspace), http)
    async with Worker(
        client, task_queue=task_queue, workflows=[ContextExceededProbe], activities=acts.all()
    ):
        seen = await client.execute_workflow(
            ContextExceededProbe.run,
            [ChatMessage.user("x" * 9_000)],
            id=f"window-{uuid.uuid4()}",
            task_queue=task_queue,
        )
    assert seen["type"] == "LlmContextExceeded"
    request_tokens = seen["details"][0]["request_tokens"]
    assert seen["details"] == [{"context_tokens": 2048, "request_tokens": request_tokens}]
    assert request_tokens > 2048
    assert fake.request_count == 1  # not retried


async def test_the_workers_context_window(client, fake, workspace, http):
    fake.flavour = "llama.cpp"
    fake.context_tokens = 8192
    registry = build_default_registry(workspace)
    asked = AgentActivities(client, settings_for(fake.base_url, workspace), registry, http)
    assert await asked.context_window() == 8192
    assert await asked.context_window() == 8192
    assert fake.count("props_requests") == 1
    told = settings_for(fake.base_url, workspace, llm_context_tokens=4000)
    assert await AgentActivities(client, told, registry, http).context_window() == 4000
    offline = Settings(
        llm_base_url=None,
        llm_api_key=None,
        llm_model="m",
        workspace=workspace,
        state_dir=workspace.parent / "state",
    )
    assert await AgentActivities(client, offline, registry, http).context_window() == 128_000


async def test_the_workers_summary_text(client, fake, workspace, http):
    registry = build_default_registry(workspace)
    turns = [ChatMessage.user("Read notes.txt"), ChatMessage.assistant("It says: milk.")]
    fake.enqueue(text("The user read notes.txt: milk."))
    settings = settings_for(fake.base_url, workspace, llm_summary_model="small")
    asked = AgentActivities(client, settings, registry, http)
    assert await asked.summary_text(turns, model="run-model") == "The user read notes.txt: milk."
    assert fake.requests[0]["model"] == "small" and "tools" not in fake.requests[0]
    offline = Settings(
        llm_base_url=None,
        llm_api_key=None,
        llm_model="m",
        workspace=workspace,
        state_dir=workspace.parent / "state",
    )
    summary = await AgentActivities(client, offline, registry, http).summary_text(turns)
    assert summary.splitlines()[1:] == ["- user: Read notes.txt", "- assistant: It says: milk."]


# ---------------------------------------------------------------- max_tokens in the reply


async def test_call_llm_returns_the_max_tokens_it_sent(client, task_queue, fake, workspace, http):
    settings = settings_for(fake.base_url, workspace, llm_max_tokens=64, stream_deltas=False)
    assert (await one_call(client, task_queue, settings, http, max_tokens=16)).max_tokens == 16
    assert (await one_call(client, task_queue, settings, http)).max_tokens == 64
    assert [body["max_tokens"] for body in fake.requests] == [16, 64]
