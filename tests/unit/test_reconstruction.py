"""Unit tests of the pure resume-by-reconstruction functions: no Temporal involved."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from workflows.contract.arguments import parse_arguments
from workflows.contract.tool_results import (
    TRUNCATION_MARKER,
    envelope_error,
    framework_error_message,
    invalid_arguments_message,
    rejection_message,
    tool_not_found_message,
    tool_output_message,
)
from workflows.conversation.record import (
    invariant_violations,
    last_tool_call_index,
    pending_calls,
    unique_call_ids,
)
from workflows.gate.reconstruction import Execute, Respond, Step, plan_resume
from workflows.model import ChatMessage, ToolCall
from workflows.shown import shorten

GUARDED = {"run_command", "delete_path"}
KNOWN = {"run_command", "delete_path", "list_dir", "read_file"}


@dataclass
class Ans:
    approved: bool
    reason: str | None = None


def call(call_id: str, name: str = "run_command", arguments: object = "{}") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def tool(call_id: str, name: str = "run_command", content: str = "ok") -> ChatMessage:
    return ChatMessage(role="tool", content=content, name=name, tool_call_id=call_id)


def plan(pending: list[ToolCall], answers: dict[str, Ans] | None = None) -> list[Step]:
    return plan_resume(
        pending,
        answers or {},
        lambda c: c.name in GUARDED,
        lambda n: n in KNOWN,
    )


# ---- pending calls ----


def test_pending_calls_none_without_tool_calls():
    history = [ChatMessage.user("hi"), ChatMessage.assistant("hello")]
    assert pending_calls(history) == []
    assert last_tool_call_index(history) is None
    assert pending_calls([]) == []


def test_pending_calls_are_last_assistant_calls_minus_answered():
    a, b, c = call("a"), call("b", "list_dir"), call("c")
    history = [ChatMessage.user("go"), ChatMessage.assistant("", [a, b, c]), tool("a")]
    assert [p.id for p in pending_calls(history)] == ["b", "c"]
    history.append(tool("b", "list_dir"))
    history.append(tool("c"))
    assert pending_calls(history) == []


def test_pending_calls_keep_order_even_if_answers_out_of_order():
    a, b, c = call("a"), call("b"), call("c")
    history = [ChatMessage.assistant("", [a, b, c]), tool("b")]
    assert [p.id for p in pending_calls(history)] == ["a", "c"]


def test_pending_calls_reused_ids_across_rounds():
    """Models reuse `call_0` each round: an old answer must not hide the new call."""
    first = call("call_0", "list_dir")
    second = call("call_0", "run_command")
    history = [
        ChatMessage.user("go"),
        ChatMessage.assistant("", [first]),
        tool("call_0", "list_dir"),
        ChatMessage.assistant("", [second]),
    ]
    pending = pending_calls(history)
    assert [(p.id, p.name) for p in pending] == [("call_0", "run_command")]
    assert last_tool_call_index(history) == 3


def test_pending_calls_only_look_at_last_assistant_with_calls():
    old = call("old")
    history = [
        ChatMessage.assistant("", [old]),  # never answered (e.g. a cancelled run's tail)
        ChatMessage.user("new question"),
        ChatMessage.assistant("just text"),
    ]
    # The last assistant with tool calls is still the first message.
    assert [p.id for p in pending_calls(history)] == ["old"]


def test_unique_call_ids():
    batch = [call("x"), call("x"), call(""), call("x"), call("y")]
    out = unique_call_ids(batch, "call_r3")
    ids = [c.id for c in out]
    assert ids == ["x", "x#2", "call_r3_2", "x#3", "y"]
    assert len(set(ids)) == len(ids)
    # unchanged calls are the same objects, names and arguments kept
    assert out[0] is batch[0]
    assert [c.name for c in out] == [c.name for c in batch]


def test_unique_call_ids_generated_id_collides_with_given():
    out = unique_call_ids([call("p_1"), call("")], "p")
    assert [c.id for c in out] == ["p_1", "p_1#2"]


# ---- plan_resume ----


def test_plan_approved_executes_with_parsed_arguments():
    steps = plan([call("a", arguments='{"command": "ls"}')], {"a": Ans(True)})
    assert steps == [Execute(call("a", arguments='{"command": "ls"}'), {"command": "ls"})]


def test_plan_rejected_with_reason():
    steps = plan([call("a")], {"a": Ans(False, "too risky")})
    assert len(steps) == 1 and isinstance(steps[0], Respond)
    assert steps[0].content == "Rejected: too risky"


@pytest.mark.parametrize("reason", [None, ""])
def test_plan_rejected_without_reason(reason):
    steps = plan([call("a")], {"a": Ans(False, reason)})
    assert isinstance(steps[0], Respond)
    assert steps[0].content == "Rejected: User denied"


def test_plan_unanswered_approval_needing_is_denied():
    steps = plan([call("a")], {})
    assert isinstance(steps[0], Respond)
    assert steps[0].content == "Rejected: User denied"


def test_plan_unguarded_call_executes_without_answer():
    steps = plan([call("a", "list_dir", {"path": "."})], {})
    assert steps == [Execute(call("a", "list_dir", {"path": "."}), {"path": "."})]


def test_plan_unknown_tool():
    steps = plan([call("a", "x")], {})
    assert isinstance(steps[0], Respond)
    assert steps[0].content == "Tool 'x' not found"


def test_plan_rejection_checked_before_unknown_tool():
    # an unknown tool that the run lists in approval_required: rejected is what the model sees
    steps = plan_resume([call("a", "x")], {"a": Ans(False, "no")}, lambda c: True, lambda n: False)
    assert isinstance(steps[0], Respond) and steps[0].content == "Rejected: no"


def test_plan_invalid_json_arguments():
    steps = plan([call("a", "list_dir", "{not json")], {})
    assert isinstance(steps[0], Respond)
    body = json.loads(steps[0].content)
    assert body["ok"] is False and body["data"] is None
    assert set(body) == {"ok", "error", "data"}
    assert body["error"].startswith("Invalid tool arguments: ")
    assert "position" in body["error"]


def test_plan_invalid_json_of_approved_call_not_executed():
    steps = plan([call("a", "run_command", "[1,")], {"a": Ans(True)})
    assert isinstance(steps[0], Respond)
    assert json.loads(steps[0].content)["error"].startswith("Invalid tool arguments: ")


def test_plan_mixed_batch_keeps_call_order():
    batch = [
        call("u", "list_dir"),
        call("ok", "run_command"),
        call("no", "delete_path"),
        call("missing", "nope"),
        call("silent", "delete_path"),
    ]
    steps = plan(batch, {"ok": Ans(True), "no": Ans(False, "keep it")})
    assert [s.call.id for s in steps] == ["u", "ok", "no", "missing", "silent"]
    kinds = [type(s).__name__ for s in steps]
    assert kinds == ["Execute", "Execute", "Respond", "Respond", "Respond"]
    contents = [s.content for s in steps if isinstance(s, Respond)]
    assert contents == ["Rejected: keep it", "Tool 'nope' not found", "Rejected: User denied"]


def test_plan_ignores_answers_for_other_ids():
    steps = plan([call("a")], {"b": Ans(True)})
    assert isinstance(steps[0], Respond) and steps[0].content == "Rejected: User denied"


# ---- arguments ----


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        ("", {}),
        ("   ", {}),
        ("[1, 2]", [1, 2]),
        ("null", None),
        ({"already": "parsed"}, {"already": "parsed"}),
        ([1], [1]),
        (None, None),
        (3, 3),
    ],
)
def test_parse_arguments_ok(raw, value):
    parsed = parse_arguments(raw)
    assert parsed.ok and parsed.value == value and parsed.error == ""


@pytest.mark.parametrize("raw", ["{", "{'a': 1}", "not json", '{"a": 1} trailing'])
def test_parse_arguments_bad(raw):
    parsed = parse_arguments(raw)
    assert not parsed.ok
    assert "position" in parsed.error


# ---- messages ----


def test_seed_strings():
    assert rejection_message("nope") == "Rejected: nope"
    assert rejection_message(None) == "Rejected: User denied"
    assert tool_not_found_message("x") == "Tool 'x' not found"
    assert json.loads(envelope_error("bad")) == {"ok": False, "error": "bad", "data": None}


def test_framework_error_message():
    body = json.loads(framework_error_message("boom"))
    assert body == {"ok": False, "error": "Framework error: boom", "data": None}


def test_invalid_arguments_message():
    body = json.loads(invalid_arguments_message("Expecting value at position 0"))
    assert body == {
        "ok": False,
        "error": "Invalid tool arguments: Expecting value at position 0",
        "data": None,
    }


@pytest.mark.parametrize("output", [{"ok": True, "data": [1, "é"]}, "text", 3, None, [1, 2]])
def test_tool_output_message_is_json_dumps(output):
    assert tool_output_message(output) == json.dumps(output, ensure_ascii=False)
    assert json.loads(tool_output_message(output)) == output


def test_tool_output_message_not_serialisable():
    body = json.loads(tool_output_message({"x": object()}))
    assert body["ok"] is False and body["error"].startswith("Framework error: ")


def test_bound_text_short_is_unchanged():
    assert shorten("abc", 3, TRUNCATION_MARKER, within=True) == "abc"
    assert shorten("", 0, TRUNCATION_MARKER, within=True) == ""


@pytest.mark.parametrize("size", [101, 150, 10_000])
def test_bound_text_cut_with_marker(size):
    text = "x" * size
    out = shorten(text, 100, TRUNCATION_MARKER, within=True)
    assert len(out) <= 100
    kept = out.index("…")
    assert out[kept:] == TRUNCATION_MARKER.format(dropped=size - kept)
    assert out.startswith("x" * kept)
    assert f"truncated {size - kept} characters" in out


# ---- the ordering invariant ----


def test_invariant_ok_histories():
    a, b = call("a"), call("b", "list_dir")
    good = [
        ChatMessage.system("s"),
        ChatMessage.user("u"),
        ChatMessage.assistant("", [a, b]),
        tool("a"),
        tool("b", "list_dir"),
        ChatMessage.user("more"),
        ChatMessage.assistant("done"),
    ]
    assert invariant_violations(good) == []
    assert invariant_violations(good, allow_open_tail=False) == []


def test_invariant_open_tail():
    a, b = call("a"), call("b")
    open_tail = [ChatMessage.user("u"), ChatMessage.assistant("", [a, b]), tool("a")]
    assert invariant_violations(open_tail) == []
    assert invariant_violations(open_tail, allow_open_tail=False) != []
    fully_open = [ChatMessage.user("u"), ChatMessage.assistant("", [a, b])]
    assert invariant_violations(fully_open) == []


@pytest.mark.parametrize(
    "history",
    [
        # wrong order
        [ChatMessage.assistant("", [call("a"), call("b")]), tool("b"), tool("a")],
        # user message between calls and results (the bug of the design this loop comes from)
        [
            ChatMessage.assistant("", [call("a")]),
            ChatMessage.user("x"),
            tool("a"),
        ],
        # a call answered twice
        [ChatMessage.assistant("", [call("a")]), tool("a"), tool("a")],
        # tool message with no call
        [ChatMessage.user("u"), tool("a")],
        # an unanswered call that is not the tail
        [
            ChatMessage.assistant("", [call("a"), call("b")]),
            tool("a"),
            ChatMessage.assistant("next"),
        ],
        # wrong id
        [ChatMessage.assistant("", [call("a")]), tool("z")],
    ],
)
def test_invariant_violations_detected(history):
    assert invariant_violations(history) != []


def test_arguments_nested_too_deeply_are_invalid_not_a_crash():
    deep = '{"a":' * 3_000 + "1" + "}" * 3_000
    parsed = parse_arguments(deep)
    assert not parsed.ok and parsed.error == "nested too deeply"
