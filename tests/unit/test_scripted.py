"""The offline `scripted` assistant's story rules."""

from __future__ import annotations

import json

import pytest

from activities.scripted import HELP_TEXT, parse_intent, scripted_reply
from workflows.contract.tool_results import rejection_message
from workflows.conversation.record import invariant_violations
from workflows.model import ChatMessage, ToolCall

TOOLS = ["list_dir", "read_file", "run_command", "delete_path"]


def only_call(messages: list[ChatMessage], tools: list[str] = TOOLS) -> ToolCall:
    reply = scripted_reply(messages, tools).message
    assert reply.tool_calls is not None and len(reply.tool_calls) == 1, reply
    return reply.tool_calls[0]


def answer(messages: list[ChatMessage], content: str) -> list[ChatMessage]:
    """Append the scripted assistant's next call and a tool message with `content`."""
    reply = scripted_reply(messages, TOOLS).message
    assert reply.tool_calls
    call = reply.tool_calls[0]
    return [*messages, reply, ChatMessage.tool(call, content)]


def listing(*names: str) -> str:
    return json.dumps(
        {"ok": True, "data": [{"name": n, "kind": "dir", "size": None} for n in names]}
    )


@pytest.mark.parametrize(
    ("text", "kind", "argument"),
    [
        ("delete logs", "delete", "logs"),
        ("Please remove `old-builds/`.", "delete", "old-builds/"),
        ('delete the folder "logs".', "delete", "logs"),
        ("run: ls -la", "run", "ls -la"),
        ("please run `du -sh .` now", "run", "du -sh ."),
        ("read notes.txt", "read", "notes.txt"),
        ("list", "list", ""),
        ("ls please", "list", ""),
        ("hello there", "help", ""),
    ],
)
def test_intents(text, kind, argument):
    intent = parse_intent(text)
    assert (intent.kind, intent.argument) == (kind, argument)


def test_delete_flow_lists_first_then_deletes():
    messages = [ChatMessage.user("delete logs")]
    first = only_call(messages)
    assert (first.id, first.name, json.loads(first.arguments)) == (
        "call_1",
        "list_dir",
        {"path": "."},
    )
    assert isinstance(first.arguments, str)
    messages = answer(messages, listing("logs", "notes"))
    second = only_call(messages)
    assert (second.id, second.name, json.loads(second.arguments)) == (
        "call_2",
        "delete_path",
        {"path": "logs"},
    )
    done = [
        *messages,
        ChatMessage.assistant("", [second]),
        ChatMessage.tool(
            second, json.dumps({"ok": True, "data": {"path": "logs", "kind": "dir", "files": 2}})
        ),
    ]
    reply = scripted_reply(done, TOOLS).message
    assert reply.tool_calls is None
    assert reply.content.startswith("Deleted logs.")
    assert invariant_violations(done) == []


def test_delete_of_something_missing_says_so():
    messages = answer([ChatMessage.user("delete nothing-here")], listing("logs", "notes"))
    reply = scripted_reply(messages, TOOLS).message
    assert reply.tool_calls is None
    assert reply.content.startswith("I could not find nothing-here")
    assert "logs, notes" in reply.content


def test_a_rejection_is_acknowledged_with_its_reason():
    messages = answer([ChatMessage.user("delete logs")], listing("logs"))
    call = only_call(messages)
    messages = [
        *messages,
        ChatMessage.assistant("", [call]),
        ChatMessage.tool(call, rejection_message("need to check contents first.")),
    ]
    reply = scripted_reply(messages, TOOLS).message
    assert reply.content == (
        "Understood — I did not delete logs. Your reason: need to check contents first."
    )


def test_run_command_result_is_summarised():
    messages = [ChatMessage.user("run: ls -la")]
    call = only_call(messages)
    assert json.loads(call.arguments) == {"command": "ls -la"}
    output = {"ok": True, "data": {"stdout": "total 0\nnotes.txt\n", "stderr": "", "exit_code": 0}}
    messages = [
        *messages,
        ChatMessage.assistant("", [call]),
        ChatMessage.tool(call, json.dumps(output)),
    ]
    reply = scripted_reply(messages, TOOLS).message.content
    assert "exited with code 0" in reply
    assert "notes.txt" in reply


def test_read_file_preview_and_error_envelope():
    messages = [ChatMessage.user("read notes.txt")]
    call = only_call(messages)
    assert call.name == "read_file"
    ok = [
        *messages,
        ChatMessage.assistant("", [call]),
        ChatMessage.tool(call, '{"ok": true, "data": "milk"}'),
    ]
    assert "milk" in scripted_reply(ok, TOOLS).message.content
    failed = [
        *messages,
        ChatMessage.assistant("", [call]),
        ChatMessage.tool(
            call, '{"ok": false, "error": "\'notes.txt\' does not exist", "data": null}'
        ),
    ]
    content = scripted_reply(failed, TOOLS).message.content
    assert content.startswith("The read_file tool failed:")
    assert "does not exist" in content


