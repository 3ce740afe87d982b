"""Property tests of the approval policy (pure, no server): shell safety of `allow` patterns,
first match wins, enforced rules cannot be loosened, remember decides its tool, and arguments
decide the same as a JSON string or as a value."""

from __future__ import annotations

import fnmatch
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from workflows import policy as policy_module
from workflows.approvals import remember, remembered_rule
from workflows.model import ToolApprovalResponse
from workflows.policy import (
    effective_rules,
    evaluate,
    parsed_arguments,
    pattern_matches,
    policy_view,
    rule_matches,
    shell_safe,
)
from workflows.rules import ApprovalPolicy, PolicyRule

SHELL_METACHARACTERS = ("\n", "\r", ";", "&", "|", "`", "$(", ">", "<")
"""What a shell chains, substitutes or redirects with (written out here, not imported, so the
test checks the module's list rather than trusting it)."""
TOOLS = ["run_command", "delete_path", "list_dir", "read_file", "mcp.fs.write"]
TOOL_GLOBS = [*TOOLS, "*", "run_*", "?ead_file", "[dl]*", "mcp.*"]
ARGUMENTS = ["command", "path", "recursive"]
PLAIN = "abcxyz -./_*?$()"
"""Characters of generated text: glob characters and shell-harmless punctuation, with `$` and
`(` apart (only `$(` together substitutes a command)."""

plain_text = st.text(alphabet=PLAIN, max_size=12)
metacharacter = st.sampled_from(SHELL_METACHARACTERS)
text_with_metacharacters = st.text(
    alphabet=st.sampled_from([*PLAIN, "\n", "\r", ";", "&", "|", "`", ">", "<"]), max_size=12
)


@st.composite
def pattern_and_unlisted_value(draw: st.DrawFn) -> tuple[str, str, str]:
    """A glob without metacharacter `m`, and a value holding `m` that the glob would match as
    plain text: only shell safety keeps the allow rule from matching."""
    m = draw(metacharacter)
    prefix = draw(plain_text)
    suffix = draw(plain_text)
    middle = draw(text_with_metacharacters)
    cut = draw(st.integers(0, len(middle)))
    value = prefix + middle[:cut] + m + middle[cut:] + suffix
    pattern = draw(
        st.sampled_from(
            [
                glob_escape(prefix) + "*" + glob_escape(suffix),
                "*",
                glob_escape(prefix) + "*",
                draw(text_with_metacharacters) + "*",
            ]
        )
    )
    pattern = "".join(c for c in pattern if c != m) if len(m) == 1 else pattern.replace(m, "")
    return pattern, value, m


def glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


@given(pattern_and_unlisted_value())
@settings(max_examples=600)
def test_an_unlisted_metacharacter_is_never_allowed(case: tuple[str, str, str]) -> None:
    pattern, value, m = case
    assert m in value and m not in pattern
    assert not pattern_matches(pattern, value, allow=True)
    allow = PolicyRule(tool="run_command", when={"command": pattern}, decision="allow")
    for arguments in ({"command": value}, json.dumps({"command": value})):
        verdict = evaluate([allow], "run_command", arguments, requires_approval=True)
        assert verdict.decision == "ask" and verdict.rule is None
    # the same pattern in a deny rule is plain fnmatch: shell safety restricts only allows
    deny = allow.model_copy(update={"decision": "deny"})
    matched = evaluate([deny], "run_command", {"command": value}, requires_approval=True).rule == 0
    assert matched is fnmatch.fnmatchcase(value, pattern)


@given(st.text(alphabet=PLAIN + ";&|`<>\n\r", max_size=16), st.text(max_size=16))
@settings(max_examples=600)
def test_any_pattern_and_value(pattern: str, value: str) -> None:
    """Over arbitrary text: an allow pattern matches exactly when fnmatch matches and every
    metacharacter of the value is in the pattern."""
    expected = fnmatch.fnmatchcase(value, pattern) and all(
        m not in value or m in pattern for m in SHELL_METACHARACTERS
    )
    assert pattern_matches(pattern, value, allow=True) is expected
    assert pattern_matches(pattern, value, allow=False) is fnmatch.fnmatchcase(value, pattern)
    assert shell_safe(pattern, value) is all(
        m not in value or m in pattern for m in SHELL_METACHARACTERS
    )


def test_the_module_guards_every_metacharacter() -> None:
    assert set(policy_module.SHELL_METACHARACTERS) == set(SHELL_METACHARACTERS)


# ---------------------------------------------------------------- rules and calls

json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 20) | plain_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(plain_text, inner, max_size=3),
    max_leaves=5,
)

