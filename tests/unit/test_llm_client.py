"""The OpenAI-compatible client against a real local HTTP server (tests/fake_openai.py), then
`call_llm` through a real Temporal worker running the real AgentWorkflow."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from google.protobuf.json_format import MessageToJson
from temporalio.api.failure.v1 import Failure
from temporalio.converter import DataConverter, DefaultFailureConverter
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.llm import (
    OpenAIChatClient,
    chat_completions_url,
    retry_after_seconds,
    to_openai_message,
)
from activities.tools import build_default_registry
from runtime.settings import Settings
from runtime.url_redaction import redact_url
from tests.fake_openai import (
    CutOff,
    FakeOpenAI,
    FakeOpenAIServer,
    Malformed,
    RawJson,
    RawStream,
    Reply,
    Slow,
    cut_short,
    rate_limited,
    server_error,
    text,
    tool_calls,
    unauthorized,
)
from tests.helpers import event_types, events, start_run, wait_until
from workflows.conversation.record import invariant_violations
from workflows.model import AgentRunInput, ChatMessage, ErrorEvent, ToolCall, ToolSpec
from workflows.run.agent import AgentWorkflow

API_KEY = "sk-test-SECRET-0123456789"
SPECS = [
    ToolSpec(name="list_dir", description="List", parameters={"type": "object"}),
    ToolSpec(name="read_file", description="Read", parameters={"type": "object"}),
]
PROMPT = [ChatMessage.system("You manage files."), ChatMessage.user("hello")]


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def http():
    async with httpx.AsyncClient() as client:
        yield client


def llm(fake: FakeOpenAIServer, http: httpx.AsyncClient, **kwargs) -> OpenAIChatClient:
    return OpenAIChatClient(http, fake.base_url, API_KEY, "fake-model", **kwargs)


async def failure(coro) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await coro
    return caught.value


# ---------------------------------------------------------------- the wire


def test_messages_in_the_openai_shape():
    call = ToolCall(id="call_1", name="list_dir", arguments={"path": "."})
    assert to_openai_message(ChatMessage.assistant("", [call])) == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "list_dir", "arguments": '{"path": "."}'},
            }
        ],
    }
    assert to_openai_message(ChatMessage.tool(call, "result")) == {
        "role": "tool",
        "content": "result",
        "tool_call_id": "call_1",
    }
    assert to_openai_message(ChatMessage.user("hi")) == {"role": "user", "content": "hi"}


def test_retry_after_parsing():
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None


# ---------------------------------------------------------------- the client


async def test_streamed_text(fake, http):
    fake.enqueue(text("Hello, this is streamed.", chunk_size=2))
    response = await llm(fake, http).complete(PROMPT, SPECS, temperature=0.2)
    assert response.message.role == "assistant"
    assert response.message.content == "Hello, this is streamed."
    assert response.message.tool_calls is None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (11, 7)
    body = fake.requests[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["model"] == "fake-model" and body["temperature"] == 0.2
    assert [t["function"]["name"] for t in body["tools"]] == ["list_dir", "read_file"]
    assert body["tools"][0]["type"] == "function"
    assert fake.headers[0]["Authorization"] == f"Bearer {API_KEY}"


@pytest.mark.parametrize("stream", [True, False])
async def test_consecutive_calls_reuse_one_connection(fake, http, stream):
    """A streamed reply is read to its end after `[DONE]`, so the connection goes back to the
    pool: no new TCP (and, with a real provider, TLS) handshake per round."""
    fake.enqueue(text("one"), text("two"), text("three"))
    client = llm(fake, http, stream=stream)
    replies = [(await client.complete(PROMPT)).message.content for _ in range(3)]
    assert replies == ["one", "two", "three"]
    assert fake.count("connections") == 1


async def test_a_body_left_open_after_done_costs_only_its_connection(fake, http):
    fake.enqueue(Reply(text="complete", open_after_done=30.0), text("next"))
    client = llm(fake, http)
    began = asyncio.get_running_loop().time()
    assert (await client.complete(PROMPT)).message.content == "complete"
    assert asyncio.get_running_loop().time() - began < 10  # not the 30 s the body stays open
    assert (await client.complete(PROMPT)).message.content == "next"
    assert fake.count("connections") == 2


async def test_no_key_no_authorization_header(fake, http):
    fake.enqueue(text("hi"))
    client = OpenAIChatClient(http, fake.base_url, None, "m")
    await client.complete(PROMPT)
    assert "Authorization" not in fake.headers[0]
    assert "tools" not in fake.requests[0]


async def test_streamed_tool_call_split_mid_json(fake, http):
    arguments = '{"path": "some/deeply/nested/file.txt"}'
    fake.enqueue(tool_calls(("call_abc", "read_file", arguments), chunk_size=3))
    response = await llm(fake, http).complete(PROMPT, SPECS)
    assert response.message.tool_calls == [
        ToolCall(id="call_abc", name="read_file", arguments=arguments)
    ]
    assert response.message.content == ""


async def test_two_parallel_tool_calls(fake, http):
    first, second = '{"path": "."}', '{"path": "notes.txt"}'
    fake.enqueue(
        tool_calls(("call_1", "list_dir", first), ("call_2", "read_file", second), content="Both.")
    )
    response = await llm(fake, http).complete(PROMPT, SPECS)
    assert response.message.content == "Both."
    assert [(c.id, c.name, c.arguments) for c in response.message.tool_calls or []] == [
        ("call_1", "list_dir", first),
        ("call_2", "read_file", second),
    ]


async def test_json_reply_to_a_streaming_request_is_read(fake, http):
    fake.enqueue(Reply(tool_calls=[("c1", "list_dir", '{"path": "."}')], force_json=True))
    response = await llm(fake, http).complete(PROMPT, SPECS)
    assert fake.requests[0]["stream"] is True
    assert response.message.tool_calls == [
        ToolCall(id="c1", name="list_dir", arguments='{"path": "."}')
    ]
    assert response.usage.prompt_tokens == 11


async def test_non_streaming_mode(fake, http):
    fake.enqueue(text("plain"))
    response = await llm(fake, http, stream=False).complete(PROMPT)
    assert "stream" not in fake.requests[0]
    assert response.message.content == "plain"
    assert response.usage.completion_tokens == 7


async def test_429_is_retryable_with_retry_after(fake, http):
    fake.enqueue(rate_limited(retry_after=3))
    error = await failure(llm(fake, http).complete(PROMPT))
    assert error.non_retryable is False
    assert error.next_retry_delay == timedelta(seconds=3)
    assert "429" in error.message and "Rate limit" in error.message


async def test_500_is_retryable(fake, http):
    fake.enqueue(server_error())
    error = await failure(llm(fake, http).complete(PROMPT))
    assert error.non_retryable is False
    assert "HTTP 500" in error.message


async def test_401_is_not_retryable_and_hides_the_key(fake, http):
    fake.enqueue(unauthorized(f"Incorrect API key provided: {API_KEY}."))
    error = await failure(llm(fake, http).complete(PROMPT))
    assert error.non_retryable is True
    assert "HTTP 401" in error.message and "Incorrect API key" in error.message
    assert API_KEY not in error.message
    assert API_KEY not in repr(error) and API_KEY not in str(error.details)
    assert API_KEY not in repr(llm(fake, http))


@pytest.mark.parametrize("stream", [True, False])
async def test_malformed_body_is_not_retryable(fake, http, stream):
    fake.enqueue(Malformed())
    error = await failure(llm(fake, http, stream=stream).complete(PROMPT))
    assert error.non_retryable is True
    assert "unparseable" in error.message


@pytest.mark.parametrize("abrupt", [True, False])
async def test_stream_cut_off_is_retryable(fake, http, abrupt):
    fake.enqueue(CutOff(abrupt=abrupt))
    error = await failure(llm(fake, http).complete(PROMPT))
    assert error.non_retryable is False
    assert "cut off" in error.message or "connection" in error.message


async def test_connection_refused_is_retryable(http):
    with FakeOpenAI() as gone:
        url = gone.base_url
    client = OpenAIChatClient(http, url, API_KEY, "m")
    error = await failure(client.complete(PROMPT))
    assert error.non_retryable is False
    assert error.type == "LlmConnectionError"


async def test_read_timeout_is_retryable(fake, http):
    fake.enqueue(Slow(chunks=3, delay=1.0))
    client = llm(fake, http, timeout=httpx.Timeout(0.3))
    error = await failure(client.complete(PROMPT))
    assert error.non_retryable is False
    assert error.type == "LlmTimeout"


async def test_cancellation_closes_the_connection(fake, http):
    fake.enqueue(Slow(chunks=200, delay=0.05))
    beats = 0

    def heartbeat() -> None:
        nonlocal beats
        beats += 1

    task = asyncio.create_task(llm(fake, http, heartbeat=heartbeat).complete(PROMPT))
    await wait_until(lambda: fake.count("slow_chunks_sent") >= 2, timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: fake.disconnects >= 1, timeout=10)
    assert beats >= 2  # one per chunk
    assert fake.count("slow_chunks_sent") < 200


# ------------------------------------------------- through a real Temporal worker


def settings_for(fake: FakeOpenAIServer, workspace: Path) -> Settings:
    return Settings(
        llm_base_url=fake.base_url,
        llm_api_key=API_KEY,
        llm_model="fake-model",
        workspace=workspace,
        state_dir=workspace.parent / "state",
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "logs").mkdir(parents=True)
    (ws / "notes.txt").write_text("remember the milk\n")
    return ws


async def run_agent(client, task_queue, fake, workspace, http, prompt: str):
    settings = settings_for(fake, workspace)
    acts = AgentActivities(client, settings, build_default_registry(workspace), http)
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=acts.all()
    ):
        handle = await start_run(
            client, task_queue, AgentRunInput.from_prompt(prompt), f"llm-{uuid.uuid4()}"
        )
        result = await asyncio.wait_for(handle.result(), 60)
        log = await events(handle)
    return result, log


async def test_a_full_run_over_http(client, task_queue, fake, workspace, http):
    result, log = await run_agent(client, task_queue, fake, workspace, http, "list")
    assert result.finish_reason == "stop"
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "assistant"]
    assert result.messages[-1].content.startswith("The workspace contains: logs, notes.txt")
    assert json.loads(result.messages[2].content)["ok"] is True
    assert result.usage.prompt_tokens > 0
    assert event_types(log) == ["tool_call", "tool_result", "text_delta", "finished"]
    received = fake.received_messages()
    assert len(received) == 2
    assert received[1][1].tool_calls and received[1][2].role == "tool"
    for conversation in received:
        assert invariant_violations(conversation, allow_open_tail=False) == []
    assert all(h["Authorization"] == f"Bearer {API_KEY}" for h in fake.headers)


async def test_a_401_ends_the_run_with_an_error(client, task_queue, fake, workspace, http):
    fake.enqueue(unauthorized(f"Incorrect API key provided: {API_KEY}"))
    result, log = await run_agent(client, task_queue, fake, workspace, http, "hello")
    assert result.finish_reason == "error"
    errors = [e for e in log if isinstance(e, ErrorEvent)]
    assert len(errors) == 1 and "401" in errors[0].message
    assert API_KEY not in errors[0].message
    assert result.error == errors[0].message
    assert len(fake.requests) == 1  # not retried


async def test_a_500_is_retried_then_the_run_completes(client, task_queue, fake, workspace, http):
    fake.enqueue(server_error())
    result, log = await run_agent(client, task_queue, fake, workspace, http, "hello")
    assert result.finish_reason == "stop"
    assert "scripted" in result.messages[-1].content
    assert len(fake.requests) == 2
    assert fake.requests[0] == fake.requests[1]
    assert "error" not in event_types(log)


# ------------------------------------------- what a strict server is sent, what it says back


@pytest.mark.parametrize(
    "arguments",
    ['{"path":', "", "not json", "[1, 2]", '"text"', "5", "null", '{"a": NaN}', '{"a": "\\ud800"}'],
)
def test_arguments_a_strict_server_cannot_read_go_out_as_an_empty_object(arguments):
    call = ToolCall(id="call_1", name="list_dir", arguments=arguments)
    sent = to_openai_message(ChatMessage.assistant("", [call]))
    assert sent["tool_calls"][0]["function"]["arguments"] == "{}"
    assert call.arguments == arguments  # the run's own message keeps what the model said


def test_arguments_that_are_an_object_go_out_as_the_model_wrote_them():
    text_form = '{ "path" : "notes.txt" }'
    for arguments, expected in [(text_form, text_form), ({"path": "."}, '{"path": "."}')]:
        call = ToolCall(id="c", name="read_file", arguments=arguments)
        sent = to_openai_message(ChatMessage.assistant("", [call]))
        assert sent["tool_calls"][0]["function"]["arguments"] == expected


async def test_the_strict_fake_refuses_what_llama_cpp_refuses(fake, http):
    """The fake's own check, seen from a client that sends the broken text as it is."""
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "x", "arguments": "{"}}
                ],
            },
            {"role": "tool", "content": "bad", "tool_call_id": "c"},
        ],
    }
    answer = await http.post(f"{fake.base_url}/chat/completions", json=body)
    assert answer.status_code == 500
    assert answer.json()["error"]["message"] == "Failed to parse tool call arguments as JSON"
    assert fake.rejected == 1 and fake.request_count == 1


