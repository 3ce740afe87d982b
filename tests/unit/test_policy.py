"""Unit tests of the approval policy: the rule model, evaluation, shell safety, remember, edits,
the `policy` view, and the worker's `AGENT_POLICY_FILE`. Pure: no Temporal server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.policy_file import (
    PolicyActivities,
    load_policy_file,
    worker_policy_from_env,
)
from workflows.bounds import MAX_ARGUMENT_CHARS
from workflows.contract.arguments import arguments_json
from workflows.contract.rules import (
    MAX_PATTERN_CHARS,
    MAX_POLICY_BYTES,
    MAX_RULES,
    ApprovalPolicy,
    PolicyRule,
    WorkerPolicy,
)
from workflows.conversation.record import with_call
from workflows.gate.edits import edited_call
from workflows.gate.policy import (
    Verdict,
    effective_rules,
    evaluate,
    literal_glob,
    policy_view,
    rule_matches,
    value_text,
)
from workflows.gate.remember import remember, remembered_rule
from workflows.intake import parse_approval, parse_approval_policy
from workflows.model import (
    AgentRunInput,
    ApprovalEvent,
    ChatMessage,
    ToolApprovalResponse,
    ToolCall,
)

EXAMPLE = {
    "rules": [
        {"tool": "run_command", "when": {"command": "git status*"}, "decision": "allow"},
        {"tool": "delete_path", "when": {"path": "logs/*"}, "decision": "allow"},
        {"tool": "delete_path", "decision": "deny", "reason": "nothing is deleted outside logs/"},
        {"tool": "list_dir", "decision": "ask"},
    ]
}


def rules(*items: dict[str, Any]) -> list[PolicyRule]:
    return [PolicyRule.model_validate(item) for item in items]


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def decide(
    rule_list: list[PolicyRule], tool: str, arguments: Any, requires_approval: bool = True
) -> Verdict:
    return evaluate(rule_list, tool, arguments, requires_approval=requires_approval)


# ---------------------------------------------------------------- the rule model


def test_the_documented_example_parses():
    parsed = parse_approval_policy(EXAMPLE)
    assert parsed.error is None and parsed.value is not None
    assert [r.decision for r in parsed.value.rules] == ["allow", "allow", "deny", "ask"]
    assert parsed.value.rules[2].reason == "nothing is deleted outside logs/"
    assert parsed.value.rules[0].when == {"command": "git status*"}


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ({"rules": [{"tool": "x", "decision": "maybe"}]}, "rules.0.decision"),
        ({"rules": [{"tool": "x", "decision": "Allow"}]}, "rules.0.decision"),
        ({"rules": [{"decision": "allow"}]}, "rules.0.tool: Field required"),
        ({"rules": [{"tool": "", "decision": "allow"}]}, "rules.0.tool"),
        ({"rules": [{"tool": 7, "decision": "allow"}]}, "rules.0.tool"),
        ({"rules": [{"tool": "x", "when": {"a": 1}, "decision": "allow"}]}, "rules.0.when.a"),
        ({"rules": [{"tool": "x", "when": {"a": None}, "decision": "deny"}]}, "rules.0.when.a"),
        ({"rules": [{"tool": "x", "when": ["a"], "decision": "deny"}]}, "rules.0.when"),
        ({"rules": [{"tool": "x", "decision": "allow", "why": "?"}]}, "rules.0.why"),
        ({"rules": [{"tool": "x", "decision": "deny", "reason": 3}]}, "rules.0.reason"),
        ({"rules": [{"tool": "x"}]}, "rules.0.decision: Field required"),
        ({"rules": [{"tool": "x", "decision": "allow"}] * (MAX_RULES + 1)}, "at most 200"),
        (
            {"rules": [{"tool": "x" * (MAX_PATTERN_CHARS + 1), "decision": "allow"}]},
            "at most 1000 characters",
        ),
        (
            {"rules": [{"tool": "x", "when": {"a": "y" * 1001}, "decision": "allow"}]},
            "at most 1000 characters",
        ),
        ({"rules": [], "extra": 1}, "extra: Extra inputs"),
        ({"rules": "all"}, "rules"),
        ({}, "rules: Field required"),
        ([], "must be a JSON object"),
        (None, "must be a JSON object"),
    ],
)
def test_invalid_policies_are_refused_with_one_line(payload, needle):
    parsed = parse_approval_policy(payload)
    assert parsed.value is None
    assert parsed.error is not None and needle in parsed.error
    assert "\n" not in parsed.error


def test_limits_themselves_are_valid():
    at_limit = [{"tool": "x" * MAX_PATTERN_CHARS, "decision": "allow"}] * MAX_RULES
    parsed = parse_approval_policy({"rules": at_limit})
    assert parsed.error is None and parsed.value is not None
    assert len(parsed.value.rules) == MAX_RULES


def test_a_policy_too_large_as_json_is_refused():
    rule = {
        "tool": "x" * MAX_PATTERN_CHARS,
        "when": {f"a{i}": "p" * MAX_PATTERN_CHARS for i in range(10)},
        "decision": "deny",
    }
    parsed = parse_approval_policy({"rules": [rule] * 30})
    assert parsed.value is None
    assert parsed.error is not None and f"more than {MAX_POLICY_BYTES}" in parsed.error


def test_invalid_rules_in_the_run_input_fail_the_run():
    payload = {
        "messages": [{"role": "user", "content": "hi"}],
        "options": {"approval_policy": {"rules": [{"tool": "x", "decision": "yes"}]}},
    }
    with pytest.raises(ApplicationError) as caught:
        AgentRunInput.model_validate(payload)
    assert caught.value.type == "InvalidAgentRunInput"
    assert caught.value.non_retryable
    assert "options.approval_policy.rules.0.decision" in caught.value.message


def test_the_run_input_carries_the_policy():
    payload = {
        "messages": [{"role": "user", "content": "hi"}],
        "options": {"approval_policy": EXAMPLE},
    }
    run = AgentRunInput.model_validate(payload)
    assert run.options.approval_policy is not None
    assert len(run.options.approval_policy.rules) == 4
    assert run.options.model_extra == {}
    again = AgentRunInput.model_validate_json(run.model_dump_json())
    assert again.options.approval_policy == run.options.approval_policy
    assert AgentRunInput.model_validate({"messages": []}).options.approval_policy is None


# ---------------------------------------------------------------- evaluation


@pytest.mark.parametrize(
    ("tool", "arguments", "decision", "rule", "reason"),
    [
        ("run_command", '{"command": "git status"}', "allow", 0, None),
        ("run_command", {"command": "git status --short"}, "allow", 0, None),
        ("run_command", '{"command": "git push"}', "ask", None, None),
        ("delete_path", '{"path": "logs/old"}', "allow", 1, None),
        ("delete_path", '{"path": "notes.txt"}', "deny", 2, "nothing is deleted outside logs/"),
        ("list_dir", '{"path": "."}', "ask", 3, None),
    ],
)
def test_the_example_decides(tool, arguments, decision, rule, reason):
    example = ApprovalPolicy.model_validate(EXAMPLE).rules
    assert decide(example, tool, arguments, tool != "list_dir") == Verdict(decision, rule, reason)


def test_first_match_wins():
    both = rules({"tool": "run_command", "decision": "deny"}, {"tool": "*", "decision": "allow"})
    assert decide(both, "run_command", "{}") == Verdict("deny", 0, "Denied by policy")
    assert decide(both, "list_dir", "{}") == Verdict("allow", 1, None)


def test_deny_reason_default_and_given():
    plain = rules({"tool": "x", "decision": "deny"})
    given = rules({"tool": "x", "decision": "deny", "reason": "not here"})
    assert decide(plain, "x", "{}").reason == "Denied by policy"
    assert decide(given, "x", "{}").reason == "not here"
    empty = rules({"tool": "x", "decision": "deny", "reason": ""})
    assert decide(empty, "x", "{}").reason == "Denied by policy"
    allow = rules({"tool": "x", "decision": "allow", "reason": "read-only"})
    assert decide(allow, "x", "{}") == Verdict("allow", 0, "read-only")


@pytest.mark.parametrize("requires_approval", [True, False])
def test_no_rule_matches_the_tools_own_default(requires_approval):
    only = rules({"tool": "other", "decision": "deny"})
    verdict = decide(only, "run_command", "{}", requires_approval)
    assert verdict == Verdict("ask" if requires_approval else "allow", None, None)
    assert decide([], "x", "{}", requires_approval).decision == verdict.decision


def test_ask_applies_to_a_tool_that_needs_no_approval():
    assert decide(rules({"tool": "read_file", "decision": "ask"}), "read_file", "{}", False) == (
        Verdict("ask", 0, None)
    )


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("run_*", "run_command", True),
        ("Run_*", "run_command", False),  # case-sensitive
        ("run_command", "run_command", True),
        ("run_command", "run_commands", False),
        ("*", "anything", True),
        ("?ead_file", "read_file", True),
        ("[rd]*", "delete_path", True),
        ("[!rd]*", "delete_path", False),
        ("mcp.*", "mcp.fs.read", True),
    ],
)
def test_tool_is_a_case_sensitive_glob(pattern, name, matches):
    verdict = decide(rules({"tool": pattern, "decision": "deny"}), name, "{}", False)
    assert (verdict.rule == 0) is matches


@pytest.mark.parametrize(
    ("when", "arguments", "matches"),
    [
        ({"path": "logs/*"}, {"path": "logs/a"}, True),
        ({"path": "logs/*"}, {"path": "src/a"}, False),
        ({"path": "logs/*"}, {}, False),  # a listed argument must be present
        ({"path": "logs/*"}, {"other": "logs/a"}, False),
        ({"path": "*", "recursive": "true"}, {"path": "a", "recursive": True}, True),
        ({"path": "*", "recursive": "true"}, {"path": "a", "recursive": False}, False),
        ({"path": "*", "recursive": "true"}, {"path": "a"}, False),  # every one must match
        ({"count": "1?"}, {"count": 12}, True),  # numbers as their JSON text
        ({"count": "12"}, {"count": 12.0}, False),  # 12.0 is "12.0"
        ({"opts": '{"a":1,"b":*}'}, {"opts": {"a": 1, "b": [True, None]}}, True),
        ({"opts": '{"a":1,"b":[[]true,null]}'}, {"opts": {"a": 1, "b": [True, None]}}, True),
        ({"opts": '{"a":1,"b":[true,null]}'}, {"opts": {"a": 1, "b": [True, None]}}, False),
        ({"opts": "null"}, {"opts": None}, True),
        ({"name": "é*"}, {"name": "été"}, True),  # strings as they are
        ({}, {"any": 1}, True),  # an empty `when` still needs a JSON object
    ],
)
def test_when_globs_over_argument_values(when, arguments, matches):
    rule = rules({"tool": "t", "when": when, "decision": "deny"})
    assert (decide(rule, "t", arguments, False).rule == 0) is matches
    assert (decide(rule, "t", json.dumps(arguments), False).rule == 0) is matches


@pytest.mark.parametrize("arguments", ['["ls"]', "[1, 2]", '"ls"', "{not json", "3", ["ls"], None])
def test_arguments_that_are_not_an_object_match_only_rules_without_when(arguments):
    listed = rules(
        {"tool": "t", "when": {"command": "*"}, "decision": "deny"},
        {"tool": "t", "decision": "ask"},
    )
    assert decide(listed, "t", arguments, False) == Verdict("ask", 1, None)


def test_empty_arguments_are_an_empty_object():
    rule = rules({"tool": "t", "when": {}, "decision": "deny"})
    assert decide(rule, "t", "", False).rule == 0
    assert decide(rule, "t", "  ", False).rule == 0


def test_value_text():
    assert value_text("a b") == "a b"
    assert value_text(1) == "1"
    assert value_text(True) == "true"
    assert value_text(None) == "null"
    assert value_text({"a": [1, "x"]}) == '{"a":[1,"x"]}'


def test_value_text_is_the_one_text_form_of_arguments():
    """A `when` glob sees `é` where people see `é` (the events' and the digest's text form),
    not the `\\u00e9` escape."""
    assert value_text(["été"]) == '["été"]' == arguments_json(["été"])
    deny = rules({"tool": "t", "when": {"tags": "*é*"}, "decision": "deny"})
    assert decide(deny, "t", {"tags": ["été"]}).rule == 0
    assert decide(deny, "t", json.dumps({"tags": ["été"]})).rule == 0


def test_effective_order_enforced_then_run_then_default():
    enforced = rules({"tool": "delete_path", "decision": "ask"})
    run = rules(
        {"tool": "delete_path", "decision": "allow"}, {"tool": "run_command", "decision": "allow"}
    )
    defaults = rules({"tool": "run_command", "decision": "deny"}, {"tool": "*", "decision": "deny"})
    listed = effective_rules(enforced, run, defaults)
    assert decide(listed, "delete_path", "{}") == Verdict("ask", 0, None)  # enforced beats run
    assert decide(listed, "run_command", "{}") == Verdict("allow", 2, None)  # run beats default
    assert decide(listed, "read_file", "{}", False) == Verdict("deny", 4, "Denied by policy")


# ---------------------------------------------------------------- shell safety


ECHO_CASES = [
    ("echo hi", True),
    ("echo hi; rm -rf .", False),
    ("echo x > f", False),
    ("echo x < f", False),
    ("echo hi && rm -rf .", False),
    ("echo hi & rm -rf .", False),
    ("echo hi | sh", False),
    ("echo `rm -rf .`", False),
    ("echo $(rm -rf .)", False),
    ("echo hi\nrm -rf .", False),
    ("echo hi\rrm -rf .", False),
    ("echo hi\x00rm", False),
    ("echo $HOME", False),
    ("echo (hi)", False),
    ("echo 'a b'", False),
    ('echo "$x"', False),
    ("echo a\\ b", False),
    # bash's prompt expansion runs `id` here without `$(`, a backtick or a separator
    ("echo ${x=\\044\\(id\\)}${x@P}", False),
]
"""(command, allowed by `echo *`)."""


@pytest.mark.parametrize(("command", "allowed"), ECHO_CASES)
def test_allow_patterns_never_match_shell_metacharacters(command, allowed):
    echo = rules({"tool": "run_command", "when": {"command": "echo *"}, "decision": "allow"})
    verdict = decide(echo, "run_command", {"command": command})
    assert verdict.decision == ("allow" if allowed else "ask")
    assert rule_matches(echo[0], "run_command", {"command": command}) is allowed


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        ("git log --oneline | head -1", True),
        ("git log -5 | head", True),
        ("git log --oneline | head -1 | rm -rf important.txt", False),
        ("git log --oneline | head -1; rm -rf important.txt", False),
        ("git log | rm -rf x | head -1", False),
        ("git log --format=$(id) | head", False),
    ],
)
def test_a_literal_pipe_allows_one_pipe_at_its_place(command, allowed):
    """The docs' rule `git log * | head*`: one pipe to `head`, and nothing after it."""
    rule = rules(
        {"tool": "run_command", "when": {"command": "git log * | head*"}, "decision": "allow"}
    )
    assert decide(rule, "run_command", {"command": command}).decision == (
        "allow" if allowed else "ask"
    )


