"""Rules that cannot match are refused (`workflows.gate.rule_check`), and `starter run --deny` trims
the spaces that would make a dead rule. Pure: no server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from activities.tools import build_default_registry
from starter.policy_args import rule_from_spec
from workflows.contract.rules import PolicyRule, WorkerPolicy
from workflows.gate.rule_check import rule_problem, unmatchable_rule, worker_policy_problem
from workflows.model import ToolSpec

GIT_STATUS = ToolSpec(
    name="git__git_status",
    description="Shows the working tree status",
    parameters={
        "type": "object",
        "properties": {"repo_path": {"type": "string"}},
        "required": ["repo_path"],
    },
)
SCHEMALESS = ToolSpec(name="ping", description="no parameters", parameters={"type": "object"})


@pytest.fixture
def specs(tmp_path: Path) -> list[ToolSpec]:
    (tmp_path / "ws").mkdir()
    return [*build_default_registry(tmp_path / "ws").specs(), GIT_STATUS, SCHEMALESS]


def rule(**fields: Any) -> PolicyRule:
    return PolicyRule.model_validate({"decision": "deny", **fields})


@pytest.mark.parametrize(
    "fields",
    [
        {"tool": "run_command"},
        {"tool": "*"},
        {"tool": "*", "when": {}},
        {"tool": "run_*", "when": {"command": "rm *"}},
        {"tool": "read_file", "when": {"path": "*.env"}},
        {"tool": "*_[dfp]*", "when": {"path": "secrets/*"}},  # list_dir, read_file, delete_path
        {"tool": "git__*"},
        {"tool": "git__*", "when": {"repo_path": "/srv/*"}},
        {"tool": "ping"},
    ],
)
def test_rules_that_can_match_are_taken(specs, fields):
    assert rule_problem(rule(**fields), specs) is None


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        (
            {"tool": "mcp.fs.*"},
            "tool pattern 'mcp.fs.*' matches none of the worker's tools (list_dir, read_file,"
            " run_command, delete_path, git__git_status, ping) (an MCP server's tools are named"
            " SERVER__TOOL)",
        ),
        (
            {"tool": "Read_file"},
            "tool pattern 'Read_file' matches none of the worker's tools (list_dir, read_file,"
            " run_command, delete_path, git__git_status, ping); did you mean 'read_file'?",
        ),
        (
            {"tool": "read_file", "when": {" path": "*.env"}},
            "when key ' path' has spaces around it (the parameter is 'path')",
        ),
        (
            {"tool": "read_file", "when": {"path ": "*.env"}},
            "when key 'path ' has spaces around it (the parameter is 'path')",
        ),
        (
            {"tool": "read_file", "when": {"file": "*.env"}},
            "when key 'file' is not a parameter of read_file (its parameters: path)",
        ),
        (
            {"tool": "*", "when": {"path": "*.env"}},
            "when key 'path' is not a parameter of run_command (its parameters: command)",
        ),
        (
            {"tool": "ping", "when": {"host": "*"}},
            "when key 'host' is not a parameter of ping (its parameters: none)",
        ),
    ],
)
def test_rules_that_cannot_match_are_refused_saying_why(specs, fields, why):
    assert rule_problem(rule(**fields), specs) == why


def test_the_error_names_the_rule_by_index_and_origin(specs):
    rules = [rule(tool="run_command"), rule(tool="list_dir"), rule(tool="mcp.fs.*")]
    line = unmatchable_rule(rules, specs, origin="run")
    assert line is not None
    assert line.startswith("rule 2 (run): tool pattern 'mcp.fs.*' matches none")
    assert "\n" not in line
    assert unmatchable_rule(rules[:2], specs, origin="run") is None
    assert unmatchable_rule([], specs, origin="run") is None


def test_the_worker_policy_is_checked_enforced_then_defaults(specs):
    policy = WorkerPolicy.model_validate(
        {
            "enforced": [{"tool": "delete_path", "decision": "ask"}],
            "defaults": [
                {"tool": "read_file", "when": {"path": "*.env"}, "decision": "deny"},
                {"tool": "read_file", "when": {"pth": "*.env"}, "decision": "deny"},
            ],
        }
    )
    assert worker_policy_problem(policy, specs) == (
        "rule 1 (default): when key 'pth' is not a parameter of read_file (its parameters: path)"
    )
    enforced = WorkerPolicy.model_validate({"enforced": [{"tool": "x", "decision": "deny"}]})
    problem = worker_policy_problem(enforced, specs)
    assert problem is not None and problem.startswith("rule 0 (enforced): tool pattern 'x'")
    assert worker_policy_problem(WorkerPolicy(), specs) is None


def test_a_long_tool_list_is_cut_in_the_error():
    many = [ToolSpec(name=f"t{i}", description="", parameters={}) for i in range(40)]
    why = rule_problem(rule(tool="nope"), many)
    assert why is not None and why.endswith("t11 and 28 more)")


@pytest.mark.parametrize(
    ("spec", "tool", "when"),
    [
        ("read_file: path=*.env", "read_file", {"path": "*.env"}),
        (" read_file : path = *.env ", "read_file", {"path": "*.env"}),
        ("run_command:command=git status*", "run_command", {"command": "git status*"}),
        (" delete_path ", "delete_path", None),
    ],
)
def test_the_starter_trims_spaces_around_tool_argument_and_glob(spec, tool, when):
    made = rule_from_spec(spec, "deny")
    assert (made.tool, made.when) == (tool, when)