def test_call_ids_count_every_earlier_call():
    history = [
        ChatMessage.user("list"),
        ChatMessage.assistant("", [ToolCall(id="call_1", name="list_dir", arguments="{}")]),
        ChatMessage.tool(ToolCall(id="call_1", name="list_dir"), listing("a")),
        ChatMessage.assistant("The workspace contains: a."),
        ChatMessage.user("run: echo hi"),
    ]
    assert only_call(history).id == "call_2"


def test_only_available_tools_are_called():
    reply = scripted_reply([ChatMessage.user("run: rm -rf /")], ["list_dir"]).message
    assert reply.tool_calls is None
    assert "not available" in reply.content


def test_anything_else_gets_the_help_text_and_usage():
    response = scripted_reply([ChatMessage.user("what can you do?")], TOOLS)
    assert response.message.content == HELP_TEXT
    assert "scripted" in response.message.content
    assert response.usage.prompt_tokens >= 1 and response.usage.completion_tokens > 10


def test_deterministic():
    messages = [ChatMessage.user("delete logs")]
    assert scripted_reply(messages, TOOLS) == scripted_reply(messages, TOOLS)


# ---------------------------------------------------------------- summaries (compaction)


def test_the_scripted_summary_is_the_first_line_of_each_message():
    from activities.scripted import scripted_summary

    call = ToolCall(id="call_1", name="read_file", arguments='{"path": "notes.txt"}')
    messages = [
        ChatMessage.user("Read notes.txt\nand tell me what it says"),
        ChatMessage.assistant("", [call]),
        ChatMessage.tool(call, '{"ok": true, "data": "remember the milk"}\nmore'),
        ChatMessage.assistant("It says: remember the milk."),
    ]
    summary = scripted_summary(messages)
    assert summary == (
        "Summary of 4 earlier message(s):\n"
        "- user: Read notes.txt\n"
        '- assistant: called read_file {"path": "notes.txt"}\n'
        '- read_file result: {"ok": true, "data": "remember the milk"}\n'
        "- assistant: It says: remember the milk."
    )
    assert scripted_summary(messages) == summary  # deterministic


def test_the_scripted_summary_is_bounded():
    from activities.scripted import scripted_summary

    messages = [ChatMessage.user(f"message {i} " + "x" * 500) for i in range(200)]
    summary = scripted_summary(messages, max_chars=2_000)
    assert len(summary) <= 2_100
    lines = summary.splitlines()
    assert all(len(line) <= 140 for line in lines)
    assert lines[-1].startswith("- … and ") and lines[-1].endswith(" more")


DELEGATING = [*TOOLS, "delegate"]


def test_a_delegation_is_a_delegate_call_whose_task_works_as_any_prompt():
    messages = [ChatMessage.user("delegate: delete the logs folder")]
    call = only_call(messages, DELEGATING)
    assert (call.id, call.name, json.loads(call.arguments)) == (
        "call_1",
        "delegate",
        {"task": "delete the logs folder"},
    )
    # The sub-agent's conversation: the task as its user message, played as any prompt.
    child = only_call([ChatMessage.user("delete the logs folder")], DELEGATING)
    assert (child.name, json.loads(child.arguments)) == ("list_dir", {"path": "."})
    # Offered no `delegate` (past the depth limit): it says so instead of calling it.
    said = scripted_reply(messages, TOOLS).message
    assert not said.tool_calls and "delegate tool" in said.content


def test_several_delegations_options_and_nesting():
    reply = scripted_reply(
        [
            ChatMessage.user(
                "delegate: list; delegate (max_rounds 1; tools: list_dir): read notes.txt"
            )
        ],
        DELEGATING,
    ).message
    assert [(c.id, json.loads(c.arguments)) for c in reply.tool_calls or []] == [
        ("call_1", {"task": "list"}),
        ("call_2", {"task": "read notes.txt", "max_rounds": 1, "tools": ["list_dir"]}),
    ]
    nested = only_call([ChatMessage.user("delegate: delegate: list")], DELEGATING)
    assert json.loads(nested.arguments) == {"task": "delegate: list"}


def test_a_sub_agents_answer_and_failure_are_reported():
    messages = [ChatMessage.user("delegate: list; delegate: read notes.txt")]
    reply = scripted_reply(messages, DELEGATING).message
    first, second = reply.tool_calls or []
    answered = {"ok": True, "error": None, "data": {"answer": "The workspace contains: logs.",
                "workflow_id": "W.call_1", "finish_reason": "stop", "tokens": 40}}  # fmt: skip
    failed = {"ok": False, "error": "sub-agent W.call_2 ended with max_rounds", "data": None}
    done = [
        *messages,
        reply,
        ChatMessage.tool(first, json.dumps(answered)),
        ChatMessage.tool(second, json.dumps(failed)),
    ]
    said = scripted_reply(done, DELEGATING).message.content
    assert said.splitlines() == [
        "Sub-agent W.call_1 answered: The workspace contains: logs.",
        "The delegate tool failed: sub-agent W.call_2 ended with max_rounds",
    ]
