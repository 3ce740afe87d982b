"""The model server's limits, met by the client over real HTTP against the strict fake server
behaving as OpenAI, llama.cpp or vLLM: slow prompts (progress keeps the stream alive, a timeout
names its setting and is retried at most twice), parallel calls, the context window (the
setting, the server's own figure) and the 400 each provider answers when a request does not
fit; `max_tokens` and the tokens generated, for the `length` warning."""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc
from typing import Any

import httpx
import pytest
from temporalio.exceptions import ApplicationError

from activities.llm import OpenAIChatClient
from tests.fake_openai import (
    FakeOpenAI,
    FakeOpenAIServer,
    HttpError,
    HugeError,
    RawStream,
    Reply,
    Stall,
    text,
    tool_calls,
)
from workflows.model import ChatMessage, ToolSpec

SPECS = [
    ToolSpec(name="list_dir", description="List", parameters={"type": "object"}),
    ToolSpec(name="read_file", description="Read", parameters={"type": "object"}),
]
PROMPT = [ChatMessage.user("hello")]
TWO_CALLS = tool_calls(("c1", "list_dir", '{"path": "."}'), ("c2", "read_file", '{"path": "a"}'))


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def llama(fake: FakeOpenAIServer) -> FakeOpenAIServer:
    fake.flavour = "llama.cpp"
    return fake


@pytest.fixture
async def http():
    async with httpx.AsyncClient() as client:
        yield client


def client_for(fake: FakeOpenAIServer, http: httpx.AsyncClient, **kwargs) -> OpenAIChatClient:
    return OpenAIChatClient(http, fake.base_url, "sk-limits-SECRET", "fake-model", **kwargs)


async def failure(coro) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await coro
    assert caught.value.__cause__ is None
    return caught.value


# ---------------------------------------------------------------- slow servers


async def test_progress_chunks_keep_a_slow_llama_cpp_prompt_alive(llama, http):
    """3 s of prompt processing against a 1 s read timeout: llama.cpp's progress chunks arrive
    every 0.1 s, so the request lives and the reply comes (the margin between a chunk and the
    timeout is wide, so a loaded machine's late thread does not end the request)."""
    llama.enqueue(Stall(seconds=3.0, then=text("Read it all."), progress_every=0.1))
    client = client_for(llama, http, timeout=httpx.Timeout(1.0, connect=5.0))
    reply = await client.complete(PROMPT, SPECS)
    assert reply.message.content == "Read it all."
    assert llama.requests[0]["return_progress"] is True
    assert llama.count("progress_chunks_sent") >= 5


async def test_the_same_stall_without_progress_times_out_naming_the_setting(fake, http):
    fake.enqueue(Stall(seconds=2.0, then=text("too late")))
    client = client_for(fake, http, timeout=httpx.Timeout(0.5, connect=5.0))
    error = await failure(client.complete(PROMPT, SPECS))
    assert error.type == "LlmTimeout" and error.non_retryable is False
    assert "timed out after 0.5 s without a byte from the server (LLM_TIMEOUT_SECONDS)" in (
        error.message
    )
    assert "return_progress" not in fake.requests[0]


async def test_a_timeout_is_final_at_the_third_attempt(fake, http):
    client = client_for(fake, http, timeout=httpx.Timeout(0.3, connect=5.0))
    found = []
    for attempt in (1, 2, 3):
        fake.enqueue(Stall(seconds=1.5, then=text("late")))
        found.append(await failure(client.complete(PROMPT, attempt=attempt)))
    assert [e.non_retryable for e in found] == [False, False, True]
    assert "3 attempts timed out" in found[2].message
    assert all("LLM_TIMEOUT_SECONDS" in e.message for e in found)


async def test_return_progress_goes_only_to_a_server_known_to_take_it(fake, http):
    """The OpenAI-like fake refuses a field it does not know, as OpenAI does: the client asks
    `/props` once, sees no llama.cpp, and never sends it."""
    fake.enqueue(text("one"), text("two"))
    client = client_for(fake, http)
    assert (await client.complete(PROMPT, SPECS)).message.content == "one"
    assert (await client.complete(PROMPT, SPECS)).message.content == "two"
    assert fake.refusals == []
    assert all("return_progress" not in body for body in fake.requests)
    assert fake.count("props_requests") == 1