@pytest.mark.parametrize(
    ("pattern", "command"),
    [
        ("echo * | sort", "echo b a | sort"),
        ("* > out.txt", "ls > out.txt"),
        ("make *;*", "make a; make b"),
        ("echo $(date)", "echo $(date)"),
        ("*\n*", "a\nb"),
        ("echo '*'", "echo 'a b'"),
        ("echo $HOME", "echo $HOME"),
    ],
)
def test_a_metacharacter_in_the_pattern_may_match(pattern, command):
    rule = rules({"tool": "run_command", "when": {"command": pattern}, "decision": "allow"})
    assert decide(rule, "run_command", {"command": command}) == Verdict("allow", 0, None)


def test_a_metacharacter_matches_only_where_the_pattern_holds_it():
    pipe = rules({"tool": "run_command", "when": {"command": "echo * | *"}, "decision": "allow"})
    assert decide(pipe, "run_command", {"command": "echo a | b"}).decision == "allow"
    assert decide(pipe, "run_command", {"command": "echo a | b; c"}).decision == "ask"
    assert decide(pipe, "run_command", {"command": "echo a | b | c"}).decision == "ask"
    dollar = rules({"tool": "run_command", "when": {"command": "* $* (*"}, "decision": "allow"})
    assert decide(dollar, "run_command", {"command": "x $ (y"}).decision == "allow"
    assert decide(dollar, "run_command", {"command": "x $(y"}).decision == "ask"
    assert decide(dollar, "run_command", {"command": "x $$ (y"}).decision == "ask"
    quoted = rules({"tool": "run_command", "when": {"command": "echo '*'"}, "decision": "allow"})
    assert decide(quoted, "run_command", {"command": "echo 'a' 'b'"}).decision == "ask"