rule = st.builds(
    PolicyRule,
    tool=st.sampled_from(TOOL_GLOBS),
    when=st.none() | st.dictionaries(st.sampled_from(ARGUMENTS), plain_text, max_size=2),
    decision=st.sampled_from(["allow", "deny", "ask"]),
    reason=st.none() | plain_text,
)
rule_lists = st.lists(rule, max_size=8)
call_arguments = st.dictionaries(
    st.sampled_from(ARGUMENTS), plain_text | text_with_metacharacters | json_value, max_size=3
)
any_arguments = call_arguments | json_value | call_arguments.map(json.dumps) | plain_text


@given(rule_lists, st.sampled_from(TOOLS), any_arguments, st.booleans())
def test_first_matching_rule_decides(
    rules: list[PolicyRule], tool: str, arguments: Any, requires: bool
) -> None:
    verdict = evaluate(rules, tool, arguments, requires_approval=requires)
    parsed = parsed_arguments(arguments)
    matching = [i for i, r in enumerate(rules) if rule_matches(r, tool, parsed)]
    if not matching:
        assert verdict.rule is None
        assert verdict.decision == ("ask" if requires else "allow")
        return
    assert verdict.rule == matching[0]
    assert verdict.decision == rules[matching[0]].decision
    if verdict.decision == "deny":
        assert verdict.reason == (rules[matching[0]].reason or "Denied by policy")


@given(rule_lists, rule_lists, rule_lists, st.sampled_from(TOOLS), call_arguments)
def test_a_run_cannot_loosen_an_enforced_rule(
    enforced: list[PolicyRule],
    run: list[PolicyRule],
    defaults: list[PolicyRule],
    tool: str,
    arguments: dict[str, Any],
) -> None:
    alone = evaluate(enforced, tool, arguments, requires_approval=True)
    full = evaluate(
        effective_rules(enforced, run, defaults), tool, arguments, requires_approval=True
    )
    if alone.rule is not None:
        assert full == alone
    else:
        assert full.rule is None or full.rule >= len(enforced)


@given(rule_lists, st.sampled_from(TOOLS), call_arguments, st.booleans())
def test_arguments_decide_the_same_as_text_or_value(
    rules: list[PolicyRule], tool: str, arguments: dict[str, Any], requires: bool
) -> None:
    as_value = evaluate(rules, tool, arguments, requires_approval=requires)
    for text in (json.dumps(arguments), json.dumps(arguments, indent=2, ensure_ascii=False)):
        assert evaluate(rules, tool, text, requires_approval=requires) == as_value


@given(
    rule_lists,
    rule_lists,
    st.sampled_from(TOOLS),
    call_arguments,
    st.booleans(),
    st.none() | plain_text,
)
def test_a_remembered_answer_decides_its_tool_from_then_on(
    enforced: list[PolicyRule],
    run: list[PolicyRule],
    tool: str,
    arguments: dict[str, Any],
    approved: bool,
    reason: str | None,
) -> None:
    answer = ToolApprovalResponse(call_id="c", approved=approved, reason=reason, remember=True)
    new_run = remember(run, remembered_rule(tool, answer))
    listed = effective_rules(enforced, new_run, [])
    verdict = evaluate(listed, tool, arguments, requires_approval=True)
    before = evaluate(enforced, tool, arguments, requires_approval=True)
    if before.rule is not None:
        assert verdict == before  # an enforced rule still comes first
    else:
        assert verdict.rule == len(enforced)
        assert verdict.decision == ("allow" if approved else "deny")
    # other tools decide as they did
    for other in TOOLS:
        if other != tool:
            old = evaluate(
                effective_rules(enforced, run, []), other, arguments, requires_approval=True
            )
            new = evaluate(listed, other, arguments, requires_approval=True)
            assert (new.decision, new.reason) == (old.decision, old.reason)


@given(rule_lists, rule_lists, rule_lists)
def test_the_view_is_the_effective_list_and_round_trips(
    enforced: list[PolicyRule], run: list[PolicyRule], defaults: list[PolicyRule]
) -> None:
    view = policy_view(enforced, run, defaults)
    listed = effective_rules(enforced, run, defaults)
    assert [PolicyRule(**e.model_dump(exclude={"origin"})) for e in view.rules] == listed
    origins = [e.origin for e in view.rules]
    assert origins == ["enforced"] * len(enforced) + ["run"] * len(run) + ["default"] * len(
        defaults
    )
    policy = ApprovalPolicy(rules=run)
    assert ApprovalPolicy.model_validate_json(policy.model_dump_json()) == policy