async def test_the_openai_fake_refuses_return_progress_as_openai_does(fake, http):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "return_progress": True}
    answer = await http.post(f"{fake.base_url}/chat/completions", json=body)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == (
        "Unrecognized request argument supplied: return_progress"
    )


async def test_llama_cpp_is_asked_props_once_per_client_and_sent_return_progress(llama, http):
    llama.enqueue(text("a"), text("b"))
    client = client_for(llama, http)
    await client.complete(PROMPT)
    await client.complete(PROMPT)
    assert [body.get("return_progress") for body in llama.requests] == [True, True]
    assert llama.count("props_requests") == 1


async def test_a_server_slow_to_answer_props_is_asked_once_and_the_call_goes_on(
    llama, http, monkeypatch
):
    import activities.llm

    monkeypatch.setattr(activities.llm, "PROPS_TIMEOUT_SECONDS", 0.5)
    llama.props_delay = 30.0
    llama.enqueue(text("a"), text("b"))
    client = client_for(llama, http)
    began = time.monotonic()
    assert (await client.complete(PROMPT)).message.content == "a"
    assert (await client.complete(PROMPT)).message.content == "b"
    assert time.monotonic() - began < 10
    assert llama.count("props_requests") == 1
    assert all("return_progress" not in body for body in llama.requests)


async def test_a_non_streaming_client_asks_nothing_and_sends_no_progress(llama, http):
    llama.enqueue(text("plain"))
    await client_for(llama, http, stream=False).complete(PROMPT)
    assert "return_progress" not in llama.requests[0]
    assert llama.count("props_requests") == 0


# ---------------------------------------------------------------- parallel calls


async def test_parallel_tool_calls_is_sent_with_tools_and_only_then(fake, http):
    fake.enqueue(text("a"), text("b"))
    client = client_for(fake, http)
    await client.complete(PROMPT, SPECS)
    await client.complete(PROMPT)
    assert fake.requests[0]["parallel_tool_calls"] is True
    assert "parallel_tool_calls" not in fake.requests[1]  # OpenAI refuses it without tools
    assert fake.refusals == []


async def test_llama_cpp_returns_every_call_only_when_asked_for_parallel_calls(llama, http):
    llama.enqueue(TWO_CALLS, TWO_CALLS)
    both = await client_for(llama, http).complete(PROMPT, SPECS)
    assert [c.id for c in both.message.tool_calls or []] == ["c1", "c2"]
    one = await client_for(llama, http, parallel_tool_calls=False).complete(PROMPT, SPECS)
    assert [c.id for c in one.message.tool_calls or []] == ["c1"]
    assert llama.requests[1]["parallel_tool_calls"] is False


async def test_the_llama_cpp_fake_defaults_to_one_call_per_reply(llama, http):
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "list_dir", "parameters": {}}}],
    }
    llama.enqueue(TWO_CALLS)
    answer = await http.post(f"{llama.base_url}/chat/completions", json=body)
    assert len(answer.json()["choices"][0]["message"]["tool_calls"]) == 1


# ---------------------------------------------------------------- the context window


async def test_the_window_is_the_setting_first(llama, http):
    llama.context_tokens = 2048
    assert await client_for(llama, http, context_tokens=999).context_window() == 999
    assert llama.count("props_requests") == 0


@pytest.mark.parametrize(
    "props",
    [
        None,
        {"default_generation_settings": {"n_ctx": 2048}, "total_slots": 1},
        {"n_ctx": 2048, "default_generation_settings": {"params": {}}},
    ],
    ids=["llama.cpp-current", "minimal", "older-top-level"],
)
async def test_the_window_is_what_llama_cpp_says(llama, http, props):
    llama.context_tokens = 2048
    llama.props = props
    client = client_for(llama, http)
    assert await client.context_window() == 2048
    assert await client.context_window() == 2048
    assert llama.count("props_requests") == 1


async def test_the_window_is_128000_when_nobody_says(fake, http):
    assert await client_for(fake, http).context_window() == 128_000


