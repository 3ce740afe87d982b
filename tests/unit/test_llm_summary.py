"""The summary call of compaction: the model asked, with no tools, for a summary of some messages
(a transcript in one user message), over real HTTP against the strict fake server."""

from __future__ import annotations

import httpx
import pytest
from temporalio.exceptions import ApplicationError

from activities.llm import OpenAIChatClient
from tests.fake_openai import FakeOpenAI, FakeOpenAIServer, text
from workflows.model import ChatMessage, ToolCall

CALL = ToolCall(id="call_1", name="read_file", arguments='{"path": "data.csv"}')
OLD_TURNS = [
    ChatMessage.user("Read data.csv and tell me the total."),
    ChatMessage.assistant("", [CALL]),
    ChatMessage.tool(CALL, "a,b\n1,2\n" + "9," * 20_000),
    ChatMessage.assistant("The total is 3."),
]


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def http():
    async with httpx.AsyncClient() as client:
        yield client


def client_for(fake: FakeOpenAIServer, http: httpx.AsyncClient, **kwargs) -> OpenAIChatClient:
    return OpenAIChatClient(http, fake.base_url, None, "worker-model", **kwargs)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
async def test_a_summary_is_asked_with_no_tools_and_comes_back_as_text(fake, http, stream):
    fake.enqueue(text("  The user asked for the total of data.csv; it is 3.  "))
    summary = await client_for(fake, http, stream=stream).summarize(OLD_TURNS)
    assert summary == "The user asked for the total of data.csv; it is 3."
    body = fake.requests[0]
    assert "tools" not in body and "parallel_tool_calls" not in body
    assert fake.refusals == [] and fake.rejected == 0
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    transcript = body["messages"][1]["content"]
    assert "Summarise these 4 messages" in transcript
    assert "Read data.csv and tell me the total." in transcript
    assert '[assistant calls read_file] {"path": "data.csv"}' in transcript
    assert "[tool result read_file]" in transcript and "characters left out" in transcript
    assert len(transcript) < 12_000  # the 40,000-character result is bounded
    assert body["max_tokens"] == 1024


async def test_the_summary_model_the_runs_or_the_workers(fake, http):
    fake.enqueue(text("s1"), text("s2"), text("s3"))
    await client_for(fake, http, summary_model="small-model").summarize(OLD_TURNS, model="run-m")
    await client_for(fake, http).summarize(OLD_TURNS, model="run-model")
    await client_for(fake, http, max_tokens=200).summarize(OLD_TURNS)
    assert [b["model"] for b in fake.requests] == ["small-model", "run-model", "worker-model"]
    assert fake.requests[2]["max_tokens"] == 200


async def test_a_summary_that_looks_like_a_call_is_still_the_summary(fake, http):
    fake.enqueue(text('{"name": "read_file", "arguments": {"path": "data.csv"}}'))
    summary = await client_for(fake, http).summarize(OLD_TURNS)
    assert summary.startswith('{"name": "read_file"')


async def test_an_empty_summary_is_an_error(fake, http):
    fake.enqueue(text("   "))
    with pytest.raises(ApplicationError) as caught:
        await client_for(fake, http).summarize(OLD_TURNS)
    assert caught.value.type == "LlmEmptySummary"


@pytest.mark.parametrize("count", [3, 40, 400])
async def test_the_request_for_a_summary_fits_the_window_it_is_for(fake, http, count):
    # Against llama.cpp with a 2,048-token window, the summary of many long messages must itself
    # be a request that fits (it was refused with 400 exceed_context_size_error, and the run's
    # compaction failed with it).
    fake.flavour = "llama.cpp"
    fake.context_tokens = 2_048
    fake.enqueue(text("They read many files."))
    turns = [ChatMessage.user(f"message {i}: " + "words " * 2_000) for i in range(count)]
    llm = client_for(fake, http)
    summary = await llm.summarize(turns, max_tokens=256, window=2_048)
    assert summary == "They read many files."
    assert fake.refusals == []
    sent = fake.requests[-1]["messages"][1]["content"]
    assert sent.startswith(f"Summarise these {count} messages")
    assert "message 0: " in sent and f"message {count - 1}: " in sent  # the first and the last
    if count == 400:
        assert "messages left out to fit the model's context window" in sent
