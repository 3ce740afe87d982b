"""The repeat limit: the same call with the same arguments runs at most `options.max_repeats`
times in a run. Small models loop (`list_dir .` ten times, an approved `echo` four times); past
the limit the next identical call is answered with a tool message saying the model already has
that result, without running it or asking anyone. Pure; no Temporal import."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from workflows.arguments import arguments_json
from workflows.model import AgentState, ToolCall
from workflows.tool_results import envelope_error

MAX_TRACKED_CALLS = 1_000
"""The run remembers the run counts of at most this many distinct calls (the oldest go first),
so the carried bookkeeping stays bounded however long a session lasts."""


@dataclass(frozen=True)
class Refusal:
    content: str
    """The tool message the model gets instead of a result."""
    warning: str
    """What the run's `warning` event says."""


def call_key(call: ToolCall) -> str:
    """Which calls count as the same: the tool and the one text form of its arguments."""
    text = f"{call.name}\x00{arguments_json(call.arguments)}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class Repeats:
    def __init__(self, state: AgentState, *, enabled: bool) -> None:
        self._state = state
        self._enabled = enabled

    def refusal(self, call: ToolCall) -> Refusal | None:
        """Why `call` is not run again (it already ran the most times allowed), or None."""
        if not self._enabled:
            return None
        limit = self._state.options.max_repeats
        runs = self._state.call_runs.get(call_key(call), 0)
        if runs < limit:
            return None
        return Refusal(
            content=envelope_error(
                f"Not run: this exact call ({call.name} with the same arguments) already ran"
                f" {runs} times in this run, and its result is in the conversation above. Use"
                " that result, call with different arguments, or answer the user."
            ),
            warning=(
                f"the same call already ran {runs} times in this run (max_repeats {limit});"
                " answered without running it or asking anyone"
            ),
        )

    def ran(self, call: ToolCall) -> None:
        """Count one execution of `call`."""
        if not self._enabled:
            return
        runs = self._state.call_runs
        key = call_key(call)
        count = runs.pop(key, 0) + 1
        runs[key] = count
        while len(runs) > MAX_TRACKED_CALLS:
            del runs[next(iter(runs))]