async def test_an_unreachable_server_is_a_retryable_error_for_the_window(http):
    with FakeOpenAI() as gone:
        url = gone.base_url
    client = OpenAIChatClient(http, url, "sk-limits-SECRET", "m")
    error = await failure(client.context_window())
    assert error.type == "LlmConnectionError" and error.non_retryable is False


# ---------------------------------------------------------------- the provider says it is too long

LONG = [ChatMessage.user("x" * 9_000)]  # about 3,000 of the fake's tokens


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
@pytest.mark.parametrize(
    ("flavour", "max_tokens", "request_tokens"),
    [
        ("llama.cpp", None, "prompt"),
        ("openai", None, "prompt"),
        ("openai", 500, "prompt+500"),
        ("vllm", None, "prompt"),
        ("vllm", 500, "prompt+500"),
    ],
)
async def test_each_providers_context_exceeded_400(
    fake, http, stream, flavour, max_tokens, request_tokens
):
    fake.flavour = flavour
    fake.context_tokens = 2048
    client = client_for(fake, http, stream=stream)
    error = await failure(client.complete(LONG, SPECS, max_tokens=max_tokens))
    assert error.type == "LlmContextExceeded" and error.non_retryable is True
    assert "HTTP 400" in error.message and "context window" in error.message
    refusal = fake.refusals[0]
    prompt = fake_prompt_tokens(fake.requests[0])
    expected = prompt + (500 if request_tokens == "prompt+500" else 0)
    assert error.details == ({"context_tokens": 2048, "request_tokens": expected},)
    assert str(expected) in json.dumps(refusal)
    assert fake.request_count == 1  # the fake's queue is untouched: nothing generated


def fake_prompt_tokens(body: dict[str, Any]) -> int:
    from tests.fake_openai import prompt_tokens

    return prompt_tokens(body)


