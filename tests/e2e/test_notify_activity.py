"""The `notify` activity (through `temporalio.testing.ActivityEnvironment`) against a real receiver
process on 127.0.0.1 (`python -m tests.notify_receiver`, started and stopped by pid): what it
POSTs, which failures are worth retrying, and that neither the URL's token nor the LLM key ever
goes out or shows in an error or a log line."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import httpx
import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.agent_activities import AgentActivities
from activities.notify import Notifier
from activities.tools import ToolRegistry
from runtime.settings import Settings
from tests.notify_receiver import receiver_process
from tests.ports import free_port
from workflows.contract.arguments import arguments_digest
from workflows.model import NotifyRequest

TOKEN = "T0KEN-b7f3c9a1d2e4f6a8b0c2"
LLM_KEY = "sk-notify-test-never-sent"
SINCE = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)


def waiting(**fields: object) -> NotifyRequest:
    values: dict[str, object] = {
        "event": "approval_waiting",
        "workflow_id": "agent-7",
        "run_id": "run-first",
        "call_id": "call_2",
        "tool": "delete_path",
        "arguments": '{"path": "logs"}',
        "waiting_since": SINCE,
    }
    values.update(fields)
    return NotifyRequest.model_validate(values)


def settings(tmp_path: Path, url: str, **env: str) -> Settings:
    return Settings.from_env(
        {
            "AGENT_WORKSPACE": str(tmp_path / "ws"),
            "AGENT_NOTIFY_URL": url,
            "LLM_BASE_URL": "http://127.0.0.1:9/v1",
            "LLM_API_KEY": LLM_KEY,
            **env,
        }
    )


def environment(attempt: int = 1) -> ActivityEnvironment:
    """The activity as the run `agent-7` (the one `waiting()` is about) schedules it."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, attempt=attempt, workflow_type="AgentWorkflow", workflow_id="agent-7"
    )
    return env


async def notify(
    tmp_path: Path, url: str, request: NotifyRequest, *, attempt_seconds: float = 20.0, **env: str
) -> None:
    async with httpx.AsyncClient() as http:
        notifier = Notifier(http, settings(tmp_path, url, **env), attempt_seconds=attempt_seconds)
        await environment().run(notifier.notify, request)


async def failure(tmp_path: Path, url: str, attempt_seconds: float = 20.0) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await notify(tmp_path, url, waiting(), attempt_seconds=attempt_seconds)
    return caught.value


async def test_a_waiting_call_is_posted_as_json_with_every_field(tmp_path):
    async with receiver_process() as receiver:
        await notify(
            tmp_path,
            f"{receiver.url}/hooks/{TOKEN}",
            waiting(),
            AGENT_INBOX_URL="https://inbox.example/agent/",
        )
        [post] = await receiver.received()
    assert post["path"] == f"/hooks/{TOKEN}"
    assert post["content_type"].startswith("application/json")
    assert post["body"] == {
        "event": "approval_waiting",
        "workflow_id": "agent-7",
        "run_id": "run-first",
        "call_id": "call_2",
        "tool": "delete_path",
        "arguments": {"path": "logs"},
        "arguments_sha256": arguments_digest({"path": "logs"}),
        "waiting_since": "2026-03-04T05:06:07Z",
        "url": "https://inbox.example/agent/runs/agent-7",
    }


async def test_the_slack_format_posts_one_line_of_text(tmp_path):
    async with receiver_process() as receiver:
        await notify(
            tmp_path,
            receiver.url,
            waiting(),
            AGENT_NOTIFY_FORMAT="slack",
            AGENT_INBOX_URL="http://inbox.local:8080",
        )
        [post] = await receiver.received()
    assert post["body"] == {
        "text": ":hourglass_flowing_sand: `delete_path` is waiting for approval in run"
        " <http://inbox.local:8080/runs/agent-7|agent-7> (call `call_2`, run id `run-first`,"
        f' sha256 `{arguments_digest({"path": "logs"})}`): `{{"path": "logs"}}`'
    }


