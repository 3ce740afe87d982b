"""Every rule example of the docs is one that can match, and does what the docs say it does:
each JSON rule in docs/approval-policy.md and README.md, and each `--allow`/`--deny` of the
README, checked against the built-in tools. Pure: no server."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from activities.tools import build_default_registry
from starter.policy_args import rule_from_spec
from workflows.contract.rules import Decision, PolicyRule
from workflows.gate.policy import evaluate
from workflows.gate.rule_check import rule_problem
from workflows.model import ToolSpec

ROOT = Path(__file__).resolve().parents[2]
POLICY_DOC = ROOT / "docs" / "approval-policy.md"
README = ROOT / "README.md"


def json_rules(path: Path) -> list[dict[str, Any]]:
    """Every JSON object in the file that starts with a `"tool"` key."""
    text = path.read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    for match in re.finditer(r'\{"tool"', text):
        value, _ = decoder.raw_decode(text, match.start())
        found.append(value)
    return found


def cli_rules(path: Path) -> list[tuple[Decision, str]]:
    text = path.read_text(encoding="utf-8")
    out: list[tuple[Decision, str]] = []
    for decision, quoted, bare in re.findall(r"--(allow|deny) (?:'([^']*)'|([^\s'`]+))", text):
        out.append((decision, quoted or bare))
    return out


@pytest.fixture(scope="module")
def builtin_specs(tmp_path_factory: pytest.TempPathFactory) -> list[ToolSpec]:
    workspace = tmp_path_factory.mktemp("ws")
    return build_default_registry(workspace).specs()


def test_the_docs_hold_rule_examples() -> None:
    assert len(json_rules(POLICY_DOC)) >= 10
    assert len(cli_rules(README)) >= 2


@pytest.mark.parametrize("path", [POLICY_DOC, README], ids=lambda p: p.name)
def test_every_json_rule_example_can_match_a_built_in_tool(path, builtin_specs):
    for example in json_rules(path):
        fields = {k: v for k, v in example.items() if k != "origin"}  # the `policy` view's
        rule = PolicyRule.model_validate(fields)
        assert rule_problem(rule, builtin_specs) is None, example


def test_every_starter_rule_example_can_match_a_built_in_tool(builtin_specs):
    for decision, spec in cli_rules(README):
        rule = rule_from_spec(spec, decision)
        assert rule_problem(rule, builtin_specs) is None, spec


def decide(rule: dict[str, Any], tool: str, arguments: dict[str, Any]) -> str:
    verdict = evaluate(
        [PolicyRule.model_validate(rule)],
        tool,
        arguments,
        requires_approval=True,
        path_parameters=("path",) if tool != "run_command" else (),
    )
    return verdict.decision if verdict.rule is not None else "no rule"


def test_what_the_shell_safety_section_says():
    echo = {"tool": "run_command", "when": {"command": "echo *"}, "decision": "allow"}
    assert decide(echo, "run_command", {"command": "echo hi"}) == "allow"
    for command in [
        "echo hi; rm -rf .",
        "echo x > f",
        "echo $(rm -rf .)",
        "echo $HOME",
        "echo 'a b'",
        "echo hi\nrm -rf .",
    ]:
        assert decide(echo, "run_command", {"command": command}) == "no rule", command
    pipe = {"tool": "run_command", "when": {"command": "git log * | head*"}, "decision": "allow"}
    assert decide(pipe, "run_command", {"command": "git log --oneline | head -5"}) == "allow"
    for command in [
        "git log --oneline | head -1 | rm -rf important.txt",
        "git log --oneline | head; rm -rf .",
    ]:
        assert decide(pipe, "run_command", {"command": command}) == "no rule", command
    quoted = {"tool": "run_command", "when": {"command": "echo '*'"}, "decision": "allow"}
    assert decide(quoted, "run_command", {"command": "echo 'a b'"}) == "allow"
    assert decide(quoted, "run_command", {"command": "echo 'a' 'b'"}) == "no rule"


def test_what_the_paths_section_says():
    secrets = {"tool": "read_file", "when": {"path": "*.env"}, "decision": "deny"}
    for path in [".env", "./.env", ".env/", ".env//", "logs/../.env"]:
        assert decide(secrets, "read_file", {"path": path}) == "deny", path
    logs = {"tool": "delete_path", "when": {"path": "logs/*"}, "decision": "allow"}
    assert decide(logs, "delete_path", {"path": "logs/old"}) == "allow"
    assert decide(logs, "delete_path", {"path": "logs/../notes.txt"}) == "no rule"
    listing = {"tool": "list_dir", "when": {"path": "."}, "decision": "deny"}
    assert decide(listing, "list_dir", {}) == "no rule"  # every listed argument must be present


def test_what_the_value_text_paragraph_says():
    tags = {"tool": "t", "when": {"tags": "*é*"}, "decision": "deny"}
    assert decide(tags, "t", {"tags": "été"}) == "deny"
    assert decide(tags, "t", {"tags": ["été"]}) == "deny"
    assert (
        decide(
            {"tool": "t", "when": {"recursive": "true"}, "decision": "deny"},
            "t",
            {"recursive": True},
        )
        == "deny"
    )
    assert (
        decide({"tool": "t", "when": {"count": "1?"}, "decision": "deny"}, "t", {"count": 12})
        == "deny"
    )
    argv = {"tool": "t", "when": {"argv": '[[]"echo",*]'}, "decision": "allow"}
    assert decide(argv, "t", {"argv": ["echo", "hi"]}) == "no rule"  # `*` admits no quote
    argv_one = {"tool": "t", "when": {"argv": '[[]"echo","*"]'}, "decision": "allow"}
    assert decide(argv_one, "t", {"argv": ["echo", "hi"]}) == "allow"


def test_the_tool_globs_of_the_rule_table_can_match(builtin_specs):
    """The `tool` row's examples: each matches a built-in tool, or is an MCP server's
    `SERVER__TOOL` name (the docs' `mcp.fs.*` matched nothing)."""
    row = next(
        line
        for line in POLICY_DOC.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `tool` |")
    )
    examples = row.split("|")[3].split("case-sensitive)", 1)[1].split(";", 1)[0]
    globs = re.findall(r"`([^`]+)`", examples)
    assert len(globs) >= 3, row
    names = [spec.name for spec in builtin_specs]
    for glob in globs:
        rule = PolicyRule(tool=glob, decision="deny")
        assert "__" in glob or rule_problem(rule, builtin_specs) is None, (glob, names)
