"""What the model client guarantees a run, through a real worker: the real `AgentActivities`
(the real httpx client) against the strict fake OpenAI server on 127.0.0.1, on the dev server.

- a run whose history holds arguments a strict server cannot read still gets its next request
  accepted;
- a reply cut off at the token limit comes back with `finish_reason: "length"`;
- `max_tokens` reaches the server from the worker's setting and from the run's own request;
- a reply of the wrong shape ends the run `error` after one request (no retries paid);
- neither the key nor credentials in the endpoint URL reach the run's history or the logs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RetryPolicy
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.tools import build_default_registry
from runtime.settings import Settings
from tests.fake_openai import (
    FakeOpenAI,
    RawJson,
    RawStream,
    cut_short,
    text,
    tool_calls,
    unauthorized,
)
from tests.helpers import events, start_run
from tests.unit.test_llm_client import (
    URL_PASSWORD,
    URL_QUERY_KEY,
    WRONG_BODIES,
    WRONG_CHUNKS,
    credentialed,
)
from workflows import names
from workflows.model import (
    AgentEvent,
    AgentRunInput,
    AgentRunOptions,
    AgentRunResult,
    ChatMessage,
    ErrorEvent,
    LlmRequest,
    LlmResponse,
)
from workflows.run.agent import AgentWorkflow

API_KEY = "sk-runs-SECRET-5e2f"


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
        llm_api_key=values.pop("api_key", API_KEY),
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
    prompt: str = "list the workspace",
    options: AgentRunOptions | None = None,
) -> tuple[AgentRunResult, list[AgentEvent], WorkflowHandle[Any, Any]]:
    acts = AgentActivities(client, settings, build_default_registry(settings.workspace), http)
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=acts.all()
    ):
        handle = await start_run(
            client,
            task_queue,
            AgentRunInput.from_prompt(prompt, options),
            f"llm-runs-{uuid.uuid4()}",
        )
        result = await asyncio.wait_for(handle.result(), 45)
        log = await events(handle)
    return result, log, handle


def sent_arguments(body: dict[str, Any]) -> list[str]:
    return [
        call["function"]["arguments"]
        for message in body["messages"]
        for call in message.get("tool_calls") or []
    ]


# ---------------------------------------------------- the conversation a strict server gets


async def test_cut_off_arguments_in_history_still_make_an_acceptable_request(
    client, task_queue, fake, workspace, http
):
    fake.enqueue(tool_calls(("call_1", "list_dir", '{"path":')), text("Sorry, I will stop."))
    result, _, _ = await run_agent(client, task_queue, settings_for(fake.base_url, workspace), http)
    assert result.finish_reason == "stop"
    assert fake.rejected == 0 and fake.request_count == 2
    assert sent_arguments(fake.requests[1]) == ["{}"]
    stored = result.messages[1].tool_calls or []
    assert [c.arguments for c in stored] == ['{"path":']  # the history keeps what the model said
    assert "Invalid tool arguments" in result.messages[2].content


@pytest.mark.parametrize("force_json", [False, True], ids=["streamed", "not-streamed"])
async def test_a_length_cut_reply_then_an_acceptable_request(
    client, task_queue, fake, workspace, http, force_json
):
    whole, cut = ("call_1", "list_dir", '{"path": "."}'), ("call_2", "read_file", '{"path": "no')
    fake.enqueue(cut_short(whole, cut, force_json=force_json), text("Here is the listing."))
    result, _, _ = await run_agent(client, task_queue, settings_for(fake.base_url, workspace), http)
    assert result.finish_reason == "stop"
    assert fake.rejected == 0 and fake.request_count == 2
    assert sent_arguments(fake.requests[1]) == ['{"path": "."}', "{}"]
    assert json.loads(result.messages[2].content)["ok"] is True  # the whole call ran


@pytest.mark.parametrize("force_json", [False, True], ids=["streamed", "not-streamed"])
async def test_a_cut_off_call_that_needs_approval_never_waits_for_a_person(
    client, task_queue, fake, workspace, http, force_json
):
    whole = ("call_1", "list_dir", '{"path": "."}')
    cut = ("call_2", "run_command", '{"command": "rm -rf')
    fake.enqueue(cut_short(whole, cut, force_json=force_json), text("Listed; the rest was cut."))
    result, log, _ = await run_agent(
        client, task_queue, settings_for(fake.base_url, workspace), http
    )
    assert "awaiting_approval" not in [e.type for e in log]
    needs = {e.call_id: e.requires_approval for e in log if e.type == "tool_call"}
    assert needs == {"call_1": False, "call_2": False}
    assert any(e.type == "warning" and "token limit" in e.message for e in log)
    tools = {m.tool_call_id: m.content for m in result.messages if m.role == "tool"}
    assert json.loads(tools["call_1"])["ok"] is True
    assert "Invalid tool arguments" in tools["call_2"]
    assert fake.rejected == 0 and fake.request_count == 2
    assert result.finish_reason == "stop"


async def test_the_runs_max_tokens_reaches_the_server(client, task_queue, fake, workspace, http):
    settings = settings_for(fake.base_url, workspace, llm_max_tokens=300)
    result, _, _ = await run_agent(
        client, task_queue, settings, http, options=AgentRunOptions(max_tokens=42)
    )
    assert result.finish_reason == "stop"
    assert [body["max_tokens"] for body in fake.requests] == [42, 42]


# ------------------------------------------- one `call_llm`, through the worker, as it returns


@workflow.defn(name="OneModelCall", sandboxed=False)
class OneModelCall:
    """Calls the real `call_llm` once for a conversation it holds (answering the `messages`
    query the activity reads it with), and returns the activity's LlmResponse as is."""

    def __init__(self) -> None:
        self._messages: list[ChatMessage] = []

    @workflow.run
    async def run(self, request: LlmRequest, messages: list[ChatMessage]) -> LlmResponse:
        self._messages = messages
        info = workflow.info()
        request = request.model_copy(
            update={
                "workflow_id": info.workflow_id,
                "run_id": info.run_id,
                "message_count": len(messages),
            }
        )
        return await workflow.execute_activity(
            names.ACTIVITY_CALL_LLM,
            request,
            result_type=LlmResponse,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )

    @workflow.query(name=names.QUERY_MESSAGES)
    def messages(self) -> list[ChatMessage]:
        return self._messages


