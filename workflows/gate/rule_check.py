"""Rules that cannot match are refused: a rule is checked against the worker's tools.

A rule that can never match is worse than no rule: `deny read_file when " path"=*.env` reads as
a protection and protects nothing. So a list of rules is refused when one of them has a `tool`
pattern that matches none of the worker's tools (the docs' `mcp.fs.*` where MCP tools are named
`SERVER__TOOL`), a `when` key with spaces around it, or a `when` key that is not a parameter of
every tool the pattern matches (a tool's parameters are the `properties` of its JSON schema).

The worker checks its `AGENT_POLICY_FILE` with it once all its tools are known (the MCP
servers' included); a run's rules are checked when the run starts and when
`set_approval_policy` replaces them. Pure; no Temporal import.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable, Sequence

from workflows.contract.rules import PolicyRule, WorkerPolicy
from workflows.model import ToolSpec

SHOWN_NAMES = 12
"""An error lists at most this many tool or parameter names."""


def declared_parameters(spec: ToolSpec) -> list[str]:
    """The parameters a tool declares: the keys of its schema's `properties`."""
    properties = spec.parameters.get("properties")
    return list(properties) if isinstance(properties, dict) else []


def _listed(names: Iterable[str]) -> str:
    items = list(names)
    if not items:
        return "none"
    shown = ", ".join(items[:SHOWN_NAMES])
    more = len(items) - SHOWN_NAMES
    return shown + (f" and {more} more" if more > 0 else "")


def _did_you_mean(pattern: str, names: list[str]) -> str:
    """`; did you mean 'NAME'?` for the tool name closest to a mistyped one, else nothing."""
    close = difflib.get_close_matches(pattern, names, n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def rule_problem(rule: PolicyRule, specs: Sequence[ToolSpec]) -> str | None:
    """Why `rule` can never match a call of these tools, or None when it can."""
    for key in rule.when or {}:
        if key != key.strip():
            return f"when key {key!r} has spaces around it (the parameter is {key.strip()!r})"
    matched = [s for s in specs if fnmatch.fnmatchcase(s.name, rule.tool)]
    if not matched:
        hint = " (an MCP server's tools are named SERVER__TOOL)" if "." in rule.tool else ""
        hint = hint or _did_you_mean(rule.tool, [s.name for s in specs])
        return (
            f"tool pattern {rule.tool!r} matches none of the worker's tools"
            f" ({_listed(s.name for s in specs)}){hint}"
        )
    for key in rule.when or {}:
        for spec in matched:
            declared = declared_parameters(spec)
            if key not in declared:
                return (
                    f"when key {key!r} is not a parameter of {spec.name}"
                    f" (its parameters: {_listed(declared)})"
                )
    return None


def unmatchable_rule(
    rules: Sequence[PolicyRule], specs: Sequence[ToolSpec], *, origin: str
) -> str | None:
    """One line naming the first rule of `rules` that can never match a call of the tools in
    `specs`, with its index in `rules`, its `origin` (`enforced`, `default`, `run`) and why:
    `rule 2 (run): tool pattern 'mcp.fs.*' matches none of the worker's tools (…)`. None when
    every rule can match."""
    for index, rule in enumerate(rules):
        problem = rule_problem(rule, specs)
        if problem is not None:
            return f"rule {index} ({origin}): {problem}"
    return None


def worker_policy_problem(policy: WorkerPolicy, specs: Sequence[ToolSpec]) -> str | None:
    """`unmatchable_rule` over the worker's enforced rules, then its default ones."""
    return unmatchable_rule(policy.enforced, specs, origin="enforced") or unmatchable_rule(
        policy.defaults, specs, origin="default"
    )
