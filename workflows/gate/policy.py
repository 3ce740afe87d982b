"""The approval policy's decisions, as pure functions the workflow calls.

Per tool call, the effective rules are the worker's enforced rules, then the run's (remembered
ones at their front), then the worker's defaults; the first rule that matches decides. No rule
matches: the tool's own default (ask when it needs approval, else allow).

How a `when` glob sees a call: a string argument as it is (a path parameter of the tool as
`workflows.gate.paths.normal_path` spells it: inside the workspace, relative to it), any other value
as its one text form (`workflows.contract.arguments.arguments_json`). A glob of an `allow` rule is
shell-safe by position (`workflows.gate.globs`); `deny` and `ask` globs are plain `fnmatch` globs
(matching more is never less safe there).

No Temporal here and nothing runs at import, so the workflow sandbox can re-import it freely.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from workflows.contract.arguments import arguments_json
from workflows.contract.rules import (
    DEFAULT_DENY_REASON,
    Decision,
    Origin,
    PolicyEntry,
    PolicyRule,
    PolicyView,
)
from workflows.gate.globs import shell_safe_glob
from workflows.gate.paths import normal_path

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
    """An argument's value as `when` globs see it: a string as it is, else the one text form
    of arguments (compact JSON, `é` as it is)."""
    if isinstance(value, str):
        return value
    return arguments_json(value)


def pattern_matches(pattern: str, value: str, *, allow: bool) -> bool:
    """A `when` glob against a value's text; for an `allow` rule, shell-safe by position."""
    if not allow:
        return fnmatch.fnmatchcase(value, pattern)
    return shell_safe_glob(pattern)(value) is not None


def parsed_arguments(arguments: Any) -> Any:
    """Arguments as the rules see them: a JSON string parsed (an empty one is `{}`), a value as
    it is. A string that is not JSON is returned as it is: it is not an object, so only rules
    without `when` can match it. Unlike `arguments.arguments_value` it lets `RecursionError`
    through: arguments too deep to read are asked about, never matched as text."""
    if not isinstance(arguments, str):
        return arguments
    if not arguments.strip():
        return {}
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def argument_text(
    name: str,
    value: Any,
    *,
    path_parameters: Collection[str] = (),
    path_root: str | None = None,
) -> str:
    """The text a `when` glob on argument `name` is matched against."""
    if name in path_parameters and isinstance(value, str):
        return normal_path(value, path_root)
    return value_text(value)


def rule_matches(
    rule: PolicyRule,
    tool: str,
    arguments: Any,
    *,
    path_parameters: Collection[str] = (),
    path_root: str | None = None,
) -> bool:
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
        text = argument_text(
            name, arguments[name], path_parameters=path_parameters, path_root=path_root
        )
        if not pattern_matches(pattern, text, allow=allow):
            return False
    return True


def evaluate(
    rules: Sequence[PolicyRule],
    tool: str,
    arguments: Any,
    *,
    requires_approval: bool,
    path_parameters: Collection[str] = (),
    path_root: str | None = None,
) -> Verdict:
    """Decide one call (`arguments` as the model gave them: a JSON string or a value) by the
    effective `rules`; `requires_approval` is the tool's own default (its spec, or the run's
    `approval_required`).

    `path_parameters`: the tool's spec's `path_parameters`, whose string values rules see
    normalised (`workflows.gate.paths.normal_path`).
    `path_root`: the workspace folder (the spec's `path_root`): an absolute path inside it is
    seen workspace-relative.

    The same decision as the first rule for which `rule_matches` holds, made faster (see
    `_Call`). Arguments nested too deeply to read are never decided by a rule: a person is
    asked."""
    call = _Call(tool, arguments, path_parameters, path_root)
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
    text is made once."""

    def __init__(
        self,
        tool: str,
        arguments: Any,
        path_parameters: Collection[str],
        path_root: str | None = None,
    ) -> None:
        self._tool = tool
        self._path_root = path_root
        self._arguments = arguments
        self._path_parameters = path_parameters
        self._parsed = False
        self._values: dict[str, Any] | None = None
        self._names: dict[str, bool] = {}
        self._texts: dict[str, str] = {}

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
            text = self._texts.get(name)
            if text is None:
                if name not in self._values:
                    return False
                text = self._texts[name] = argument_text(
                    name,
                    self._values[name],
                    path_parameters=self._path_parameters,
                    path_root=self._path_root,
                )
            matcher = shell_safe_glob(pattern) if allow else _glob(pattern)
            if matcher(text) is None:
                return False
        return True


@functools.lru_cache(maxsize=4096)
def _glob(pattern: str) -> Callable[[str], re.Match[str] | None]:
    return re.compile(fnmatch.translate(pattern)).match


# ---- globs ----


def literal_glob(name: str) -> str:
    """A glob that matches exactly `name` (tool names rarely hold `*`, `?` or `[`)."""
    return _GLOB_SPECIAL.sub(r"[\1]", name)
