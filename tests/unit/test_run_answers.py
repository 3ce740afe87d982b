"""The web app's one per-run answer cache: bounded, one query in flight per run, a run that did
not answer asked again only later, a closed run forgotten at once."""

from __future__ import annotations

import asyncio
from functools import partial

from starter.web.run_answers import RunAnswers


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def answers(clock: Clock, size: int = 10) -> RunAnswers[str]:
    return RunAnswers(size=size, concurrency=2, retry_seconds=10.0, clock=clock)


async def value(text: str) -> str:
    return text


async def test_at_most_size_runs_are_remembered_the_least_recently_asked_forgotten_first():
    cache = answers(Clock(), size=2)
    for name in ("a", "b", "c"):
        task = cache.ask((name, "r"), partial(value, name))
        assert task is not None
        await task
    assert len(cache) == 2
    assert cache.get(("a", "r")) is None
    assert [cache.get((n, "r")).value for n in ("b", "c")] == ["b", "c"]  # type: ignore[union-attr]


async def test_a_run_is_asked_once_at_a_time_and_an_answer_is_kept_while_fresh():
    clock = Clock()
    cache = answers(clock)
    release = asyncio.Event()

    async def slow() -> str:
        await release.wait()
        return "x"

    first = cache.ask(("a", "r"), slow, fresh_for=5.0)
    assert first is not None and cache.ask(("a", "r"), slow, fresh_for=5.0) is first
    release.set()
    await first
    assert cache.asked == 1
    assert cache.ask(("a", "r"), slow, fresh_for=5.0) is None  # fresh: not asked again
    clock.now = 6.0
    again = cache.ask(("a", "r"), slow, fresh_for=5.0)
    assert again is not None
    await again
    assert cache.asked == 2


async def test_a_run_that_did_not_answer_keeps_its_last_answer_and_is_asked_again_later():
    clock = Clock()
    cache = answers(clock)
    task = cache.ask(("a", "r"), lambda: value("good"))
    assert task is not None
    await task

    async def no_worker() -> str:
        raise TimeoutError("no worker")

    task = cache.ask(("a", "r"), no_worker)
    assert task is not None
    await task
    assert cache.get(("a", "r")).value == "good"  # type: ignore[union-attr]
    clock.now = 9.0
    assert cache.ask(("a", "r"), no_worker) is None  # before RETRY: not asked
    clock.now = 10.0
    assert cache.ask(("a", "r"), no_worker) is not None


async def test_a_closed_or_unlisted_run_is_forgotten_and_stop_ends_the_queries_in_flight():
    cache = answers(Clock())
    for name in ("a", "b", "c"):
        task = cache.ask((name, "r"), partial(value, name))
        assert task is not None
        await task
    cache.forget([("a", "r")])
    cache.keep_only([("b", "r")])
    assert len(cache) == 1 and cache.get(("b", "r")) is not None
    hanging = cache.ask(("d", "r"), asyncio.Event().wait)  # type: ignore[arg-type]
    assert hanging is not None
    cache.forget([("d", "r")])
    await cache.stop()
    assert hanging.cancelled()