@pytest.mark.parametrize("force_json", [False, True], ids=["streamed", "not-streamed"])
async def test_a_reply_cut_off_at_the_token_limit_says_length(fake, http, force_json):
    whole, cut = ("c1", "list_dir", '{"path": "."}'), ("c2", "read_file", '{"path":')
    fake.enqueue(cut_short(whole, cut, content="Looking.", force_json=force_json))
    response = await llm(fake, http).complete(PROMPT, SPECS)
    assert response.finish_reason == "length"
    assert [(c.id, c.arguments) for c in response.message.tool_calls or []] == [
        ("c1", '{"path": "."}'),
        ("c2", '{"path":'),
    ]
    assert response.message.content == "Looking."


@pytest.mark.parametrize("stream", [True, False])
async def test_finish_reason_is_the_providers(fake, http, stream):
    fake.enqueue(text("done"), tool_calls(("c1", "list_dir", "{}")))
    client = llm(fake, http, stream=stream)
    assert (await client.complete(PROMPT)).finish_reason == "stop"
    assert (await client.complete(PROMPT, SPECS)).finish_reason == "tool_calls"


async def test_the_last_finish_reason_of_the_stream_counts(fake, http):
    chunks = [
        {"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"choices": [{"index": 1, "delta": {}, "finish_reason": "content_filter"}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": None}], "usage": None},
    ]
    fake.enqueue(RawStream(chunks))
    response = await llm(fake, http).complete(PROMPT)
    assert response.finish_reason == "length"
    assert response.message.content == "a"


