"""Property tests of the approval policy (pure, no server): shell safety of `allow` patterns by
position, first match wins,
enforced rules cannot be loosened, remember decides its tool, and arguments decide the same as
a JSON string or as a value."""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from workflows.contract.rules import ApprovalPolicy, PolicyRule
from workflows.gate import globs
from workflows.gate.policy import (
    effective_rules,
    evaluate,
    parsed_arguments,
    pattern_matches,
    policy_view,
    rule_matches,
)
from workflows.gate.remember import remember, remembered_rule
from workflows.model import ToolApprovalResponse

METACHARACTERS = "\n\r\x00;&|`$><()\\'\""
"""Shell safety by position: `*`, `?` and classes of an allow pattern never match one of these
(written out here, not imported, so the test checks the module's list rather than trusting it)."""
TOOLS = ["run_command", "delete_path", "list_dir", "read_file", "git__git_status"]
TOOL_GLOBS = [*TOOLS, "*", "run_*", "?ead_file", "[dl]*", "git__*"]
ARGUMENTS = ["command", "path", "recursive"]
PLAIN = "abcxyz -./_*?$()"
"""Characters of generated text for the substring rule: glob characters and punctuation it let
through, with `$` and `(` apart (only `$(` together counted there)."""
SAFE = "abcxyz -./_~:=,@%+"
"""Characters that are never shell metacharacters."""

plain_text = st.text(alphabet=PLAIN, max_size=12)
text_with_metacharacters = st.text(
    alphabet=st.sampled_from([*PLAIN, "\n", "\r", ";", "&", "|", "`", ">", "<"]), max_size=12
)


def test_the_module_guards_every_metacharacter() -> None:
    assert set(globs.SHELL_METACHARACTERS) == set(METACHARACTERS)


# ---------------------------------------------------------------- shell safety by position


@dataclass(frozen=True)
class Token:
    """One piece of a glob: `literal` (one character), `star`, `any` (`?`) or `class` (`text`
    is the whole `[...]`)."""

    kind: str
    text: str

    def render(self) -> str:
        if self.kind == "literal":
            return f"[{self.text}]" if self.text in "*?[" else self.text
        return {"star": "*", "any": "?"}.get(self.kind, self.text)

    def admits(self, char: str) -> bool:
        """Whether this token matches `char` as one character, by position."""
        if self.kind == "literal":
            return char == self.text
        if char in METACHARACTERS:
            return False
        if self.kind == "class":
            return fnmatch.fnmatchcase(char, self.text)
        return True


ALPHABET = SAFE + METACHARACTERS + "[]!^*?"
literal = st.sampled_from(ALPHABET).map(lambda c: Token("literal", c))
glob_class = st.builds(
    lambda negate, body: Token("class", "[" + ("!" if negate else "") + body + "]"),
    st.booleans(),
    st.text(
        alphabet=st.sampled_from(SAFE + METACHARACTERS + "!^-["), min_size=1, max_size=4
    ).filter(
        lambda body: not body.startswith("!")  # `[!` opens a negated class
    ),
)
token = st.one_of(
    literal,
    literal,
    st.just(Token("star", "*")),
    st.just(Token("any", "?")),
    glob_class,
)
tokens = st.lists(token, max_size=8)


def render(pieces: list[Token]) -> str:
    return "".join(t.render() for t in pieces)


def reference_match(pieces: list[Token], value: str) -> bool:
    """Shell safety by position, written as the plainest glob matcher: a star is any run of
    characters none of which is a metacharacter."""

    @cache
    def at(i: int, j: int) -> bool:
        if i == len(pieces):
            return j == len(value)
        piece = pieces[i]
        if piece.kind == "star":
            if at(i + 1, j):
                return True
            return j < len(value) and value[j] not in METACHARACTERS and at(i, j + 1)
        return j < len(value) and piece.admits(value[j]) and at(i + 1, j + 1)

    return at(0, 0)


@st.composite
def pattern_and_instance(draw: st.DrawFn) -> tuple[list[Token], str]:
    """A glob and a value that fnmatch matches, each character of it drawn from anything
    fnmatch lets the piece match (metacharacters included)."""
    pieces = draw(tokens)
    out: list[str] = []
    for piece in pieces:
        if piece.kind == "literal":
            out.append(piece.text)
        elif piece.kind == "star":
            out.append(draw(st.text(alphabet=st.sampled_from(ALPHABET), max_size=4)))
        else:
            fits = [c for c in ALPHABET if fnmatch.fnmatchcase(c, piece.render())]
            out.append(draw(st.sampled_from(fits)) if fits else "")
    return pieces, "".join(out)