async def one_call(
    client: Client, task_queue: str, settings: Settings, http: httpx.AsyncClient, **request: Any
) -> LlmResponse:
    acts = AgentActivities(client, settings, build_default_registry(settings.workspace), http)
    fields: dict[str, Any] = {"workflow_id": "", "run_id": "", "message_count": 0, "round": 0}
    template = LlmRequest(**{"tools": [], **fields, **request})
    async with Worker(
        client, task_queue=task_queue, workflows=[OneModelCall], activities=acts.all()
    ):
        response: LlmResponse = await client.execute_workflow(
            OneModelCall.run,
            args=[template, [ChatMessage.user("hello")]],
            id=f"one-call-{uuid.uuid4()}",
            task_queue=task_queue,
        )
    return response


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
async def test_call_llm_returns_the_providers_length_finish(
    client, task_queue, fake, workspace, http, stream
):
    fake.enqueue(cut_short(("call_1", "read_file", '{"path": "no'), content="Reading"))
    settings = settings_for(fake.base_url, workspace, llm_stream=stream, stream_deltas=False)
    response = await one_call(client, task_queue, settings, http, tools=["read_file"])
    assert response.finish_reason == "length"
    assert [c.arguments for c in response.message.tool_calls or []] == ['{"path": "no']
    assert fake.requests[0].get("stream", False) is stream


async def test_max_tokens_of_the_request_wins_over_the_workers(
    client, task_queue, fake, workspace, http
):
    settings = settings_for(fake.base_url, workspace, llm_max_tokens=64, stream_deltas=False)
    await one_call(client, task_queue, settings, http, max_tokens=16)
    await one_call(client, task_queue, settings, http)
    assert [body["max_tokens"] for body in fake.requests] == [16, 64]


