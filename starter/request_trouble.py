"""What a failed request to Temporal means for a client that follows or answers a run: the run
was too busy to take it (too many requests in flight), or no worker answered in time. The lowest
of the starter's modules: the transports, the handle and the patience all read it.
"""

from __future__ import annotations

from temporalio.service import RPCError, RPCStatusCode

_TOO_LARGE = (
    "grpc: received message larger than max",
    "grpc: message after decompression larger than max",
    "grpc: received message after decompression larger than max",
)


def is_busy(err: BaseException) -> bool:
    """Temporal refused a request because the run has too many in flight (not a size limit)."""
    return (
        isinstance(err, RPCError)
        and err.status == RPCStatusCode.RESOURCE_EXHAUSTED
        and not err.message.startswith(_TOO_LARGE)
    )


class NoWorker(Exception):
    """No worker answered a query or an update in time."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no worker answered within {seconds:.0f}s")
        self.seconds = seconds
