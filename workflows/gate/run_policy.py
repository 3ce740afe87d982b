"""A run's effective rules and what they say about a call: the worker's enforced rules, then
the run's (remembered ones at their front), then the worker's defaults.

The decisions themselves are `workflows.gate.policy`'s pure functions; this module reads the rules
from the run's state.
"""

from __future__ import annotations

from collections.abc import Sequence

from workflows.contract.rules import PolicyRule, PolicyView
from workflows.gate.policy import Verdict, effective_rules, evaluate, policy_view
from workflows.gate.quorum import unmeetable, weaker_rule
from workflows.gate.rule_check import unmatchable_rule
from workflows.model import AgentState, ToolCall, ToolSpec


class RunPolicy:
    def __init__(self, state: AgentState) -> None:
        self._state = state

    def effective(self) -> list[PolicyRule]:
        """The effective rules in evaluation order (the indices verdicts and events name)."""
        worker = self._state.worker_policy
        enforced = worker.enforced if worker is not None else []
        defaults = worker.defaults if worker is not None else []
        return effective_rules(enforced, self._state.run_rules, defaults)

    def view(self) -> PolicyView:
        worker = self._state.worker_policy
        enforced = worker.enforced if worker is not None else []
        defaults = worker.defaults if worker is not None else []
        return policy_view(enforced, self._state.run_rules, defaults)

    def evaluate(
        self, call: ToolCall, spec: ToolSpec | None, *, requires_approval: bool
    ) -> Verdict:
        """The rules' decision, matching paths as the tool opens them."""
        return evaluate(
            self.effective(),
            call.name,
            call.arguments,
            requires_approval=requires_approval,
            path_parameters=spec.path_parameters if spec is not None else (),
            path_root=spec.path_root if spec is not None else None,
        )

    def unmatchable(self, rules: Sequence[PolicyRule]) -> str | None:
        """Why one of a run's rules can never match a tool of this worker, or a weaker copy of
        an enforced approver rule (None while the tools are not known yet)."""
        if self._state.tool_specs is None:
            return None
        problem = unmatchable_rule(rules, self._state.tool_specs, origin="run")
        worker = self._state.worker_policy
        if problem is None and worker is not None:
            names = [spec.name for spec in self._state.tool_specs]
            problem = weaker_rule(rules, worker.enforced, names)
        setup = self._state.setup
        if problem is None and setup is not None and setup.approver_groups is not None:
            problem = unmeetable(rules, setup.approver_groups, origin="run")
        return problem
