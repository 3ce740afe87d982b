"""Figure 9, the approval policy's cost per tool call: `evaluate` with the most rules a list may
hold (200), none matching (the worst case: every rule's tool glob matches and every `when`
pattern is tried), against the first of those rules alone (the arguments parsed, one pattern
tried). Pure Python in this process: the subject is what rules add to each call the workflow
decides."""

from __future__ import annotations

import time

from bench.harness import Bench, median
from bench.report import Figure
from workflows.contract.rules import MAX_RULES, PolicyRule
from workflows.gate.policy import evaluate

CALLS = {"quick": 500, "full": 5_000}
"""Evaluations per sample."""
SAMPLES = {"quick": 3, "full": 7}
ARGUMENTS = '{"command": "ls -la", "timeout": 30}'


def worst_case_rules() -> list[PolicyRule]:
    """200 rules for `run_command`, alternating decisions, none matching `ls -la`."""
    decisions = ("allow", "deny", "ask")
    return [
        PolicyRule(
            tool="run_*" if i % 2 else "run_command",
            when={"command": f"git log -{i} *"},
            decision=decisions[i % 3],
        )
        for i in range(MAX_RULES)
    ]


def microseconds_per_call(rules: list[PolicyRule], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        verdict = evaluate(rules, "run_command", ARGUMENTS, requires_approval=True)
    elapsed = time.perf_counter() - started
    assert verdict.rule is None, verdict
    return 1e6 * elapsed / calls


async def measure(b: Bench) -> list[Figure]:
    calls = CALLS.get(b.profile.name, CALLS["full"])
    samples = SAMPLES.get(b.profile.name, SAMPLES["full"])
    rules = worst_case_rules()
    microseconds_per_call(rules, max(1, calls // 10))  # warm-up (fnmatch's pattern cache)
    full: list[float] = []
    one: list[float] = []
    for _ in range(samples):  # interleaved, so a noisy neighbour hits both alike
        full.append(microseconds_per_call(rules, calls))
        one.append(microseconds_per_call(rules[:1], calls))
    per_call = median(full)
    b.details["policy"] = {"rules_us": full, "one_rule_us": one, "calls_per_sample": calls}
    return [
        Figure(
            key="policy.per_call",
            label="9. policy evaluation, 200 rules, per call",
            value=per_call,
            unit="µs",
            floor=median(one),
            floor_label="1 rule",
            note=(
                f"{per_call:.1f} µs per call ({1e6 / per_call:,.0f} evaluations/s) with"
                f" {MAX_RULES} rules, none matching; median of {samples} × {calls} calls;"
                " report only"
            ),
        )
    ]
