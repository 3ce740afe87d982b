"""Deliver an approval answer through the `submit_approval` update, also while the run is busy.

Temporal admits only a few updates in flight per run, and people who watch a run hold some of
them. An answer refused for that reason (RESOURCE_EXHAUSTED) is sent again with backoff until
`BUSY_PATIENCE_SECONDS` have passed. Every attempt carries the same update id, so Temporal applies
the answer at most once even when an attempt's reply was lost.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from temporalio.client import WorkflowHandle, WorkflowUpdateRPCTimeoutOrCancelledError

from starter.stream_transport import is_busy
from workflows import names
from workflows.model import ToolApprovalResponse, ToolCall

BUSY_PATIENCE_SECONDS = 30.0
FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 4.0


class AnswerNotDelivered(Exception):
    """No attempt got through within the time allowed."""

    def __init__(self, busy: bool, seconds: float) -> None:
        super().__init__(f"not delivered within {seconds:.0f}s")
        self.busy = busy
        """True when the run kept refusing (too many requests in flight); False when no worker
        took the answer."""
        self.seconds = seconds


async def submit_answer(
    handle: WorkflowHandle[Any, Any],
    response: ToolApprovalResponse,
    *,
    patience: float = BUSY_PATIENCE_SECONDS,
) -> list[ToolCall]:
    """Send `response`; return the calls still pending. Raises AnswerNotDelivered when it could
    not be delivered in `patience` seconds, WorkflowUpdateFailedError when the workflow refused
    it, and other errors as the SDK raises them."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    update_id = f"answer-{uuid.uuid4().hex}"
    backoff = FIRST_BACKOFF_SECONDS
    busy = False
    while True:
        remaining = deadline - loop.time()
        try:
            remaining_calls: list[ToolCall] = await asyncio.wait_for(
                handle.execute_update(
                    names.UPDATE_SUBMIT_APPROVAL,
                    response,
                    id=update_id,
                    result_type=list[ToolCall],
                ),
                max(remaining, 0.1),
            )
            return remaining_calls
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
            # The attempt ran out of time (our deadline or the server's): sending the same
            # update id again is safe, and pointless once the deadline has passed.
            if loop.time() >= deadline:
                raise AnswerNotDelivered(busy, patience) from None
        except Exception as err:
            if not is_busy(err):
                raise
            busy = True
        if loop.time() + backoff >= deadline:
            raise AnswerNotDelivered(busy, patience)
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
