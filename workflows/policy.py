"""The approval policy's decisions, as pure functions the workflow calls.

Per tool call, the effective rules are the worker's enforced rules, then the run's (remembered
ones at their front), then the worker's defaults; the first rule that matches decides. No rule
matches: the tool's own default (ask when it needs approval, else allow).

No Temporal here and nothing runs at import, so the workflow sandbox can re-import it freely.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from workflows.rules import (
    DEFAULT_DENY_REASON,
    Decision,
    Origin,
    PolicyEntry,
    PolicyRule,
    PolicyView,
)

SHELL_METACHARACTERS = ("\n", "\r", ";", "&", "|", "`", "$(", ">", "<")
"""What chains, substitutes or redirects a shell command. A pattern of an `allow` rule never
matches a value holding one of these unless the pattern holds it literally: `echo *` allows
`echo hi`, not `echo hi; rm -rf .`."""

_GLOB_SPECIAL = re.compile(r"([*?\[])")


@dataclass(frozen=True)
class Verdict:
    """What the policy says about one call."""

    decision: Decision
    rule: int | None
    """The deciding rule's index in the effective list; None: the tool's own default."""
    reason: str | None = None
    """The rule's reason (a `deny` without one, or with an empty one: `Denied by policy`)."""


def effective_rules(
    enforced: Sequence[PolicyRule], run: Sequence[PolicyRule], defaults: Sequence[PolicyRule]
) -> list[PolicyRule]:
    """The rules in evaluation order, the list whose indices verdicts name."""
    return [*enforced, *run, *defaults]


def policy_view(
    enforced: Sequence[PolicyRule], run: Sequence[PolicyRule], defaults: Sequence[PolicyRule]
) -> PolicyView:
    """The `policy` query's answer: `effective_rules`, each rule with its origin."""
    parts: list[tuple[Origin, Sequence[PolicyRule]]] = [
        ("enforced", enforced),
        ("run", run),
        ("default", defaults),
    ]
    return PolicyView(
        rules=[
            PolicyEntry(**rule.model_dump(), origin=origin)
            for origin, rules in parts
            for rule in rules
        ]
    )


def value_text(value: Any) -> str:
    """An argument's value as `when` globs see it: a string as it is, else compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def shell_safe(pattern: str, value: str) -> bool:
    """False when `value` holds a shell metacharacter that `pattern` does not hold literally."""
    return not any(m in value and m not in pattern for m in SHELL_METACHARACTERS)


def pattern_matches(pattern: str, value: str, *, allow: bool) -> bool:
    """A `when` glob against a value's text; for an `allow` rule, only a shell-safe value."""
    if allow and not shell_safe(pattern, value):
        return False
    return fnmatch.fnmatchcase(value, pattern)


def parsed_arguments(arguments: Any) -> Any:
    """Arguments as the rules see them: a JSON string parsed (an empty one is `{}`), a value as
    it is. A string that is not JSON is returned as it is: it is not an object, so only rules
    without `when` can match it."""
    if not isinstance(arguments, str):
        return arguments
    if not arguments.strip():
        return {}
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def rule_matches(rule: PolicyRule, tool: str, arguments: Any) -> bool:
    """Whether `rule` matches a call of `tool` with (already parsed) `arguments`: the rule of
    matching, written plainly (`evaluate` applies it faster)."""
    if not fnmatch.fnmatchcase(tool, rule.tool):
        return False
    if rule.when is None:
        return True
    if not isinstance(arguments, dict):
        return False
    allow = rule.decision == "allow"
    for name, pattern in rule.when.items():
        if name not in arguments:
            return False
        if not pattern_matches(pattern, value_text(arguments[name]), allow=allow):
            return False
    return True


def evaluate(
    rules: Sequence[PolicyRule], tool: str, arguments: Any, *, requires_approval: bool
) -> Verdict:
    """Decide one call (`arguments` as the model gave them: a JSON string or a value) by the
    effective `rules`; `requires_approval` is the tool's own default (its spec, or the run's
    `approval_required`).

    The same decision as the first rule for which `rule_matches` holds, made faster (see
    `_Call`). Arguments nested too deeply to read are never decided by a rule: a person is
    asked."""
    call = _Call(tool, arguments)
    try:
        for index, rule in enumerate(rules):
            if not call.named(rule.tool):
                continue
            if rule.when is not None and not call.holds(rule.when, allow=rule.decision == "allow"):
                continue
            reason = rule.reason
            if rule.decision == "deny" and not reason:
                reason = DEFAULT_DENY_REASON
            return Verdict(rule.decision, index, reason)
    except RecursionError:
        return Verdict("ask", None)
    return Verdict("ask" if requires_approval else "allow", None)


class _Call:
    """One call as the rules see it. Each part is worked out once, and only when a rule needs
    it: a tool glob is tried once per call, the arguments are parsed once, and each argument's
    text (with the metacharacters it holds) is made once."""

    def __init__(self, tool: str, arguments: Any) -> None:
        self._tool = tool
        self._arguments = arguments
        self._parsed = False
        self._values: dict[str, Any] | None = None
        self._names: dict[str, bool] = {}
        self._texts: dict[str, tuple[str, frozenset[str]]] = {}

    def named(self, pattern: str) -> bool:
        hit = self._names.get(pattern)
        if hit is None:
            hit = self._names[pattern] = _glob(pattern)(self._tool) is not None
        return hit

    def holds(self, when: dict[str, str], *, allow: bool) -> bool:
        if not self._parsed:
            parsed = parsed_arguments(self._arguments)
            self._values = parsed if isinstance(parsed, dict) else None
            self._parsed = True
        if self._values is None:
            return False
        for name, pattern in when.items():
            seen = self._texts.get(name)
            if seen is None:
                if name not in self._values:
                    return False
                text = value_text(self._values[name])
                present = frozenset(m for m in SHELL_METACHARACTERS if m in text)
                seen = self._texts[name] = (text, present)
            text, present = seen
            if allow and present and not present <= _listed(pattern):
                return False
            if _glob(pattern)(text) is None:
                return False
        return True


@functools.lru_cache(maxsize=4096)
def _glob(pattern: str) -> Callable[[str], re.Match[str] | None]:
    return re.compile(fnmatch.translate(pattern)).match


@functools.lru_cache(maxsize=4096)
def _listed(pattern: str) -> frozenset[str]:
    """The metacharacters a pattern holds literally."""
    return frozenset(m for m in SHELL_METACHARACTERS if m in pattern)


# ---- globs ----


def literal_glob(name: str) -> str:
    """A glob that matches exactly `name` (tool names rarely hold `*`, `?` or `[`)."""
    return _GLOB_SPECIAL.sub(r"[\1]", name)