async def test_with_encryption_the_arguments_stay_home_unless_allowed(tmp_path):
    key = base64.b64encode(os.urandom(32)).decode()
    async with receiver_process() as receiver:
        await notify(tmp_path, receiver.url, waiting(), AGENT_ENCRYPTION_KEY=key)
        await notify(
            tmp_path,
            receiver.url,
            waiting(),
            AGENT_ENCRYPTION_KEY=key,
            AGENT_NOTIFY_ARGUMENTS="true",
        )
        sealed, allowed = [p["body"] for p in await receiver.received()]
    assert "arguments" not in sealed
    assert sealed["call_id"] == "call_2" and sealed["tool"] == "delete_path"
    assert allowed["arguments"] == {"path": "logs"}


async def test_no_secret_goes_out_even_when_the_arguments_quote_it(tmp_path):
    leaky = {"command": f"curl -H 'Authorization: Bearer {LLM_KEY}' http://x/hooks/{TOKEN}"}
    async with receiver_process() as receiver:
        await notify(tmp_path, f"{receiver.url}/hooks/{TOKEN}", waiting(arguments=leaky))
        [post] = await receiver.received()
    sent = str(post["body"])
    assert LLM_KEY not in sent
    assert TOKEN not in sent
    assert post["body"]["arguments"]["command"].startswith(
        "curl -H 'Authorization: Bearer [redacted]"
    )


async def test_a_failing_receiver_is_retryable_and_the_error_never_shows_the_token(tmp_path):
    async with receiver_process("--fail-first", "1") as receiver:
        url = (
            f"http://ann:pw-{TOKEN}@{receiver.url.removeprefix('http://')}/hooks/{TOKEN}?t={TOKEN}"
        )
        error = await failure(tmp_path, url)
        await notify(tmp_path, url, waiting())  # the second attempt is answered 200
        posts = await receiver.received()
    assert not error.non_retryable
    assert error.type == "NotifyHttp500"
    assert "answered HTTP 500: failing on purpose" in error.message
    assert TOKEN not in error.message
    assert [p["status"] for p in posts] == [500, 200]
    assert posts[0]["body"] == posts[1]["body"]


@pytest.mark.parametrize(
    ("status", "retried"),
    [
        (400, False),
        (403, False),
        (404, False),
        (410, False),
        (302, False),
        (408, True),
        (429, True),
        (503, True),
    ],
)
async def test_a_refusal_is_final_and_a_passing_failure_is_retried(tmp_path, status, retried):
    async with receiver_process("--fail-first", "1", "--fail-status", str(status)) as receiver:
        error = await failure(tmp_path, f"{receiver.url}/hooks/{TOKEN}")
    assert error.type == f"NotifyHttp{status}"
    assert error.non_retryable is (not retried)
    assert f"HTTP {status}" in error.message
    assert TOKEN not in error.message


async def test_retry_after_is_honoured_up_to_five_minutes(tmp_path):
    async with receiver_process(
        "--fail-first", "2", "--fail-status", "429", "--retry-after", "7"
    ) as r:
        soon = await failure(tmp_path, r.url)
    assert soon.next_retry_delay == timedelta(seconds=7)
    async with receiver_process(
        "--fail-first", "1", "--fail-status", "503", "--retry-after", "86400"
    ) as r:
        capped = await failure(tmp_path, r.url)
    assert capped.next_retry_delay == timedelta(minutes=5)