def test_the_providers_bodies_are_read_for_their_sizes():
    from activities.context_window import context_exceeded

    llama = json.dumps(
        {
            "error": {
                "code": 400,
                "message": "request (6196 tokens) exceeds the available context size (2048"
                " tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 6196,
                "n_ctx": 2048,
            }
        }
    )
    ollama = json.dumps({"error": llama})
    older_llama = json.dumps(
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "invalid_request_error",
            }
        }
    )
    openai = json.dumps(
        {
            "error": {
                "message": "This model's maximum context length is 128000 tokens. However, your"
                " messages resulted in 130,512 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
    )
    openai_new = json.dumps(
        {
            "error": {
                "message": "Your input exceeds the context window of this model.",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            }
        }
    )
    vllm = json.dumps(
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you requested"
            " 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the"
            " length of the messages or completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    )
    found = {
        name: context_exceeded(body)
        for name, body in [
            ("llama", llama),
            ("ollama", ollama),
            ("older-llama", older_llama),
            ("openai", openai),
            ("openai-new", openai_new),
            ("vllm", vllm),
        ]
    }
    assert {name: f and f.details() for name, f in found.items()} == {
        "llama": {"context_tokens": 2048, "request_tokens": 6196},
        "ollama": {"context_tokens": 2048, "request_tokens": 6196},
        "older-llama": {"context_tokens": None, "request_tokens": None},
        "openai": {"context_tokens": 128000, "request_tokens": 130512},
        "openai-new": {"context_tokens": None, "request_tokens": None},
        "vllm": {"context_tokens": 4096, "request_tokens": 5000},
    }
    for other in [
        '{"error": {"message": "Invalid value for \'temperature\'", "code": null}}',
        '{"error": {"message": "x", "code": {"nested": 1}, "type": ["a"]}}',
        "not json at all",
        "[]",
    ]:
        assert context_exceeded(other) is None


async def test_another_400_stays_an_ordinary_error(fake, http):
    fake.enqueue(HttpError(400, {"error": {"message": "Invalid 'messages[0].role'"}}))
    error = await failure(client_for(fake, http).complete(PROMPT))
    assert error.type == "LlmHttp400" and error.non_retryable is True


async def test_a_context_error_mid_stream_is_recognised(fake, http):
    error_chunk = {
        "error": {
            "code": 400,
            "message": "request (3000 tokens) exceeds the available context size (2048 tokens)",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 3000,
            "n_ctx": 2048,
        }
    }
    fake.enqueue(RawStream([error_chunk], done=False))
    error = await failure(client_for(fake, http).complete(PROMPT))
    assert error.type == "LlmContextExceeded" and error.non_retryable is True
    assert error.details == ({"context_tokens": 2048, "request_tokens": 3000},)


async def test_a_context_error_never_shows_the_key(fake, http):
    key = "sk-limits-SECRET"
    fake.enqueue(
        HttpError(400, {"error": {"message": f"maximum context length is 10 tokens {key}"}})
    )
    error = await failure(client_for(fake, http).complete(PROMPT))
    assert error.type == "LlmContextExceeded"
    assert key not in error.message and key not in json.dumps(error.details)


# ---------------------------------------------------------------- max_tokens and what was generated


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
async def test_the_reply_says_which_max_tokens_the_request_carried(fake, http, stream):
    fake.enqueue(text("a"), text("b"), text("c"))
    worker_limit = client_for(fake, http, stream=stream, max_tokens=300)
    assert (await worker_limit.complete(PROMPT)).max_tokens == 300
    assert (await worker_limit.complete(PROMPT, max_tokens=40)).max_tokens == 40
    assert (await client_for(fake, http, stream=stream).complete(PROMPT)).max_tokens is None


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
async def test_a_reply_cut_by_a_full_window_says_fewer_tokens_than_max_tokens(llama, http, stream):
    """llama.cpp stops generating when its window is full: `length` after fewer tokens than
    `max_tokens`, which is how the workflow tells a full window from the token limit."""
    llama.context_tokens = 2048
    conversation = [ChatMessage.user("y" * 5_700)]  # ~1,900 tokens: ~150 left in the window
    llama.enqueue(text("z" * 3_000))  # 1,000 tokens wanted
    reply = await client_for(llama, http, stream=stream).complete(conversation, max_tokens=512)
    assert reply.finish_reason == "length" and reply.max_tokens == 512
    prompt = fake_prompt_tokens(llama.requests[0])
    assert reply.usage.prompt_tokens == prompt
    assert reply.usage.completion_tokens == 2048 - prompt < 512


async def test_usage_in_the_finishing_chunk_is_read(fake, http):
    """llama.cpp puts `usage` (and `timings`) in the chunk that carries `finish_reason`."""
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]},
        {
            "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 1900, "completion_tokens": 148, "total_tokens": 2048},
            "timings": {"prompt_n": 1900, "predicted_n": 148},
        },
    ]
    fake.enqueue(RawStream(chunks))
    reply = await client_for(fake, http).complete(PROMPT, max_tokens=512)
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (1900, 148)
    assert reply.finish_reason == "length" and reply.max_tokens == 512


async def test_the_stall_keeps_its_reply_for_the_next_read(fake, http):
    """The fake itself: a stall answers after its delay (what the timeout tests rely on)."""
    fake.enqueue(Stall(seconds=0.5, then=Reply(text="after the pause")))
    began = time.monotonic()
    reply = await client_for(fake, http).complete(PROMPT)
    assert reply.message.content == "after the pause"
    assert time.monotonic() - began >= 0.45


@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gzip"])
async def test_a_huge_error_body_is_read_only_to_64_kib(fake, http, gzip):
    """A server answering HTTP 500 with a 200 MiB body (or a few hundred KiB of gzip that
    inflate to 200 MiB): the client keeps at most 64 KiB of it, and fails at once with a short
    excerpt of the provider's message."""
    fake.enqueue(HugeError(500, mib=200, gzip=gzip))
    tracemalloc.start()
    try:
        started = time.monotonic()
        error = await failure(client_for(fake, http).complete(PROMPT, SPECS))
        took = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert error.type == "LlmHttp500" and not error.non_retryable
    assert error.message.startswith('LLM provider answered HTTP 500: {"error"')
    assert "boom \x1b[31mxxx" in error.message and len(error.message) < 1_100
    assert peak < 4 * 1024 * 1024, f"{peak / 1024 / 1024:.1f} MiB"
    assert took < 3, took
    await asyncio.sleep(0.5)  # the server notices the hang-up
    assert fake.count("huge_bytes_sent") < 16 * 1024 * 1024