@pytest.mark.parametrize("pattern", ["echo [;]*", "echo [!a]*", "echo [$-~]*", "echo [!]]*"])
def test_a_class_never_admits_a_metacharacter(pattern):
    rule = rules({"tool": "run_command", "when": {"command": pattern}, "decision": "allow"})
    for command in ("echo ;id", "echo $x", "echo |id", "echo (", "echo \\", "echo `id`"):
        assert decide(rule, "run_command", {"command": command}).decision == "ask"
    assert decide(rule, "run_command", {"command": "echo ~"}).decision == (
        "ask" if pattern == "echo [;]*" else "allow"
    )


def test_shell_safety_holds_for_non_string_values_too():
    rule = rules({"tool": "t", "when": {"argv": "*"}, "decision": "allow"})
    assert decide(rule, "t", {"argv": 12}).decision == "allow"
    # the JSON text of a list holds quotes: `*` admits none of them
    assert decide(rule, "t", {"argv": ["echo", "hi"]}).decision == "ask"
    listed = rules({"tool": "t", "when": {"argv": '[[]"echo","*"]'}, "decision": "allow"})
    assert decide(listed, "t", {"argv": ["echo", "hi"]}).decision == "allow"
    assert decide(listed, "t", {"argv": ["echo", "hi;", "rm"]}).decision == "ask"