@pytest.mark.parametrize(("attempt", "at_least"), [(1, 1), (4, 8), (7, 64), (30, 300)])
async def test_retry_after_never_shortens_the_backoff(tmp_path, attempt, at_least):
    """`Retry-After: 1` from a failing receiver: the next attempt still waits the policy's
    backoff (1 s, 2 s, … up to 5 minutes), so after the first five minutes there is never more
    than one attempt a minute."""
    env = environment(attempt)
    async with receiver_process(
        "--fail-status", "429", "--fail-first", "1", "--retry-after", "1"
    ) as r:
        async with httpx.AsyncClient() as http:
            notifier = Notifier(http, settings(tmp_path, r.url))
            with pytest.raises(ApplicationError) as caught:
                await env.run(notifier.notify, waiting())
    assert caught.value.next_retry_delay == timedelta(seconds=at_least)


async def test_a_huge_answer_is_read_only_to_64_kib(tmp_path):
    """A receiver answering 500 with 200 MiB: the attempt ends at once with a short excerpt;
    the receiver could hand over only what the socket buffers hold."""
    async with receiver_process("--huge-body", "200") as receiver:
        started = time.monotonic()
        error = await failure(tmp_path, receiver.url)
        took = time.monotonic() - started
        await asyncio.sleep(0.5)
        [post] = await receiver.received()
    assert error.type == "NotifyHttp500" and not error.non_retryable
    assert "boom \\u001b[31mxxx" in error.message and len(error.message) < 400
    assert took < 2, took
    assert post["sent_bytes"] < 16 * 1024 * 1024, post


async def test_a_refused_connection_is_retryable_and_names_no_secret(tmp_path):
    port = free_port()  # nobody listens there
    error = await failure(tmp_path, f"http://ann:{TOKEN}@127.0.0.1:{port}/hooks/{TOKEN}")
    assert error.type == "NotifyConnectionError"
    assert not error.non_retryable
    assert f"http://127.0.0.1:{port}/…" in error.message
    assert TOKEN not in error.message


async def test_a_receiver_that_never_answers_is_a_timeout_retried_later(tmp_path):
    async with receiver_process("--hang") as receiver:
        started = time.monotonic()
        error = await failure(tmp_path, f"{receiver.url}/{TOKEN}", attempt_seconds=1.0)
        took = time.monotonic() - started
        [post] = await receiver.received()
    assert error.type == "NotifyTimeout"
    assert not error.non_retryable
    assert took < 5
    assert post["status"] is None and post["body"]["event"] == "approval_waiting"


async def test_an_answer_that_never_ends_is_cut_at_the_attempt_time(tmp_path):
    async with receiver_process("--trickle") as receiver:
        started = time.monotonic()
        error = await failure(tmp_path, receiver.url, attempt_seconds=1.0)
        took = time.monotonic() - started
    assert error.type == "NotifyTimeout"
    assert not error.non_retryable
    assert took < 3, took


async def test_the_http_library_logs_never_show_the_token(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="httpx")
    caplog.set_level(logging.DEBUG, logger="httpcore")
    async with receiver_process() as receiver:
        await notify(tmp_path, f"{receiver.url}/services/T01/B02/{TOKEN}", waiting())
    assert f"HTTP Request: POST {receiver.url}" in caplog.text
    assert TOKEN not in caplog.text


async def test_a_worker_without_a_url_refuses_for_good(tmp_path):
    async with httpx.AsyncClient() as http:
        plain = Settings.from_env({"AGENT_WORKSPACE": str(tmp_path / "ws")})
        notifier = Notifier(http, plain)
        assert not notifier.enabled
        with pytest.raises(ApplicationError) as caught:
            await environment().run(notifier.notify, waiting())
    assert caught.value.type == "NotifyNotConfigured"
    assert caught.value.non_retryable


async def test_the_worker_registers_notify_and_tells_the_workflow_it_notifies(tmp_path):
    with_url = settings(tmp_path, "http://127.0.0.1:9/hook")
    acts = AgentActivities(cast(Client, None), with_url, ToolRegistry([]))
    try:
        assert "notify" in [f.__name__ for f in acts.all()]
        setup = await ActivityEnvironment().run(acts.worker_setup)
    finally:
        await acts.aclose()
    assert setup.notify is True