async def test_max_tokens_the_clients_the_calls_or_none(fake, http):
    fake.enqueue(text("a"), text("b"), text("c"))
    await llm(fake, http).complete(PROMPT)
    await llm(fake, http, max_tokens=300).complete(PROMPT)
    await llm(fake, http, max_tokens=300).complete(PROMPT, max_tokens=40)
    assert "max_tokens" not in fake.requests[0]
    assert fake.requests[1]["max_tokens"] == 300
    assert fake.requests[2]["max_tokens"] == 40


# ------------------------------------------------- replies that are JSON but no chat completion


def _choice(delta: object) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


WRONG_CHUNKS = {
    "tool_calls-of-strings": _choice({"tool_calls": ["x"]}),
    "choices-a-number": {"choices": 5},
    "delta-a-number": _choice(3),
    "function-a-string": _choice({"tool_calls": [{"index": 0, "function": "x"}]}),
    "usage-a-number": {"choices": [], "usage": 5},
    "usage-count-a-string": {"choices": [], "usage": {"prompt_tokens": "11"}},
    "choice-a-string": {"choices": ["x"]},
    "content-a-number": _choice({"content": 5}),
    "choice-index-a-string": {"choices": [{"index": "0", "delta": {}}]},
    "call-index-a-string": _choice({"tool_calls": [{"index": "0", "id": "c"}]}),
    "call-id-an-object": _choice({"tool_calls": [{"index": 0, "id": {}}]}),
    "name-a-list": _choice({"tool_calls": [{"index": 0, "function": {"name": ["x"]}}]}),
    "arguments-a-number": _choice({"tool_calls": [{"index": 0, "function": {"arguments": 1}}]}),
    "finish_reason-a-number": {"choices": [{"index": 0, "delta": {}, "finish_reason": 1}]},
    "chunk-an-array": [1, 2],
}

