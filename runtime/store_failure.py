"""A payload store that fails: one error type, with one line to say, whatever the driver raised.

`GuardedDriver` wraps the store's driver and turns every failure (a store that cannot be
reached, a missing object, an integrity check that fails) into `PayloadStoreError`, naming the
store and the run. It is deliberately not an `ApplicationError`: in a workflow task it fails the
task, which Temporal retries for as long as the run is open, and never the run itself; in an
activity it fails that attempt, which the activity's retry policy retries.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from runtime.store_keys import run_of
from workflows.shown import ELLIPSIS, shorten

CAUSE_CHARS = 300


class PayloadStoreError(RuntimeError):
    """The payload store could not store or give back a payload."""

    def __init__(self, message: str, run_id: str | None) -> None:
        super().__init__(message)
        self.run_id = run_id


def _cause(err: BaseException) -> str:
    """The innermost explanation of `err` on one line (the SDK's S3 driver wraps its client's)."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = " ".join(str(current).split())
        parts.append(f"{type(current).__name__}: {text}" if text else type(current).__name__)
        current = current.__cause__ or current.__context__
    line = " <- ".join(reversed(parts))
    return shorten(line, CAUSE_CHARS, ELLIPSIS, within=True)


def _claim_run(claims: Sequence[StorageDriverClaim]) -> str | None:
    for claim in claims:
        for field in ("path", "key"):
            run = run_of(claim.claim_data.get(field, ""))
            if run is not None:
                return run
    return None


class GuardedDriver(StorageDriver):
    """`inner` with its failures as PayloadStoreError. The name is the inner driver's, so the
    references in history name the real driver."""

    def __init__(self, inner: StorageDriver, location: str) -> None:
        self.inner = inner
        self.location = location

    def name(self) -> str:
        return self.inner.name()

    def type(self) -> str:
        return self.inner.type()

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        try:
            return await self.inner.store(context, payloads)
        except Exception as err:
            target = context.target
            run = target.run_id if isinstance(target, StorageDriverWorkflowInfo) else None
            raise PayloadStoreError(
                f"payload store {self.location} could not store a payload: {_cause(err)}", run
            ) from err

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        try:
            return await self.inner.retrieve(context, claims)
        except Exception as err:
            raise PayloadStoreError(
                f"payload store {self.location} could not give back a payload: {_cause(err)}",
                _claim_run(claims),
            ) from err


def find_store_error(err: BaseException | None) -> PayloadStoreError | None:
    """The PayloadStoreError behind `err`, following causes and contexts (the SDK wraps)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, PayloadStoreError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None
