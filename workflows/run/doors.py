"""What the run's handlers take: each payload decoded, and a sealed one only by the run and the
handler it was sealed for (`workflows.contract.seal`).

A run started sealed (encryption on) takes only sealed payloads (`sealed_only`); a run whose
input was sealed for it also checks each payload's binding (`bound`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from temporalio import workflow
from temporalio.common import RawValue

from workflows import names
from workflows.contract.seal import seal_problem, signal_role, update_role
from workflows.intake import UNSEALED, decode, is_plaintext
from workflows.run.live_stream import STREAM_PUBLISH_SIGNAL


class Doors:
    def __init__(self, *, sealed_only: bool, bound: bool) -> None:
        self.sealed_only = sealed_only
        self.bound = bound
        """Sealed payloads are taken only by the run and handler they were sealed for."""

    def signal(self, name: str, args: Sequence[RawValue]) -> tuple[object, str | None]:
        """A signal's one payload, or what was wrong with it."""
        payload, error = decode(
            args,
            optional=name == names.SIGNAL_CANCEL,
            sealed_only=self.sealed_only,
        )
        if error is None and self.bound:
            error = (
                UNSEALED if not args else self.unbound(args[0].payload.metadata, signal_role(name))
            )
        return payload, error

    def stream(self, payload: RawValue) -> str | None:
        """Why a publish to the live stream is not this run's to take, or None."""
        if self.bound and not is_plaintext(payload):
            return self.unbound(payload.payload.metadata, signal_role(STREAM_PUBLISH_SIGNAL))
        return None

    def update(self, name: str, payload: RawValue) -> tuple[object, str | None]:
        """An update's one payload, or what was wrong with it."""
        value, error = decode([payload], optional=False, sealed_only=self.sealed_only)
        if error is None and self.bound:
            error = self.unbound(payload.payload.metadata, update_role(name))
        return value, error

    def unbound(
        self, metadata: Mapping[str, bytes], role: str, *, first_run: bool = True
    ) -> str | None:
        """Why a sealed payload is not this run's to take in `role` (see
        `workflows.contract.seal`)."""
        info = workflow.info()
        return seal_problem(
            metadata,
            workflow_id=info.workflow_id,
            role=role,
            first_run_id=info.first_execution_run_id if first_run else None,
        )
