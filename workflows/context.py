"""What every owner of a run's concept is handed: the run's state, where its events go, how it
shows its phase, the clock, and the ids an answer must name.

The workflow builds one `RunContext` and gives it to each owner (the approvals, the questions,
the budget, the waits, a model call, a batch, ...), instead of four to six callbacks each. Pure:
the workflow passes in `workflow.now` and its own `emit`; unit tests pass their own (the
event and phase sinks default to nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from workflows.model import AgentState, BaseEvent, Phase
from workflows.versions import Patched


def _ignore_event(_event: BaseEvent) -> None:
    return None


def _ignore_text(_text: str) -> None:
    return None


def _ignore_phase(_phase: Phase, _details: str) -> None:
    return None


@dataclass(frozen=True)
class RunContext:
    state: AgentState
    """Everything the run remembers (`AgentState`): each owner reads and writes its own part."""
    now: Callable[[], datetime]
    """The clock: `workflow.now` in a run (never the machine's)."""
    workflow_id: str = "workflow"
    run_id: str = "run"
    """The first run id of the run's chain: what an answer names to be for this run."""
    emit: Callable[[BaseEvent], None] = field(default=_ignore_event)
    """Append an event to the run's log (and the live stream)."""
    warn: Callable[[str], None] = field(default=_ignore_text)
    """A `warning` event (and a log line)."""
    set_phase: Callable[[Phase, str], None] = field(default=_ignore_phase)
    """The run's phase and the details the Temporal UI shows."""
    patched: Patched = field(default_factory=Patched)
    """Which patches the run was started with (all of them for a new run)."""
