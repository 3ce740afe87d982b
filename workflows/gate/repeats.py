"""The repeat limit: the same call with the same arguments is answered at most
`options.max_repeats` times. Small models loop (`list_dir .` ten times, an approved `echo` four
times, a call a person just rejected); past the limit the next identical call is answered with a
tool message saying the model already has that result, without running it or asking anyone.

Runs count per turn (a run without `keep_alive` is one turn; a session's next message starts a
new one), and count a person's rejection like a run: a call identical to one a
person rejected in this turn is answered with that rejection and its reason, without asking
again. Pure; no Temporal import."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from workflows.contract.arguments import arguments_json
from workflows.contract.tool_results import (
    DEFAULT_REJECTION_REASON,
    envelope_error,
    rejection_message,
)
from workflows.model import AgentState, ToolCall
from workflows.shown import shorten

MAX_TRACKED_CALLS = 1_000
"""The run remembers the run counts of at most this many distinct calls (the oldest go first),
so the carried bookkeeping stays bounded however long a session lasts."""
MAX_REMEMBERED_REJECTIONS = 100
"""A turn remembers at most this many rejected calls (the oldest go first), each with at most
`REMEMBERED_REASON_CHARS` of its reason: about 50 KB of the hand-over at most."""
REMEMBERED_REASON_CHARS = 500


@dataclass(frozen=True)
class Remembered:
    """A person's no remembered for the turn: its reason, and who said it."""

    reason: str | None
    approver: str | None


@dataclass(frozen=True)
class Refusal:
    content: str
    """The tool message the model gets instead of a result."""
    warning: str
    """What the run's `warning` event says."""
    past_limit: bool = True
    """The call is past `max_repeats` (not only a person's no remembered): in a session this
    ends the turn."""


def call_key(call: ToolCall) -> str:
    """Which calls count as the same: the tool and the one text form of its arguments."""
    text = f"{call.name}\x00{arguments_json(call.arguments)}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def already_rejected_message(call: ToolCall, reason: str | None) -> str:
    """The tool message for a call a person already rejected in this turn: the rejection with
    its reason, and why nobody was asked."""
    return (
        f"{rejection_message(reason)} (already rejected: a person rejected this exact call,"
        f" {call.name} with the same arguments, earlier in this turn, so nobody was asked again."
        " Do not repeat it: call with different arguments, or answer the user.)"
    )


class Repeats:
    def __init__(self, state: AgentState, *, remember_who: bool = True) -> None:
        self._state = state
        self._remember_who = remember_who
        """Who rejected a call is remembered with the rejection, for the audit."""

    @property
    def scope(self) -> str:
        """What the counts cover, in the words the model and people are told."""
        return "turn" if self._state.options.keep_alive else "run"

    def refusal(self, call: ToolCall) -> Refusal | None:
        """Why `call` is not run (or asked about) again, or None: a person rejected the same call
        in this turn, or it already ran (or was rejected) the most times allowed."""
        key = call_key(call)
        limit = self._state.options.max_repeats
        runs = self._state.call_runs.get(key, 0)
        if key in self._state.turn_rejections:
            return self._rejected_again(call, self._state.turn_rejections[key], runs, limit)
        if runs < limit:
            return None
        return Refusal(
            content=envelope_error(
                f"Not run: this exact call ({call.name} with the same arguments) already ran"
                f" {runs} times in this {self.scope}, and its result is in the conversation"
                " above. Use that result, call with different arguments, or answer the user."
            ),
            warning=(
                f"the same call already ran {runs} times in this {self.scope} (max_repeats"
                f" {limit}); answered without running it or asking anyone"
            ),
        )

    def _rejected_again(self, call: ToolCall, reason: str | None, runs: int, limit: int) -> Refusal:
        said = shorten(reason or DEFAULT_REJECTION_REASON, 200)
        counted = f", {runs} times so far (max_repeats {limit})" if runs >= limit else ""
        return Refusal(
            content=already_rejected_message(call, reason),
            warning=(
                f"a person already rejected this exact call in this turn ({said}){counted};"
                " answered with that rejection without asking again"
            ),
            past_limit=runs >= limit,
        )

    def ran(self, call: ToolCall) -> None:
        """Count one execution of `call` (or one rejection of it)."""
        _count(self._state.call_runs, call_key(call))

    def rejected(self, call: ToolCall, reason: str | None, approver: str | None = None) -> None:
        """A person rejected `call`: remembered for the turn, and counted like a run."""
        key = call_key(call)
        rejections = self._state.turn_rejections
        rejections.pop(key, None)
        rejections[key] = None if reason is None else shorten(reason, REMEMBERED_REASON_CHARS)
        while len(rejections) > MAX_REMEMBERED_REJECTIONS:
            del rejections[next(iter(rejections))]
        if self._remember_who:
            who = self._state.turn_rejected_by
            who[key] = None if approver is None else shorten(approver, REMEMBERED_REASON_CHARS)
            for gone in [k for k in who if k not in rejections]:
                del who[gone]
        self.ran(call)

    def remembered(self, call: ToolCall) -> Remembered | None:
        """The person's no that `call` is answered with (the same call rejected earlier in the
        turn), or None."""
        key = call_key(call)
        if key not in self._state.turn_rejections:
            return None
        reason = self._state.turn_rejections[key]
        return Remembered(reason, self._state.turn_rejected_by.get(key))

    def past_limit(self, pending: Sequence[ToolCall]) -> bool:
        """Whether a pending call is answered because it is past the repeat limit (read before
        the batch counts its calls)."""
        refusals = (self.refusal(call) for call in pending)
        return any(r is not None and r.past_limit for r in refusals)

    def count_answers(self, pending: Sequence[ToolCall]) -> None:
        """Before the batch runs: a person's no is remembered for the turn, and it counts
        toward the repeat limit like a run, as does each call answered with it."""
        for call in pending:
            record = self._state.answers.get(call.id)
            if record is not None:
                if record.source == "person" and not record.approved:
                    self.rejected(call, record.reason, record.approver)
                continue
            refusal = self.refusal(call)
            if refusal is not None and not refusal.past_limit:
                self.ran(call)

    def new_turn(self) -> None:
        """A session's next message: the counts and the rejections start again."""
        self._state.call_runs.clear()
        self._state.turn_rejections.clear()
        self._state.turn_rejected_by.clear()


def _count(runs: dict[str, int], key: str) -> None:
    """One more for `key`, which becomes the newest; the oldest go past `MAX_TRACKED_CALLS`."""
    count = runs.pop(key, 0) + 1
    runs[key] = count
    while len(runs) > MAX_TRACKED_CALLS:
        del runs[next(iter(runs))]
