"""Which rules of the loop a run follows, chosen once per run from its patch markers.

A run recorded by an earlier release replays with that release's rules: each release's new
behaviour is behind one `workflow.patched` id, read once when the run starts (the first
activation), and the rest of the code asks the `Behaviour` value, never the patch. A new run
writes one marker: the newest patch implies the older ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

HARDENED = "hardened-loop-1"
"""The second release's loop: reused call ids renamed, calls that cannot run never wait for a
person, replies and batches bounded, the conversation's size checked at start."""
APPROVAL_POLICY = "approval-policy-1"
"""The second release's approval rules: the worker's rules read at a run's start."""
TRUST_AND_TIME = "trust-and-time-1"
"""This release: one gate for every call whatever its source (a run's input, seeded answers,
edits), answers bound to the call that was shown, positional shell safety and normalised paths
in rules, bounded bookkeeping, the repeat limit, the context window, notifications."""
SOUND_SEAMS = "sound-seams-1"
"""The fourth release: authority only from the worker (hand-overs only from a real
continue-as-new, the worker's setup read at every generation, the hand-over bounded as a whole),
and nothing failing silently (a session survives a bad turn). Each change it brings is a field of
`Behaviour` named by what it changes, True for runs of this release."""


@dataclass(frozen=True)
class Behaviour:
    hardened: bool = True
    worker_policy: bool = True
    trust_and_time: bool = True
    sound_seams: bool = True

    @classmethod
    def of_this_run(cls) -> Behaviour:
        """Read the patch markers (call once, from the workflow's `__init__`)."""
        if workflow.patched(SOUND_SEAMS):
            return cls()
        if workflow.patched(TRUST_AND_TIME):
            return cls(sound_seams=False)
        return cls(
            hardened=workflow.patched(HARDENED),
            worker_policy=workflow.patched(APPROVAL_POLICY),
            trust_and_time=False,
            sound_seams=False,
        )