def metacharacters_of(text: str) -> list[str]:
    return [c for c in text if c in METACHARACTERS]


@given(pattern_and_instance())
@settings(max_examples=800, deadline=None)
def test_an_allow_pattern_admits_a_metacharacter_only_where_it_holds_it(
    case: tuple[list[Token], str],
) -> None:
    pieces, value = case
    pattern = render(pieces)
    allowed = pattern_matches(pattern, value, allow=True)
    literal_metas = [t.text for t in pieces if t.kind == "literal" and t.text in METACHARACTERS]
    if allowed:
        # each metacharacter of the value is one the pattern holds literally, one for one
        assert metacharacters_of(value) == literal_metas
        assert fnmatch.fnmatchcase(value, pattern)
    assert allowed is reference_match(pieces, value)
    # deny and ask patterns are plain fnmatch globs
    assert pattern_matches(pattern, value, allow=False) is fnmatch.fnmatchcase(value, pattern)


@given(tokens, st.text(alphabet=st.sampled_from(ALPHABET), max_size=10))
@settings(max_examples=800, deadline=None)
def test_allow_matching_is_the_plain_definition(pieces: list[Token], value: str) -> None:
    pattern = render(pieces)
    assert pattern_matches(pattern, value, allow=True) is reference_match(pieces, value)


@given(
    st.text(alphabet=st.sampled_from(ALPHABET), max_size=12),
    st.text(alphabet=st.sampled_from(SAFE + "[]!^*?"), max_size=12),
)
@settings(max_examples=800, deadline=None)
def test_without_metacharacters_an_allow_glob_is_fnmatch(pattern: str, value: str) -> None:
    """Any text as a pattern (unbalanced `[` included): on a value with no metacharacter, the
    narrowed glob decides as fnmatch does."""
    assert pattern_matches(pattern, value, allow=True) is fnmatch.fnmatchcase(value, pattern)


@given(
    st.text(alphabet=st.sampled_from(ALPHABET), max_size=12),
    st.text(alphabet=st.sampled_from(ALPHABET), max_size=12),
    st.sampled_from(METACHARACTERS),
)
@settings(max_examples=800, deadline=None)
def test_a_metacharacter_the_pattern_lacks_is_never_allowed(
    pattern: str, value: str, meta: str
) -> None:
    """However the rest looks, a value holding a metacharacter that the pattern does not hold
    anywhere is never allowed, by a string or a non-string value alike."""
    pattern = pattern.replace(meta, "")
    value = value[: len(value) // 2] + meta + value[len(value) // 2 :]
    assert not pattern_matches(pattern, value, allow=True)
    allow = PolicyRule(tool="run_command", when={"command": pattern}, decision="allow")
    for arguments in ({"command": value}, json.dumps({"command": value}), {"command": [value]}):
        verdict = evaluate([allow], "run_command", arguments, requires_approval=True)
        assert verdict.decision == "ask" and verdict.rule is None


def test_no_pattern_backtracks_for_long() -> None:
    """The narrowed translation keeps fnmatch's atomic groups: a pattern of many stars against
    a long value that almost matches is decided at once."""
    import time

    pattern = "*a" * 40 + "*b"
    value = "a" * 5000
    started = time.process_time()  # this process's CPU time: other load does not count
    assert not pattern_matches(pattern, value, allow=True)
    assert not pattern_matches(pattern, value + ";b", allow=True)
    assert time.process_time() - started < 5.0  # backtracking would take years


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


@given(
    rule_lists,
    st.sampled_from(TOOLS),
    any_arguments,
    st.booleans(),
    st.sampled_from([(), ("path",), ("path", "command")]),
)
def test_first_matching_rule_decides(
    rules: list[PolicyRule],
    tool: str,
    arguments: Any,
    requires: bool,
    paths: tuple[str, ...],
) -> None:
    verdict = evaluate(rules, tool, arguments, requires_approval=requires, path_parameters=paths)
    parsed = parsed_arguments(arguments)
    matching = [
        i for i, r in enumerate(rules) if rule_matches(r, tool, parsed, path_parameters=paths)
    ]
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