async def test_the_workers_max_tokens_reaches_every_request(
    client, task_queue, fake, workspace, http
):
    settings = settings_for(fake.base_url, workspace, llm_max_tokens=300)
    result, _, _ = await run_agent(client, task_queue, settings, http)
    assert result.finish_reason == "stop"
    assert fake.request_count == 2
    assert [body["max_tokens"] for body in fake.requests] == [300, 300]


async def test_no_max_tokens_is_sent_when_none_is_set(client, task_queue, fake, workspace, http):
    result, _, _ = await run_agent(client, task_queue, settings_for(fake.base_url, workspace), http)
    assert result.finish_reason == "stop"
    assert all("max_tokens" not in body for body in fake.requests)


# ------------------------------------------------------- replies that are no chat completion

START = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
SHAPES = {
    **{
        f"stream-{name}": RawStream([START, WRONG_CHUNKS[name]])
        for name in [
            "tool_calls-of-strings",
            "choices-a-number",
            "delta-a-number",
            "function-a-string",
            "usage-count-a-string",
        ]
    },
    **{
        f"json-{name}": RawJson(WRONG_BODIES[name])
        for name in [
            "tool_calls-of-strings",
            "usage-a-list",
        ]
    },
}


@pytest.mark.parametrize("reply", SHAPES.values(), ids=SHAPES.keys())
async def test_a_wrong_shaped_reply_ends_the_run_after_one_request(
    client, task_queue, fake, workspace, http, reply
):
    fake.enqueue(reply)
    result, log, _ = await run_agent(
        client, task_queue, settings_for(fake.base_url, workspace), http
    )
    assert fake.request_count == 1  # not retried: the provider is paid once
    errors = [e for e in log if isinstance(e, ErrorEvent)]
    assert len(errors) == 1 and "not a chat completion" in errors[0].message
    assert result.finish_reason == "error"


# -------------------------------------------------------------------- secrets


def assert_absent(text: str, *secrets: str) -> None:
    for secret in secrets:
        for form in {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1]}:
            assert form not in text, f"{form!r} found"


async def test_neither_key_nor_url_credentials_reach_the_history_or_the_logs(
    client, task_queue, fake, workspace, http, caplog
):
    """A key with a line break (set in code, past the settings' check: a copy made without
    validation) cannot be sent: the run ends `error` at once, and its history names the endpoint
    only redacted."""

    caplog.set_level(logging.DEBUG)
    key = "sk-first-SECRET-a1\nsecond-SECRET-b2"
    # (no user info here: httpx would send it as Basic auth in place of the key's header)
    checked = settings_for(f"{fake.base_url}?key={URL_QUERY_KEY}", workspace)
    settings = checked.model_copy(update={"llm_api_key": key})
    result, log, handle = await run_agent(client, task_queue, settings, http)
    assert result.finish_reason == "error"
    assert fake.request_count == 0  # never sent, and not tried again
    errors = [e for e in log if isinstance(e, ErrorEvent)]
    assert len(errors) == 1 and "?key=***" in errors[0].message
    history = (await handle.fetch_history()).to_json()
    assert "LlmConfigError" in history
    everything = history + caplog.text + json.dumps([e.model_dump(mode="json") for e in log])
    assert_absent(
        everything, key, "first-SECRET-a1", "second-SECRET-b2", URL_PASSWORD, URL_QUERY_KEY
    )


async def test_a_provider_echoing_the_credentials_leaves_no_trace_in_the_history(
    client, task_queue, fake, workspace, http, caplog
):
    caplog.set_level(logging.DEBUG)
    fake.enqueue(unauthorized(f"key {API_KEY} is not valid for {URL_QUERY_KEY}/{URL_PASSWORD}"))
    settings = settings_for(credentialed(fake.base_url), workspace)
    result, _, handle = await run_agent(client, task_queue, settings, http)
    assert result.finish_reason == "error" and fake.request_count == 1
    assert fake.queries == [f"key={URL_QUERY_KEY}"]
    history = (await handle.fetch_history()).to_json()
    assert "HTTP 401" in history
    assert_absent(history + caplog.text, API_KEY, URL_PASSWORD, URL_QUERY_KEY)
