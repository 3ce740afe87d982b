"""A run's token budget: the one owner of `state.budget`.

The budget is `options.max_run_tokens`, never more than the worker's cap (`AGENT_MAX_RUN_TOKENS`,
read with the worker's setup), plus what people granted. What it spends is every token the
provider reported (`state.usage`: the replies and the compaction summaries, across
continue-as-new). At the budget the loop calls the model no more: the run waits in phase
`budget_exhausted` until a person grants tokens (`grant_budget {"tokens": N}`: the budget grows
by N, beyond the worker's cap too: a grant is a person's decision, the cap only bounds what a
run may ask for itself) or stops it (`{"stop": true}`: it finishes `budget`). A run with no
budget has none of this: no event, no command, no state.

A grant is signed as answers are (`workflows.people.signatures`, decision `grant:N` or `stop`),
over the budget as it stands (`budget:<limit>` where an answer names its call, no arguments
digest), so a signed grant cannot be sent again once it took effect; the worker checks it.
With the worker's `AGENT_BUDGET_GROUPS` set, only a signed grant by a person of those groups is
taken: groups a grant merely claims are not believed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from temporalio import workflow

from workflows.context import RunContext
from workflows.gate.audit import record_grant
from workflows.model import (
    BudgetExhaustedEvent,
    BudgetGrant,
    BudgetGrantedEvent,
    BudgetState,
    BudgetStatus,
    BudgetStoppedEvent,
)

NO_BUDGET = "this run has no token budget (options.max_run_tokens, AGENT_MAX_RUN_TOKENS)"


def base_limit(asked: int | None, cap: int | None) -> int | None:
    """The run's own limit: what it asked for, never more than the worker's cap (either alone
    when the other is unset; None: no budget)."""
    given = [n for n in (asked, cap) if n is not None]
    return min(given) if given else None


def who_may(groups: Sequence[str]) -> str:
    """`ops`, `ops or admins`, `ops, dev or admins`."""
    names = list(groups)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def refusal(
    grant: BudgetGrant,
    budget: BudgetStatus | None,
    *,
    allowed_groups: Sequence[str],
    finished: bool,
    stopping: bool,
) -> str | None:
    """Why a grant is refused (it then changes nothing), or None."""
    if finished:
        return "the run has finished"
    if budget is None:
        return NO_BUDGET
    if allowed_groups and not set(grant.groups) & set(allowed_groups):
        return f"only {who_may(allowed_groups)} may grant tokens or stop a run at its budget"
    if allowed_groups and grant.signature is None:
        return (
            f"only {who_may(allowed_groups)} may grant tokens or stop a run at its budget, with a"
            " signed grant (their key in the worker's AGENT_APPROVERS_FILE): groups a grant only"
            " claims are not believed"
        )
    if stopping:
        return "the run is already stopping at its budget"
    if grant.stop and budget.used < budget.limit:
        return (
            f"the run is not at its token budget (used {budget.used} of {budget.limit} tokens):"
            " cancel it to stop it"
        )
    return None


class Budget:
    def __init__(self, ctx: RunContext, *, tell: Callable[[int, int], None]) -> None:
        self._state = ctx.state
        self._tell = tell
        """Notify people that the run waits at its budget (used, limit)."""
        self._emit = ctx.emit
        self._warn = ctx.warn
        self._set_phase = ctx.set_phase

    def _carried(self) -> BudgetState:
        if self._state.budget is None:
            self._state.budget = BudgetState()
        return self._state.budget

    def status(self) -> BudgetStatus | None:
        """Used and limit (None: the run has no budget)."""
        state = self._state
        cap = state.setup.max_run_tokens if state.setup is not None else None
        limit = base_limit(state.options.max_run_tokens, cap)
        if limit is None:
            return None
        carried = state.budget
        granted = carried.granted if carried is not None else 0
        granted += sum(state.sub_agent_grants.values())
        used = state.usage.total + (carried.estimated if carried is not None else 0)
        running = (r.tokens for r in state.sub_agents.values() if r.phase != "finished")
        used += state.sub_agent_tokens + sum(running)  # the tree's: its sub-agents' too
        groups = list(state.setup.budget_groups) if state.setup is not None else []
        return BudgetStatus(used=used, limit=limit + granted, granted=granted, groups=groups)

    def count_estimate(self, tokens: int) -> None:
        """A reply whose provider reported no usage: the budget counts `tokens` (the request's
        and the reply's estimated size), and people are told once that it does."""
        if self.status() is None:
            return
        carried = self._carried()
        carried.estimated += max(0, tokens)
        if not carried.estimate_told:
            carried.estimate_told = True
            self._warn(
                "the model server reports no token usage: the token budget counts an estimate"
                f" instead (about {tokens} tokens for this call, from the size of the request"
                " and the reply)"
            )

    def spent(self) -> bool:
        """Whether the run may call the model no more (its tokens reached the budget)."""
        budget = self.status()
        return budget is not None and budget.used >= budget.limit

    @property
    def stopped(self) -> bool:
        return self._state.budget is not None and self._state.budget.stopped_by is not None

    async def wait(self, *, handing_over: Callable[[], bool]) -> bool:
        """Wait, at the budget, for a grant, a stop, a cancel or continue-as-new. True when a
        person stopped the run (it finishes `budget`); else the loop goes round again."""
        budget = self.status()
        assert budget is not None
        carried = self._carried()
        if not carried.announced:
            carried.announced = True
            self._emit(BudgetExhaustedEvent(used=budget.used, limit=budget.limit))
            self._tell(budget.used, budget.limit)
        self._set_phase("budget_exhausted", f"used {budget.used} of {budget.limit} tokens")
        state = self._state
        await workflow.wait_condition(
            lambda: self.stopped or not self.spent() or state.cancel is not None or handing_over()
        )
        return self.stopped

    def refusal(self, grant: BudgetGrant, *, allowed: Sequence[str], finished: bool) -> str | None:
        return refusal(
            grant, self.status(), allowed_groups=allowed, finished=finished, stopping=self.stopped
        )

    def grant(self, grant: BudgetGrant) -> BudgetStatus:
        """Apply a grant that `refusal` let through: more tokens, or the stop."""
        carried = self._carried()
        before = self.status()
        assert before is not None
        record_grant(self._state, grant, workflow.now())
        if grant.stop:
            carried.stopped_by = grant.approver or ""
            self._emit(
                BudgetStoppedEvent(used=before.used, limit=before.limit, approver=grant.approver)
            )
            return before
        assert grant.tokens is not None
        carried.granted += grant.tokens
        carried.announced = False  # the next exhaustion is announced again
        after = self.status()
        assert after is not None
        self._emit(
            BudgetGrantedEvent(tokens=grant.tokens, limit=after.limit, approver=grant.approver)
        )
        return after
