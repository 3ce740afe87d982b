"""What small local models do to a run, in the workflow (the model's replies scripted): calls
written as text are marked as such, the same call over and over stops at the repeat limit, a
reply cut off at the token limit is explained in terms the model can act on, and a run that ends
at its round limit says so."""

from __future__ import annotations

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import events, of_type, start_run, wait_for_phase, worker_for
from workflows import names
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    ChatMessage,
    LlmResponse,
    ToolCall,
    Usage,
)


def tool_contents(messages: list[ChatMessage]) -> list[str]:
    return [m.content for m in messages if m.role == "tool"]


async def test_a_call_the_model_wrote_as_text_says_so(client, task_queue):
    reply = calls(("call_text_0", "list_dir", '{"path": "."}'))
    reply = reply.model_copy(
        update={"calls_from_text": True, "warnings": ["the reply held a call written as text"]}
    )
    fake = FakeAgentActivities(replies=[reply, text("done")])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("list"))
        await handle.result()
        log = await events(handle)
    [call] = of_type(log, "tool_call")
    assert call.from_text is True
    assert "the reply held a call written as text" in [w.message for w in of_type(log, "warning")]
    assert fake.tools_run == ["call_text_0"]


async def test_the_same_call_runs_at_most_max_repeats_times(client, task_queue):
    same = [calls((f"c{i}", "list_dir", '{"path": "."}')) for i in range(5)]
    fake = FakeAgentActivities(replies=[*same, text("the folder is empty")])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("list"))
        result = await handle.result()
        log = await events(handle)
    assert fake.tools_run == ["c0", "c1", "c2"]  # max_repeats defaults to 3
    refused = tool_contents(result.messages)[3:]
    assert len(refused) == 2 and all("already ran 3 times in this run" in c for c in refused)
    warned = [w.message for w in of_type(log, "warning") if "already ran" in w.message]
    assert len(warned) == 2
    assert result.finish_reason == "stop"


async def test_a_repeated_guarded_call_never_waits_for_a_person(client, task_queue):
    echo = '{"command": "echo hi"}'
    fake = FakeAgentActivities(
        replies=[calls(("c0", "run_command", echo)), calls(("c1", "run_command", echo)), text("ok")]
    )
    options = AgentRunOptions(max_repeats=1)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("echo", options))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal(names.SIGNAL_TOOL_APPROVAL, {"call_id": "c0", "approved": True})
        result = await handle.result()
        log = await events(handle)
    assert fake.tools_run == ["c0"]
    assert len(of_type(log, "awaiting_approval")) == 1  # only the first one asked
    [second] = [e for e in of_type(log, "tool_call") if e.call_id == "c1"]
    assert second.requires_approval is False
    assert "already ran 1 times" in tool_contents(result.messages)[1]


async def test_a_call_cut_off_at_the_token_limit_is_told_so(client, task_queue):
    cut = LlmResponse(
        message=ChatMessage.assistant(
            "", [ToolCall(id="c1", name="read_file", arguments='{"path": "no')]
        ),
        usage=Usage(prompt_tokens=100, completion_tokens=50),
        finish_reason="length",
        max_tokens=50,
    )
    fake = FakeAgentActivities(replies=[cut, text("sorry")])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("read"))
        result = await handle.result()
        log = await events(handle)
    [content] = tool_contents(result.messages)
    assert "your call was cut off at the token limit (max_tokens 50)" in content
    assert "make it shorter or split it" in content
    assert fake.tools_run == []
    [warning] = [w.message for w in of_type(log, "warning")]
    assert warning.startswith("the model stopped at its token limit (max_tokens 50)")


async def test_a_reply_cut_short_of_max_tokens_blames_the_context_window(client, task_queue):
    short = LlmResponse(
        message=ChatMessage.assistant("The files are"),
        usage=Usage(prompt_tokens=1_900, completion_tokens=213),
        finish_reason="length",
        max_tokens=512,
    )
    fake = FakeAgentActivities(replies=[short])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("list"))
        await handle.result()
        log = await events(handle)
    [warning] = [w.message for w in of_type(log, "warning")]
    assert warning.startswith(
        "the model's context window is full (it stopped after 213 of max_tokens 512)"
    )


async def test_a_run_that_ends_at_its_round_limit_says_so(client, task_queue):
    fake = FakeAgentActivities(
        replies=[
            LlmResponse(
                message=ChatMessage.assistant(
                    f"let me look again ({i})",
                    [ToolCall(id=f"c{i}", name="read_file", arguments=f'{{"path": "f{i}"}}')],
                )
            )
            for i in range(3)
        ]
    )
    options = AgentRunOptions(max_rounds=2)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go", options))
        result = await handle.result()
        log = await events(handle)
    assert result.finish_reason == "max_rounds"
    [warning] = [w.message for w in of_type(log, "warning")]
    assert "stopped at its round limit (max_rounds 2)" in warning
    assert "let me look again (1)" in warning
