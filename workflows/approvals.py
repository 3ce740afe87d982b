"""Which calls need an answer, who gives it, and whether an answer can be taken now: the
approval rules over a run's state, the worker's tools and the approval policy (the worker's
enforced rules, then the run's, then the worker's defaults). Pure (no Temporal import)."""

from __future__ import annotations

from workflows import bounds
from workflows.conversation import answered_ids, pending_calls
from workflows.model import AgentState, ToolCall, ToolSpec
from workflows.policy import Verdict, effective_rules, evaluate, policy_view
from workflows.reconstruction import runnable
from workflows.rules import PolicyRule, PolicyView


class Approvals:
    def __init__(self, state: AgentState, *, hardened: bool) -> None:
        self._state = state
        self._hardened = hardened
        self._specs: dict[str, ToolSpec] = {s.name: s for s in state.tool_specs or []}
        self._runnable: dict[str, bool] = {}
        """Whether each call could run at all (a cache: derived from the call and the specs)."""

    def know_tools(self, specs: list[ToolSpec]) -> None:
        """The worker's tools, once `list_tools` answered (they are kept in the state)."""
        self._state.tool_specs = specs
        self._specs = {s.name: s for s in specs}

    def spec(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    def allowed_tools(self) -> list[str]:
        """The tools this run may use: the worker's, less those the run's allow-list leaves out."""
        names = sorted(self._specs)
        allow = self._state.options.tools
        return names if allow is None else [n for n in names if n in allow]

    # ---- who must answer

    def guarded(self, call: ToolCall) -> bool:
        """The tool's own default: its spec requires approval, or the run's `approval_required`
        names it."""
        spec = self._specs.get(call.name)
        extra = self._state.options.approval_required or []
        return (spec is not None and spec.requires_approval) or call.name in extra

    def requires_approval(self, call: ToolCall) -> bool:
        """Whether the call runs only with an answer (a person's or a rule's)."""
        state = self._state
        needed = self.guarded(call) or call.id in state.asked or call.id in state.answers
        return needed and (not self._hardened or self.can_run(call))

    def can_run(self, call: ToolCall) -> bool:
        """A call that cannot run (unknown or disallowed tool, arguments that are not one JSON
        object a tool takes) is answered at once: it never waits for a person."""
        known = self._runnable.get(call.id)
        if known is None:
            allowed = set(self.allowed_tools())
            known = runnable(call, allowed.__contains__, bounds.MAX_ARGUMENT_CHARS)
            self._runnable[call.id] = known
        return known

    def forget(self, call_id: str) -> None:
        """The call changed (its arguments were edited): work out again whether it can run."""
        self._runnable.pop(call_id, None)

    def verdict(self, call: ToolCall) -> Verdict | None:
        """What the rules say about a call; None for a call that cannot run at all."""
        if self._hardened and not self.can_run(call):
            return None
        return evaluate(
            self.rules(), call.name, call.arguments, requires_approval=self.guarded(call)
        )

    # ---- the rules

    def rules(self) -> list[PolicyRule]:
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

    # ---- answers

    def unanswered(self, pending: list[ToolCall]) -> list[ToolCall]:
        """The pending calls a person must still answer."""
        answers = self._state.answers
        return [c for c in pending if self.requires_approval(c) and c.id not in answers]

    def waiting(self) -> list[ToolCall]:
        """The calls of the conversation waiting for a person now."""
        return self.unanswered(pending_calls(self._state.messages))

    def problem(self, call_id: str, *, finished: bool) -> str | None:
        """Why an answer for `call_id` cannot be taken now, or None when it can."""
        if finished:
            return "the run has finished"
        shown = bounds.shown(call_id)
        pending = pending_calls(self._state.messages)
        guarded = [c for c in pending if self.requires_approval(c)]
        if call_id in self._state.answers:
            return f"call '{shown}' was already answered"
        if call_id in {c.id for c in guarded}:
            return None
        if self._hardened and call_id in answered_ids(self._state.messages):
            return f"call '{shown}' was already answered"
        if not guarded:
            return f"no call is waiting for approval (got an answer for '{shown}')"
        known = bounds.shown(", ".join(c.id for c in guarded), 400)
        return f"unknown call id '{shown}' (waiting: {known})"