@pytest.mark.parametrize("decision", ["deny", "ask"])
def test_deny_and_ask_patterns_match_metacharacters(decision):
    rule = rules({"tool": "run_command", "when": {"command": "rm *"}, "decision": decision})
    verdict = decide(rule, "run_command", {"command": "rm -rf . ; echo done > log"}, False)
    assert verdict.decision == decision and verdict.rule == 0


# ---------------------------------------------------------------- remember


def test_remember_an_approval_is_an_allow_rule_for_that_tool():
    answer = ToolApprovalResponse(call_id="c", approved=True, reason="fine", remember=True)
    assert remembered_rule("run_command", answer) == PolicyRule(
        tool="run_command", decision="allow", reason="fine"
    )


def test_remember_a_rejection_is_a_deny_rule_with_the_answers_reason():
    answer = ToolApprovalResponse(call_id="c", approved=False, reason="never", remember=True)
    rule = remembered_rule("delete_path", answer)
    assert rule.model_dump(exclude_none=True) == {
        "tool": "delete_path",
        "decision": "deny",
        "reason": "never",
    }
    assert decide([rule], "delete_path", "{}") == Verdict("deny", 0, "never")
    no_reason = remembered_rule("delete_path", answer.model_copy(update={"reason": None}))
    assert decide([no_reason], "delete_path", "{}") == Verdict("deny", 0, "Denied by policy")


