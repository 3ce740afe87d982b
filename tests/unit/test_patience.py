"""A follower's patience (`starter.patience`): which failures it tries again, the one line it
says when one lasts, and when it gives up (the run or the server gone). A fake clock and no
real pauses; the followers that use it are tested against the real server in
tests/cli/test_starter_watch_outage.py and tests/web/test_live_feed_outage.py."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from starter import patience as patience_module
from starter.patience import NOTICE_SECONDS, SERVER_GONE_SECONDS, Patience, transient
from starter.request_trouble import NoWorker


def rpc(status: RPCStatusCode, message: str = "x") -> RPCError:
    return RPCError(message, status, b"")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def no_real_pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(patience_module, "_sleep", sleep)
    return slept


def test_failures_that_pass_are_tried_again_and_lasting_ones_are_not():
    assert transient(rpc(RPCStatusCode.UNAVAILABLE, "workflow update was aborted"))
    assert transient(rpc(RPCStatusCode.CANCELLED, "Timeout expired"))
    assert transient(rpc(RPCStatusCode.DEADLINE_EXCEEDED))
    assert transient(rpc(RPCStatusCode.FAILED_PRECONDITION, "no poller seen for task queue"))
    assert transient(NoWorker(5))
    assert transient(TimeoutError())
    assert transient(WorkflowUpdateRPCTimeoutOrCancelledError())
    assert not transient(rpc(RPCStatusCode.NOT_FOUND, "workflow not found"))
    assert not transient(rpc(RPCStatusCode.INVALID_ARGUMENT))
    assert not transient(ValueError("a bug"))


async def test_a_lasting_failure_is_said_once_and_its_end_too(no_real_pauses: list[float]):
    clock, said = Clock(), list[str | None]()
    patience = Patience(on_notice=said.append, clock=clock)
    await patience.pause(NoWorker(5))
    assert said == []  # a failure that passes at once says nothing
    for _ in range(5):
        clock.now += NOTICE_SECONDS
        await patience.pause(rpc(RPCStatusCode.FAILED_PRECONDITION, "no poller seen"))
    assert len(said) == 1
    assert said[0] is not None and said[0].startswith("still trying to follow the run")
    assert "no poller seen" in said[0] and "\n" not in said[0]
    patience.ok()
    assert said[-1] is None  # it works again
    patience.ok()
    assert len(said) == 2
    # The pauses grow, at most 8 s (with a little jitter), and start afresh after it worked.
    assert no_real_pauses[0] < 1 and max(no_real_pauses) <= 8 * 1.2
    assert no_real_pauses[-1] > no_real_pauses[0]
    await patience.pause(NoWorker(5))
    assert no_real_pauses[-1] < 1


def test_it_gives_up_only_when_the_run_or_the_server_is_gone():
    clock = Clock()
    patience = Patience(clock=clock)
    with pytest.raises(RPCError):
        patience.server_failed(rpc(RPCStatusCode.NOT_FOUND, "workflow not found"))
    cut = rpc(RPCStatusCode.UNAVAILABLE, "tcp connect error")
    patience.server_failed(cut)
    clock.now += SERVER_GONE_SECONDS - 1
    patience.server_failed(cut)  # a server away for less than that: following goes on
    patience.server_answered()
    clock.now += SERVER_GONE_SECONDS - 1
    patience.server_failed(cut)  # counted again from its last answer
    clock.now += SERVER_GONE_SECONDS
    with pytest.raises(RPCError):
        patience.server_failed(cut)