WRONG_BODIES = {
    "choices-a-number": {"choices": 5},
    "message-a-string": {"choices": [{"message": "x"}]},
    "tool_calls-of-strings": {"choices": [{"message": {"tool_calls": ["x"]}}]},
    "function-a-string": {"choices": [{"message": {"tool_calls": [{"function": "x"}]}}]},
    "usage-a-list": {"choices": [{"message": {"content": "hi"}}], "usage": [1]},
    "usage-count-a-string": {
        "choices": [{"message": {"content": "hi"}}],
        "usage": {"prompt_tokens": "5"},
    },
    "finish_reason-an-object": {"choices": [{"message": {"content": "hi"}, "finish_reason": {}}]},
    "no-choices": {"choices": []},
}


@pytest.mark.parametrize("chunk", WRONG_CHUNKS.values(), ids=WRONG_CHUNKS.keys())
async def test_a_stream_chunk_of_the_wrong_shape_is_not_retryable(fake, http, chunk):
    start = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    fake.enqueue(RawStream([start, chunk, _choice({})]))
    error = await failure(llm(fake, http).complete(PROMPT))
    assert error.type == "LlmBadResponse" and error.non_retryable is True
    assert "not a chat completion" in error.message
    assert error.__cause__ is None


@pytest.mark.parametrize("body", WRONG_BODIES.values(), ids=WRONG_BODIES.keys())
async def test_a_reply_of_the_wrong_shape_is_not_retryable(fake, http, body):
    fake.enqueue(RawJson(body))
    error = await failure(llm(fake, http, stream=False).complete(PROMPT))
    assert error.type == "LlmBadResponse" and error.non_retryable is True
    assert "not a chat completion" in error.message