def test_remembered_rule_matches_only_that_tool_even_with_glob_characters_in_its_name():
    assert literal_glob("run_command") == "run_command"
    answer = ToolApprovalResponse(call_id="c", approved=True)
    rule = remembered_rule("files*[x]?", answer)
    assert decide([rule], "files*[x]?", "{}").decision == "allow"
    for other in ("files", "filesAB[x]!", "filesx", "files*x?"):
        assert decide([rule], other, "{}").decision == "ask"


def test_remember_puts_the_rule_first_and_drops_rules_it_shadows():
    run = rules(
        {"tool": "run_command", "when": {"command": "rm *"}, "decision": "deny"},
        {"tool": "delete_path", "decision": "ask"},
        {"tool": "run_command", "decision": "ask"},
        {"tool": "run_*", "decision": "deny"},
    )
    new = PolicyRule(tool="run_command", decision="allow")
    assert remember(run, new) == [new, run[1], run[3]]
    twice = remember(remember(run, new), new)
    assert twice == [new, run[1], run[3]]


# ---------------------------------------------------------------- edit on approval


def test_edited_arguments_as_object_or_json_string():
    as_object = parse_approval({"call_id": "c", "approved": True, "arguments": {"command": "ls"}})
    as_text = parse_approval({"call_id": "c", "approved": True, "arguments": '{"command": "ls"}'})
    assert as_object.value is not None and as_text.value is not None
    assert as_object.value.arguments == as_text.value.arguments == {"command": "ls"}


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ({"approved": False, "arguments": {"a": 1}}, "only taken with approved: true"),
        ({"approved": False, "arguments": "{}"}, "only taken with approved: true"),
        ({"approved": True, "arguments": "{bad"}, "not valid JSON"),
        ({"approved": True, "arguments": ""}, "not valid JSON"),
        ({"approved": True, "arguments": '{"a": NaN}'}, "NaN is not JSON"),
        ({"approved": True, "arguments": "[1]"}, "must be a JSON object, got list"),
        ({"approved": True, "arguments": '"ls"'}, "must be a JSON object, got str"),
        ({"approved": True, "arguments": [1]}, "must be a JSON object, got list"),
        ({"approved": True, "arguments": 3}, "must be a JSON object, got int"),
        ({"approved": True, "remember": "yes"}, "remember"),
        ({"approved": True, "remember": 1}, "remember"),
    ],
)
def test_bad_edits_and_remember_values_are_bad_input(payload, needle):
    parsed = parse_approval({"call_id": "c", **payload})
    assert parsed.value is None
    assert parsed.error is not None and needle in parsed.error
    assert "\n" not in parsed.error


