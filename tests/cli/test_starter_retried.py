"""`python -m starter --json watch` says a model call "was retried" only when one was: a streamed
answer that arrived in one attempt shows no such notice; an answer whose first attempt was cut
off mid-stream shows it once. The real `starter` subprocess, an in-process worker with the real
activities and the OpenAI-compatible test server streaming slowly enough for the follower to
attach while the text is generated (live batches, not the closed run's record)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from temporalio.client import Client

from tests.cli.test_starter_live import watching
from tests.fake_openai import CutOff, Slow

RETRIED = "was retried"


async def json_watch(client: Client, task_queue: str, tmp_path: Path, *replies: Any) -> str:
    """What `--json watch` prints (stdout and stderr) of a run whose model gives `replies`."""
    async with watching(client, task_queue, tmp_path, replies, "--json") as (_, proc):
        out, err = await asyncio.wait_for(proc.communicate(), 90)
    said = out.decode() + err.decode()
    assert '"finish_reason": "stop"' in said or '"finish_reason":"stop"' in said, said
    return said


async def test_a_streamed_answer_in_one_attempt_says_nothing_of_a_retry(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    said = await json_watch(client, task_queue, tmp_path, Slow(chunks=60, delay=0.1))
    assert "tick" in said
    assert RETRIED not in said, said


async def test_an_answer_cut_off_and_tried_again_says_so_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    said = await json_watch(
        client,
        task_queue,
        tmp_path,
        CutOff(after_chunks=10, delay=0.3),
        Slow(chunks=30, delay=0.1),
    )
    assert said.count(RETRIED) == 1, said
