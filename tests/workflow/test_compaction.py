"""Sessions that outgrow the model's context window, in the workflow (the model's replies
scripted, the tools answering with big results): the model's view is compacted (old results
dropped, old turns summarised by `summarize_conversation`, results too big cut), the record keeps
every message with the compaction points in place, and a provider that says the request is too
long is asked again with a smaller view."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from tests.fakes import BigTools, FakeAgentActivities, calls, text
from tests.helpers import events, of_type, start_run, wait_for_phase, worker_for
from workflows import names
from workflows.conversation.record import invariant_violations
from workflows.conversation.window import USER_SUMMARY_PREFIX
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage


def reads(count: int, saying: str = "") -> list[Any]:
    """Replies that each read one file (and say `saying` first)."""
    replies = [calls((f"c{i}", "read_file", f'{{"path": "f{i}.txt"}}')) for i in range(count)]
    return [
        r.model_copy(update={"message": r.message.model_copy(update={"content": saying})})
        for r in replies
    ]


async def run_to_end(client, task_queue, fake: FakeAgentActivities, **options: Any):
    run_input = AgentRunInput.from_prompt("read them all", AgentRunOptions(**options))
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input)
        result = await handle.result()
        log = await events(handle)
        view = await handle.query(names.QUERY_MODEL_VIEW, result_type=list[ChatMessage])
    return result, log, view


async def test_old_tool_results_are_dropped_from_the_view_first(client, task_queue):
    fake = BigTools(replies=[*reads(6), text("done")], context_tokens=8_000)
    fake.client = client
    result, log, view = await run_to_end(client, task_queue, fake, keep_rounds=2)
    assert result.finish_reason == "stop"
    compactions = of_type(log, "compaction")
    assert compactions and all(c.after_tokens < c.before_tokens for c in compactions)
    assert sum(c.dropped_results for c in compactions) >= 3
    assert fake.summary_requests == []  # dropping old results was enough
    # The record keeps every result in full; the model saw placeholders for the old ones.
    tool = [m for m in result.messages if m.role == "tool"]
    assert len(tool) == 6 and all(len(m.content) > 6_000 for m in tool)
    last_request = fake.llm_prefixes[-1]
    assert "output dropped to save context" in last_request[2].content  # the first result
    assert last_request[-1].content == tool[-1].content  # the newest kept whole
    assert invariant_violations(last_request) == []
    assert [m.role for m in view] == [m.role for m in last_request] + ["assistant"]


async def test_old_turns_are_summarised_and_the_record_shows_where(client, task_queue):
    # What the model says each round is long too: dropping old results is not enough.
    fake = BigTools(replies=[*reads(8, "let me think " * 200), text("done")], context_tokens=6_000)
    fake.size = 2_000
    fake.client = client
    result, log, view = await run_to_end(client, task_queue, fake, keep_rounds=1)
    assert result.finish_reason == "stop"
    assert fake.summary_requests, "nothing was summarised"
    summarised = [c for c in of_type(log, "compaction") if c.summarised_messages]
    assert summarised
    # The record: every message, and a marker where the view changed.
    markers = [m for m in result.messages if m.role == "system" and m.name == "compaction"]
    assert len(markers) == len(fake.summary_requests)
    assert markers[0].content.startswith("[compaction] messages 1–")
    assert len([m for m in result.messages if m.role == "tool"]) == 8
    # The view: the first user message, the summary (data: a user message saying it is a
    # summary, never a system message), the newest round; no marker.
    assert view[0] == result.messages[0]
    assert view[1].role == "user" and view[1].content.startswith(USER_SUMMARY_PREFIX)
    assert "summary of the earlier conversation" in view[1].content
    assert all(m.role != "system" for m in view)
    assert all(m.name != "compaction" for m in view)
    assert invariant_violations([m for m in view if m.role != "system"]) == []
    # A later summary continues the earlier one.
    if len(fake.summary_requests) > 1:
        assert fake.summary_requests[1].previous_summary is not None


async def test_a_result_too_big_for_the_window_is_cut_in_the_view(client, task_queue):
    fake = BigTools(replies=[*reads(1), text("done")], context_tokens=2_048)
    fake.size = 12_000
    fake.client = client
    result, log, _ = await run_to_end(client, task_queue, fake)
    assert result.finish_reason == "stop"
    [compaction] = of_type(log, "compaction")
    assert compaction.cut_results == 1 and compaction.after_tokens <= 0.8 * 2_048
    sent = fake.llm_prefixes[-1][-1].content
    assert "cut to fit the model's context window" in sent and len(sent) < 6_000
    assert len(result.messages[-2].content) > 12_000  # the record keeps it whole


def too_long(window: int, request: int) -> ApplicationError:
    return ApplicationError(
        f"LLM provider answered HTTP 400: request ({request} tokens) exceeds the available"
        f" context size ({window} tokens)",
        {"context_tokens": window, "request_tokens": request},
        type="LlmContextExceeded",
        non_retryable=True,
    )


async def test_a_provider_that_says_too_long_is_asked_again_with_a_smaller_view(client, task_queue):
    fake = BigTools(
        replies=[*reads(4), too_long(2_048, 6_196), text("done")], context_tokens=128_000
    )
    fake.size = 3_000
    fake.client = client
    result, log, _ = await run_to_end(client, task_queue, fake, keep_rounds=1)
    assert result.finish_reason == "stop", result.error
    assert len(fake.llm_requests) == 6  # the refused request was made again
    [compaction] = of_type(log, "compaction")
    assert compaction.before_tokens > 2_048 >= compaction.after_tokens
    sent = fake.llm_prefixes[-1]
    assert sum(len(m.model_dump_json()) for m in sent) < 2_048 * 3


async def test_two_too_long_replies_in_a_row_end_the_run(client, task_queue):
    fake = FakeAgentActivities(replies=[too_long(2_000, 5_000), too_long(2_000, 4_000)])
    result, _, _ = await run_to_end(client, task_queue, fake)
    assert result.finish_reason == "error"
    assert result.error is not None and result.error.startswith("Context window exceeded:")
    assert "exceeds the available context size" in result.error


@pytest.mark.parametrize("window", [512])
async def test_a_prompt_that_alone_is_too_big_ends_the_run_saying_both_sizes(
    client, task_queue, window
):
    fake = FakeAgentActivities(context_tokens=window)
    run_input = AgentRunInput.from_prompt("x" * 6_000)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input)
        result = await handle.result()
    assert result.finish_reason == "error"
    assert result.error is not None and "Context window exceeded" in result.error
    assert f"window of {window} tokens" in result.error
    assert fake.llm_requests == []


async def test_long_messages_sent_while_a_call_waits_are_summarised_down_to_the_newest(
    client, task_queue
):
    # The last rounds alone are past the window (many long messages in one turn): the older of
    # them are summarised too, the newest stay whole, and the run goes on.
    fake = FakeAgentActivities(
        replies=[calls(("c1", "run_command", '{"command": "ls"}')), text("done")],
        context_tokens=16_000,
    )
    fake.client = client
    run_input = AgentRunInput.from_prompt("wait for me")
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, run_input)
        await wait_for_phase(handle, "awaiting_approval")
        for i in range(6):
            await handle.signal("send_message", {"content": f"note {i}: " + "m" * 9_000})
        await handle.signal("tool_approval", {"call_id": "c1", "approved": True})
        result = await handle.result()
        log = await events(handle)
    assert result.finish_reason == "stop", result.error
    [compaction] = [c for c in of_type(log, "compaction") if c.summarised_messages]
    assert compaction.after_tokens <= 0.8 * 16_000 < compaction.before_tokens
    sent = fake.llm_prefixes[-1]
    assert sent[-1].content.startswith("note 5: ")  # the newest message whole
    assert not any(m.content.startswith("note 0: ") for m in sent)  # the oldest summarised
    assert len([m for m in result.messages if m.content.startswith("note ")]) == 6  # all kept
    assert invariant_violations([m for m in sent if m.role != "system"]) == []


async def test_a_summary_the_model_refuses_is_a_warning_and_the_run_ends_cleanly(
    client, task_queue
):
    # The summary's own request refused (say, too long for the model): the run says so and makes
    # the view smaller without it; here the long answers still do not fit, so the run ends `error`
    # saying both sizes. Before, the activity's failure failed the workflow itself.
    fake = BigTools(replies=[*reads(8, "let me think " * 150), text("done")], context_tokens=6_000)
    fake.size = 2_000
    fake.client = client
    fake.summary_error = ApplicationError(
        "LLM provider answered HTTP 400: the request exceeds the available context size",
        type="LlmContextExceeded",
        non_retryable=True,
    )
    result, log, _ = await run_to_end(client, task_queue, fake, keep_rounds=1)
    assert fake.summary_requests, "no summary was asked"
    warnings = [w.message for w in of_type(log, "warning")]
    assert any("could not be summarised" in w and "exceeds the available" in w for w in warnings)
    assert result.finish_reason == "error"
    assert result.error is not None and result.error.startswith("Context window exceeded")
    assert not any(m.name == "compaction" for m in result.messages)  # no summary, no marker