def test_edited_arguments_are_bounded_like_a_models():
    big = {"command": "x" * MAX_ARGUMENT_CHARS}
    parsed = parse_approval({"call_id": "c", "approved": True, "arguments": big})
    assert parsed.value is None
    assert parsed.error is not None and f"more than {MAX_ARGUMENT_CHARS}" in parsed.error


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        ({"n": float("nan")}, "NaN or Infinity"),
        ({"n": [float("inf")]}, "NaN or Infinity"),
        ({"n": nested(5000)}, "nested too deeply"),
    ],
)
def test_edited_arguments_must_be_json(arguments, needle):
    parsed = parse_approval({"call_id": "c", "approved": True, "arguments": arguments})
    assert parsed.value is None
    assert parsed.error is not None and needle in parsed.error


def test_seed_style_responses_validate_edits_too():
    payload = {
        "messages": [],
        "options": {
            "tool_approval_responses": [{"call_id": "c", "approved": False, "arguments": {}}]
        },
    }
    with pytest.raises(ApplicationError) as caught:
        AgentRunInput.model_validate(payload)
    assert "arguments" in caught.value.message


def test_an_answer_without_the_new_fields_is_sent_as_before():
    plain = ToolApprovalResponse(call_id="c", approved=True)
    assert json.loads(plain.model_dump_json()) == {
        "call_id": "c",
        "approved": True,
        "reason": None,
        "approver": None,
    }
    full = ToolApprovalResponse(call_id="c", approved=True, remember=True, arguments={"a": 1})
    assert json.loads(full.model_dump_json())["remember"] is True
    assert ToolApprovalResponse.model_validate_json(full.model_dump_json()) == full


@pytest.mark.parametrize(
    ("original", "shown"),
    [
        ('{"command": "rm -rf logs"}', '{"command": "ls logs"}'),
        ({"command": "rm"}, {"command": "ls logs"}),
    ],
)
def test_the_edited_call_keeps_id_tool_and_the_models_form(original, shown):
    call = ToolCall(id="call_1", name="run_command", arguments=original)
    edit = edited_call(call, {"command": "ls logs"})
    assert edit.call == ToolCall(id="call_1", name="run_command", arguments=shown)
    assert edit.original_arguments == original
    assert call.arguments == original  # the input is not changed


def test_with_call_changes_the_last_assistant_message_only():
    a = ToolCall(id="a", name="run_command", arguments='{"command": "rm x"}')
    b = ToolCall(id="b", name="list_dir", arguments="{}")
    old = ChatMessage.assistant("", [ToolCall(id="a", name="run_command", arguments="{}")])
    messages = [
        ChatMessage.user("hi"),
        old,
        ChatMessage.tool(old.tool_calls[0], "done") if old.tool_calls else old,
        ChatMessage.assistant("doing it", [a, b]),
    ]
    edit = edited_call(a, {"command": "ls"})
    changed = with_call(messages, edit.call)
    assert changed[3].tool_calls == [edit.call, b]
    assert changed[3].content == "doing it"
    assert changed[:3] == messages[:3]
    assert messages[3].tool_calls == [a, b]  # the input is not changed
    unknown = ToolCall(id="zz", name="x", arguments="{}")
    assert with_call(messages, unknown) == messages


def test_approval_events_of_old_histories_still_decode():
    old = {
        "seq": 3,
        "round": 0,
        "type": "approval",
        "call_id": "call_1",
        "approved": True,
        "reason": None,
        "approver": "ann",
        "at": "2026-11-30T01:27:34Z",
    }
    event = ApprovalEvent.model_validate(old)
    assert (event.source, event.rule, event.arguments, event.original_arguments) == (
        "person",
        None,
        None,
        None,
    )
    decided = ApprovalEvent.model_validate({**old, "source": "policy", "rule": 2})
    assert decided.source == "policy" and decided.rule == 2


