"""Approval rules as people give them on the command line: `--allow TOOL[:ARG=GLOB]`,
`--deny TOOL[:ARG=GLOB]` (in the order given) and `--policy FILE` (`{"rules": [...]}`)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from starter.errors import CliError
from workflows.contract.rules import ApprovalPolicy, Decision, PolicyRule
from workflows.intake import parse_approval_policy


def rule_from_spec(spec: str, decision: Decision) -> PolicyRule:
    """`run_command` → every call of the tool; `run_command:command=git status*` → calls whose
    `command` matches the glob. Spaces around the tool, the argument and the glob are trimmed
    (`read_file: path=*.env` is about `path`, not ` path`)."""
    tool, sep, condition = spec.partition(":")
    tool = tool.strip()
    when: dict[str, str] | None = None
    if sep:
        name, equals, pattern = condition.partition("=")
        name, pattern = name.strip(), pattern.strip()
        if not equals or not name:
            raise CliError(f"--{decision} {spec!r}: expected TOOL or TOOL:ARG=GLOB")
        when = {name: pattern}
    try:
        return PolicyRule(tool=tool, when=when, decision=decision)
    except ValidationError as err:
        raise CliError(f"--{decision} {spec!r}: {err.errors()[0]['msg']}") from None


def load_policy(path: str) -> ApprovalPolicy:
    """A JSON file `{"rules": [...]}`; a clear one-line error otherwise."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise CliError(f"cannot read the policy file {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise CliError(f"the policy file {path} is not JSON: {err}") from None
    parsed = parse_approval_policy(value)
    if parsed.value is None:
        raise CliError(f"the policy file {path}: {parsed.error}")
    return parsed.value


def run_policy(
    specs: list[tuple[Decision, str]] | None, policy_file: str | None
) -> ApprovalPolicy | None:
    """The run's rules: `--allow`/`--deny` in the order given, then the file's. None when no
    rule was given."""
    rules = [rule_from_spec(spec, decision) for decision, spec in specs or []]
    if policy_file is not None:
        rules.extend(load_policy(policy_file).rules)
    if not specs and policy_file is None:
        return None
    try:
        return ApprovalPolicy(rules=rules)
    except ValidationError as err:
        raise CliError(f"invalid rules: {err.errors()[0]['msg']}") from None
