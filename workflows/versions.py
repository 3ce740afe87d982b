"""The patches a run's code is behind, and their life.

A change to what the workflow does (its commands) goes behind `workflow.patched(ID)`, so a run
that started on the old code replays as it ran. Once no run of the old code can still be open
(the patch's `open_until`: its release's date, plus the longest a run stays open, plus the
namespace's retention), the patch is deprecated (`workflow.deprecate_patch`), and one release
later its branch and its recordings go (docs/compatibility.md).

The 0.x releases were never deployed: 1.0 cut them to one, the loop as 0.7 ran it. Their patches
went with them, except 0.7's own, which is deprecated so that 0.7's recordings keep replaying.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from temporalio import workflow

LOOP_COST_2 = "loop-cost-2"
"""0.7's marker: every run 1.0 replays was started with it, or with no marker at all."""
SESSIONS_OUTLIVE_OUTAGES = "sessions-outlive-outages-1"
"""A model server out of reach past the worker's wait ends a session's turn, not the session, and
a call answered with a person's remembered no is in the audit like the calls people answered."""
SUB_AGENTS = "sub-agents-1"
"""A run may delegate (`delegate`): a sub-agent is a child run under the same people, rules and
budget."""
OWN_KEYS = "own-keys-1"
"""People sign with their own keys, and what follows from it: a signed decision's groups are
the worker's (its approvers file), never the sender's, so eligibility is checked after the
signature; a grant takes effect once; a rule never decides an expired call; the operator's
escalation widens its own enforced rule; a reply that reports no usage counts an estimate."""


@dataclass(frozen=True)
class Patch:
    """One line of the patch table."""

    id: str
    changed: str
    release: str
    open_until: date
    """After this date no run without the patch can still be open."""
    deprecated: bool = False
    """Deprecated: the run writes the marker but no longer branches on it."""


PATCHES = (
    Patch(LOOP_COST_2, "the loop as 1.0 carries it (0.7's marker)", "0.7", date(2027, 1, 6),
          deprecated=True),
    Patch(SESSIONS_OUTLIVE_OUTAGES, "an outage ends a session's turn, remembered noes audited",
          "1.0", date(2027, 1, 8)),
    Patch(OWN_KEYS, "people sign with their own keys; groups only from the worker", "1.0",
          date(2027, 1, 8)),
    Patch(SUB_AGENTS, "sub-agents: a run that delegates, as a child run", "1.0",
          date(2027, 1, 8)),
)  # fmt: skip


@dataclass(frozen=True)
class Patched:
    """What this run does that a run started before the patch did not: one field per patch,
    named by what it changes, read once when the run starts (True for every new run)."""

    sessions_outlive_outages: bool = True
    """`SESSIONS_OUTLIVE_OUTAGES`."""
    own_keys: bool = True
    """`OWN_KEYS`."""
    sub_agents: bool = True
    """`SUB_AGENTS`."""


def this_run() -> Patched:
    """Write this run's patch markers and read which it was started with (call once, from the
    workflow's `__init__`: a run's first activation writes them all)."""
    workflow.deprecate_patch(LOOP_COST_2)
    return Patched(
        sessions_outlive_outages=workflow.patched(SESSIONS_OUTLIVE_OUTAGES),
        own_keys=workflow.patched(OWN_KEYS),
        sub_agents=workflow.patched(SUB_AGENTS),
    )
