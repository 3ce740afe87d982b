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
)  # fmt: skip


def mark_this_run() -> None:
    """Write this run's patch markers (call once, from the workflow's `__init__`)."""
    workflow.deprecate_patch(LOOP_COST_2)
