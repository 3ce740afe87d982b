"""How a follower rides through failures that pass: an aborted or cancelled request, a slow
answer, a worker away for a restart. Such a failure is tried again after a pause that grows
(0.5 s, 1 s, 2 s, … at most 8 s, a little jitter so many followers do not come back at once);
when it lasts `NOTICE_SECONDS`, the follower is told once, in one line; it gives up only when the
run is closed (the caller reads the rest from its history) or the server is gone (it has not
answered for `SERVER_GONE_SECONDS`, or it says the run does not exist).

    patience = Patience(on_notice=lambda line: print(line) if line else None)
    while True:
        try:
            batch = await handle.events(last)
        except Exception as err:
            if not patience.transient(err):
                raise
            await patience.pause(err)
            continue
        patience.ok()

A failure that will not pass is not retried: a run that has no such query (a workflow of other
code), a payload this program cannot decrypt, a request the server refuses as invalid.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from runtime.codec import find_decryption_error
from starter.request_trouble import NoWorker
from workflows.shown import one_line

log = logging.getLogger(__name__)

_sleep = asyncio.sleep

FIRST_PAUSE_SECONDS = 0.5
MAX_PAUSE_SECONDS = 8.0
NOTICE_SECONDS = 5.0
"""A follower says it is still trying once a failure has lasted this long."""
SERVER_GONE_SECONDS = 60.0
"""The server itself (not a worker) has not answered for this long: following gives up."""

_LASTING = {
    RPCStatusCode.NOT_FOUND,
    RPCStatusCode.INVALID_ARGUMENT,
    RPCStatusCode.PERMISSION_DENIED,
    RPCStatusCode.UNAUTHENTICATED,
    RPCStatusCode.UNIMPLEMENTED,
    RPCStatusCode.ALREADY_EXISTS,
    RPCStatusCode.OUT_OF_RANGE,
}
"""What the server says of a request that would fail the same way again."""


def transient(err: BaseException) -> bool:
    """Whether `err` may pass while the run is open (worth trying again)."""
    if find_decryption_error(err) is not None:
        return False
    if isinstance(err, NoWorker | TimeoutError | WorkflowUpdateRPCTimeoutOrCancelledError):
        return True
    return isinstance(err, RPCError) and err.status not in _LASTING


def why(err: BaseException) -> str:
    """A failure in a few words, for the one line that says so."""
    if isinstance(err, RPCError):
        return f"{err.status.name.lower()}: {err.message}"
    if isinstance(err, WorkflowUpdateRPCTimeoutOrCancelledError):
        return "the stream's request timed out or was cancelled"
    if isinstance(err, TimeoutError):
        return "no answer in time"
    return str(err) or type(err).__name__


class Patience:
    """One follower's state through failures: since when it fails, how long the next pause is,
    whether it said so. `on_notice(line)` is called once when a failure lasts, and
    `on_notice(None)` when following works again after that."""

    def __init__(
        self,
        on_notice: Callable[[str | None], None] | None = None,
        *,
        notice_seconds: float = NOTICE_SECONDS,
        server_gone_seconds: float = SERVER_GONE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._on_notice = on_notice
        self._notice_seconds = notice_seconds
        self._server_gone_seconds = server_gone_seconds
        self._clock = clock
        self._failing_since: float | None = None
        self._server_silent_since: float | None = None
        self._pause = FIRST_PAUSE_SECONDS
        self.noticed = False
        """The follower was told that it is still trying (and not yet that it works again)."""
        self.failures = 0
        """Failures tried again so far (for tests and logs)."""

    @staticmethod
    def transient(err: BaseException) -> bool:
        return transient(err)

    def ok(self) -> None:
        """Something worked: the next failure starts afresh."""
        self._failing_since = None
        self._server_silent_since = None
        self._pause = FIRST_PAUSE_SECONDS
        if self.noticed:
            self.noticed = False
            if self._on_notice is not None:
                self._on_notice(None)

    async def pause(self, err: BaseException) -> None:
        """After a transient failure: say so once if it lasts, then wait before the next try."""
        now = self._clock()
        if self._failing_since is None:
            self._failing_since = now
        self.failures += 1
        log.debug("following failed (%s): trying again in %.1f s", why(err), self._pause)
        lasted = now - self._failing_since
        if not self.noticed and lasted >= self._notice_seconds:
            self.noticed = True
            if self._on_notice is not None:
                self._on_notice(
                    f"still trying to follow the run ({one_line(why(err), 300)});"
                    " it goes on when the run answers again, and stops only when the run closes"
                )
        pause = self._pause * random.uniform(0.8, 1.2)
        self._pause = min(self._pause * 2, MAX_PAUSE_SECONDS)
        await _sleep(pause)

    def server_answered(self) -> None:
        """The server answered (about the run itself): it is not gone."""
        self._server_silent_since = None

    def server_failed(self, err: RPCError) -> None:
        """The server did not answer about the run: raises `err` when the run does not exist or
        the server has been silent for `SERVER_GONE_SECONDS`; else following goes on."""
        if not transient(err):
            raise err
        now = self._clock()
        if self._server_silent_since is None:
            self._server_silent_since = now
        if now - self._server_silent_since >= self._server_gone_seconds:
            raise err