@pytest.mark.parametrize("stream", [True, False])
async def test_json_nested_too_deeply_is_unparseable_not_a_crash(fake, http, stream):
    deep = "[" * 100_000 + "]" * 100_000
    fake.enqueue(RawStream([deep]) if stream else Malformed(deep))
    error = await failure(llm(fake, http, stream=stream).complete(PROMPT))
    assert error.type == "LlmBadResponse" and error.non_retryable is True


# ---------------------------------------------------------------- secrets in errors


URL_PASSWORD = "pw-HIDDEN-7f3a"
URL_QUERY_KEY = "QUERY-HIDDEN-91bc"


def credentialed(url: str) -> str:
    """`url` with user info and a query key, as some gateways are configured."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://agent:{URL_PASSWORD}@{rest}?key={URL_QUERY_KEY}"


def assert_no_secret(text: str, *secrets: str) -> None:
    for secret in secrets:
        for form in (secret, repr(secret)[1:-1]):
            assert form not in text, f"{form!r} leaked into {text!r}"


def serialized_failure(error: BaseException) -> str:
    """The error as Temporal records it in history: message, stack trace and the cause chain."""
    failure = Failure()
    DefaultFailureConverter().to_failure(error, DataConverter.default.payload_converter, failure)
    return MessageToJson(failure)


def test_urls_are_shown_redacted():
    assert redact_url("https://user:pw@host/v1") == "https://***@host/v1"
    assert (
        redact_url("https://host/v1?key=abc&api-version=1")
        == "https://host/v1?key=***&api-version=***"
    )
    assert redact_url("http://host:8080/v1?token") == "http://host:8080/v1?***"
    assert redact_url("https://api.openai.com/v1") == "https://api.openai.com/v1"


def test_a_query_stays_a_query_after_the_path():
    assert (
        chat_completions_url("https://h/openai/v1/?api-version=2024-06-01")
        == "https://h/openai/v1/chat/completions?api-version=2024-06-01"
    )


async def test_a_key_with_a_newline_never_reaches_the_error_or_its_cause(fake, http):
    key = "sk-line-one-SECRET\nline-two-SECRET"
    client = OpenAIChatClient(http, fake.base_url, key, "m")
    error = await failure(client.complete(PROMPT))
    assert error.non_retryable is True  # the same header can never be sent
    assert error.__cause__ is None
    recorded = serialized_failure(error)
    assert_no_secret(error.message + recorded, key, "line-one-SECRET", "line-two-SECRET")
    assert fake.request_count == 0


async def test_url_credentials_never_appear_in_errors_or_the_repr(http):
    with FakeOpenAI() as gone:
        url = credentialed(gone.base_url)
    client = OpenAIChatClient(http, url, API_KEY, "m")
    error = await failure(client.complete(PROMPT))
    assert error.type == "LlmConnectionError"
    assert "http://***@127.0.0.1:" in error.message and "?key=***" in error.message
    assert error.__cause__ is None
    shown = error.message + serialized_failure(error) + repr(client)
    assert_no_secret(shown, URL_PASSWORD, URL_QUERY_KEY, API_KEY)
    assert "***@127.0.0.1" in repr(client)


async def test_a_timeout_names_the_endpoint_redacted(fake, http):
    fake.enqueue(Slow(chunks=3, delay=1.0))
    client = OpenAIChatClient(
        http, credentialed(fake.base_url), API_KEY, "m", timeout=httpx.Timeout(0.3)
    )
    error = await failure(client.complete(PROMPT))
    assert error.type == "LlmTimeout" and "?key=***" in error.message
    assert_no_secret(error.message + serialized_failure(error), URL_PASSWORD, URL_QUERY_KEY)
    assert fake.queries == [f"key={URL_QUERY_KEY}"]  # the query reached the server as a query


async def test_a_provider_that_echoes_the_credentials_is_scrubbed(fake, http):
    fake.enqueue(unauthorized(f"bad key {URL_QUERY_KEY} for agent:{URL_PASSWORD} ({API_KEY})"))
    client = OpenAIChatClient(http, credentialed(fake.base_url), API_KEY, "m")
    error = await failure(client.complete(PROMPT))
    assert "HTTP 401" in error.message
    assert_no_secret(
        error.message + serialized_failure(error), URL_PASSWORD, URL_QUERY_KEY, API_KEY
    )
