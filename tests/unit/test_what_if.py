"""What-if's pure parts: a policy file that does not parse is refused naming the line (a JSON
syntax error's, or where the rule or key that does not validate starts), and a run's recorded
calls are decided again by the gate the workflow runs (`RunPolicy`), beside what the audit says
was decided then."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from starter.what_if import (
    PolicyFileError,
    ProposedPolicy,
    decide_again,
    parse_policy,
    summary_line,
)
from workflows.contract.rules import PolicyRule, WorkerPolicy
from workflows.gate.run_policy import RunPolicy
from workflows.model import (
    AgentRunOptions,
    AgentState,
    AuditEntry,
    ChatMessage,
    ToolCall,
    ToolSpec,
)

POLICY = """{
  "enforced": [
    {"tool": "delete_path", "decision": "ask"},
    {"tool": "run_command",
     "decision": "maybe"}
  ],
  "rules": []
}
"""


def refusal(text: str) -> str:
    with pytest.raises(PolicyFileError) as raised:
        parse_policy(text, "p.json")
    return str(raised.value)


def test_a_rule_that_does_not_validate_is_named_by_the_line_it_starts_on() -> None:
    assert refusal(POLICY) == (
        "p.json: line 4: enforced.1.decision: Input should be 'allow', 'deny' or 'ask'"
        ' (got "maybe")'
    )
    unknown_field = POLICY.replace('"decision": "maybe"', '"desicion": "allow"')
    assert refusal(unknown_field).startswith("p.json: line 4: enforced.1.")
    nested = '{"rules": [\n\n  {"tool": "read_file", "when": {"path": 3}, "decision": "deny"}]}'
    assert refusal(nested).startswith("p.json: line 3: rules.0.when.path:")


def test_a_key_that_is_no_part_of_a_policy_is_named_by_its_line() -> None:
    text = '{\n  "rules": [],\n  "enforce": []\n}'
    assert refusal(text) == "p.json: line 3: enforce: Extra inputs are not permitted"
    assert refusal('\n\n["not", "an object"]').startswith("p.json: line 3: a policy is a JSON")
    assert refusal('{"rules": {"tool": "x"}}').startswith("p.json: line 1: rules: Input should")


def test_a_json_syntax_error_is_named_by_its_line_and_column() -> None:
    text = '{\n  "rules": [\n    {"tool": "x", "decision": "allow"}\n    {"tool": "y"}\n  ]\n}'
    assert refusal(text) == "p.json: line 4, column 5: Expecting ',' delimiter"


def test_a_policy_that_parses_keeps_what_it_leaves_out_as_none() -> None:
    proposed = parse_policy('{"enforced": [{"tool": "delete_path", "decision": "ask"}]}', "p")
    assert proposed.rules is None and proposed.defaults is None
    assert proposed.enforced == [PolicyRule(tool="delete_path", decision="ask")]


SPECS = [
    ToolSpec(
        name="list_dir",
        description="",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
        path_parameters=["path"],
        path_root="/ws",
    ),
    ToolSpec(
        name="delete_path",
        description="",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
        requires_approval=True,
        path_parameters=["path"],
        path_root="/ws",
    ),
]
AT = datetime(2026, 12, 1, tzinfo=UTC)


def call(call_id: str, tool: str, path: str) -> ToolCall:
    return ToolCall(id=call_id, name=tool, arguments=f'{{"path": "{path}"}}')


def ran(state_calls: list[ToolCall]) -> list[ChatMessage]:
    out = [ChatMessage.user("clean up")]
    for c in state_calls:
        out += [ChatMessage.assistant("", [c]), ChatMessage.tool(c, "ok")]
    return out


def entry(call_id: str, tool: str, approved: bool, source: str, **kw: object) -> AuditEntry:
    return AuditEntry.model_validate(
        {"call_id": call_id, "tool": tool, "approved": approved, "source": source, "at": AT, **kw}
    )


def recorded_state() -> AgentState:
    calls = [
        call("call_1", "list_dir", "."),
        call("call_2", "delete_path", "logs"),
        call("call_3", "delete_path", "./tmp/"),
        call("call_4", "nope", "x"),
        call("call_5", "list_dir", "logs"),
    ]
    return AgentState(
        messages=ran(calls),
        options=AgentRunOptions(),
        tool_specs=SPECS,
        worker_policy=WorkerPolicy(),
        run_rules=[PolicyRule(tool="delete_path", decision="allow")],  # remembered: not policy
        audit=[
            entry("call_1", "list_dir", True, "policy", rule=0),
            entry("call_2", "delete_path", True, "person", approver="ann"),
            entry("call_3", "delete_path", True, "policy", rule=0),
        ],
    )


def test_each_call_is_decided_again_beside_what_was_decided_then() -> None:
    state = recorded_state()
    own = [PolicyRule(tool="list_dir", decision="allow")]
    proposed = ProposedPolicy(
        enforced=[PolicyRule(tool="delete_path", when={"path": "tmp"}, decision="deny")],
        defaults=[PolicyRule(tool="list_dir", when={"path": "logs"}, decision="ask")],
    )
    rows = decide_again(state, own, proposed)
    seen = [(r.call.id, r.then.text, r.now.text, r.changed, r.compared) for r in rows]
    assert seen == [
        ("call_1", "allowed by rule 0", "allow by rule 1 (run)", False, True),
        ("call_2", "approved by ann", "ask (the tool's default)", False, True),
        ("call_3", "allowed by rule 0", "deny by rule 0 (enforced): Denied by policy", True, True),
        ("call_4", "answered at once (it could not run)", rows[3].now.text, False, False),
        ("call_5", "ran without asking", "allow by rule 1 (run)", False, True),
    ]
    assert rows[3].now.decision == "none"
    assert summary_line(rows) == (
        "5 calls: 1 would be denied (allowed by rule 0 then), 3 unchanged,"
        " 1 not compared (no decision then or now)"
    )


def test_the_decision_now_is_the_workflows_own_gate() -> None:
    """What what-if says of each call is what `RunPolicy.evaluate`, the workflow's, says with
    the proposed rules in the run's state."""
    state = recorded_state()
    enforced = [PolicyRule(tool="delete_path", when={"path": "logs"}, decision="ask")]
    rules = [PolicyRule(tool="*", when={"path": "tmp*"}, decision="allow")]
    defaults = [PolicyRule(tool="list_dir", decision="deny", reason="no listing")]
    rows = decide_again(
        state, [], ProposedPolicy(enforced=enforced, rules=rules, defaults=defaults)
    )
    proposed_state = state.model_copy(
        update={
            "worker_policy": WorkerPolicy(enforced=enforced, defaults=defaults),
            "run_rules": rules,
        }
    )
    gate = RunPolicy(proposed_state)
    specs = {s.name: s for s in SPECS}
    for row in rows:
        if row.now.decision == "none":
            continue
        spec = specs[row.call.name]
        verdict = gate.evaluate(row.call, spec, requires_approval=spec.requires_approval)
        assert (row.now.decision, row.now.rule) == (verdict.decision, verdict.rule)
    assert [r.now.decision for r in rows] == ["deny", "ask", "allow", "none", "deny"]
    assert summary_line(rows) == (
        "5 calls: 2 would be denied (1 allowed by rule 0, 1 ran without asking then),"
        " 2 unchanged, 1 not compared (no decision then or now)"
    )