# ---------------------------------------------------------------- the policy view


def test_policy_view_lists_the_effective_rules_with_their_origin():
    enforced = rules({"tool": "delete_path", "decision": "ask"})
    run = rules({"tool": "run_command", "when": {"command": "ls*"}, "decision": "allow"})
    defaults = rules({"tool": "*", "decision": "deny", "reason": "not by default"})
    view = policy_view(enforced, run, defaults)
    assert view.model_dump(exclude_none=True) == {
        "rules": [
            {"tool": "delete_path", "decision": "ask", "origin": "enforced"},
            {
                "tool": "run_command",
                "when": {"command": "ls*"},
                "decision": "allow",
                "origin": "run",
            },
            {"tool": "*", "decision": "deny", "reason": "not by default", "origin": "default"},
        ]
    }
    listed = effective_rules(enforced, run, defaults)
    assert [PolicyRule(**e.model_dump(exclude={"origin"})) for e in view.rules] == listed
    assert policy_view([], [], []).rules == []


# ---------------------------------------------------------------- AGENT_POLICY_FILE


def write(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "policy.json"
    path.write_text(content, encoding="utf-8")
    return path


def test_policy_file_loads_enforced_and_defaults(tmp_path):
    data = {
        "enforced": [{"tool": "delete_path", "decision": "ask"}],
        "defaults": [{"tool": "run_command", "when": {"command": "ls*"}, "decision": "allow"}],
    }
    path = write(tmp_path, json.dumps(data))
    policy = load_policy_file(path)
    assert policy == WorkerPolicy.model_validate(data)
    assert worker_policy_from_env({"AGENT_POLICY_FILE": str(path)}) == policy
    assert load_policy_file(write(tmp_path, '{"enforced": []}')) == WorkerPolicy()


def test_no_policy_file_means_no_worker_rules():
    assert worker_policy_from_env({}) == WorkerPolicy()
    assert worker_policy_from_env({"AGENT_POLICY_FILE": "  "}) == WorkerPolicy()


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "must be a JSON object"),
        ('{"enforce": []}', "enforce: Extra inputs are not permitted"),
        ('{"enforced": [{"tool": "x", "decision": "maybe"}]}', "enforced.0.decision"),
        ('{"defaults": [{"decision": "deny"}]}', "defaults.0.tool: Field required"),
        (json.dumps({"defaults": [{"tool": "x", "decision": "deny"}] * 201}), "at most 200"),
    ],
)
def test_invalid_policy_file_is_one_line_naming_the_file(tmp_path, content, needle):
    path = write(tmp_path, content)
    with pytest.raises(ValueError) as caught:
        load_policy_file(path)
    message = str(caught.value)
    assert message.startswith(f"AGENT_POLICY_FILE {path}: ")
    assert needle in message and "\n" not in message


def test_missing_unreadable_or_binary_policy_file(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(ValueError, match=r"^AGENT_POLICY_FILE .*nope\.json: no such file$"):
        worker_policy_from_env({"AGENT_POLICY_FILE": str(missing)})
    with pytest.raises(ValueError, match="a folder, not a file"):
        load_policy_file(tmp_path)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe{")
    with pytest.raises(ValueError, match="not UTF-8 text"):
        load_policy_file(binary)


def test_the_loaded_rules_are_served_as_loaded(tmp_path):
    policy = WorkerPolicy.model_validate({"enforced": [{"tool": "x", "decision": "deny"}]})
    assert PolicyActivities(policy).rules == policy


@pytest.mark.parametrize("requires_approval", [True, False])
def test_arguments_too_deep_to_read_are_asked_about(requires_approval):
    listed = rules(
        {"tool": "t", "when": {"a": "*x*"}, "decision": "deny"},
        {"tool": "t", "decision": "allow"},
    )
    deep_text = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
    for arguments in (deep_text, {"a": nested(5000)}):
        assert decide(listed, "t", arguments, requires_approval) == Verdict("ask", None, None)
    # with no rule that reads arguments they are never parsed: the usual decisions
    assert decide([], "t", deep_text, requires_approval).decision == (
        "ask" if requires_approval else "allow"
    )
    assert decide(listed[1:], "t", deep_text, requires_approval) == Verdict("allow", 0, None)
