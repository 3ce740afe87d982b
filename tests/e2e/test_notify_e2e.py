"""People are told when a call waits for them, end to end: the real `python worker.py` with
`AGENT_NOTIFY_URL` pointing at the receiver process `python -m tests.notify_receiver` (both
started and stopped by pid), runs on the session's dev server with the offline `scripted` model.

A waiting call reaches the receiver with the right fields and so does the end of the run; a
receiver that fails twice still gets it; one that never answers holds nothing up; the Slack
format; encryption leaves the arguments out; a reminder at half the approval timeout; and the
time from a call starting to wait to the receiver getting it (median of 20, printed).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import Worker

from runtime.codec import ENV_KEY
from runtime.connect import data_converter
from tests.cli.test_starter import seed
from tests.e2e.test_llm_worker_settings import worker_env as stopped_worker_env
from tests.helpers import events, start_run, status, wait_for_phase
from tests.notify_receiver import ReceiverProcess, receiver_process
from tests.reliability.processes import ROOT, ManagedProcess, start_worker, worker_env
from workflows.contract.arguments import arguments_digest
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    AgentRunResult,
    AgentStatus,
    NotifyRequest,
    ToolApprovalResponse,
)
from workflows.run.agent import AgentWorkflow

TOKEN = "hook-token-5f1e9a7c3b2d4e6f"
INBOX = "http://inbox.example:8080"
PROMPT = "Please delete the logs folder"  # list_dir runs, then delete_path waits for a person


@dataclass
class Notifying:
    client: Client
    worker: ManagedProcess
    receiver: ReceiverProcess
    queue: str
    encrypted: bool

    async def start(
        self, options: AgentRunOptions | None = None
    ) -> WorkflowHandle[AgentWorkflow, AgentRunResult]:
        run = AgentRunInput.from_prompt(PROMPT, options)
        return await start_run(self.client, self.queue, run, f"notify-{uuid.uuid4().hex[:10]}")

    async def approve(self, handle: WorkflowHandle[Any, Any], call_id: str) -> None:
        answer = ToolApprovalResponse(call_id=call_id, approved=True, approver="ann")
        await handle.signal("tool_approval", answer)


@asynccontextmanager
async def notifying(
    client: Client, tmp_path: Path, *receiver_args: str, key: str | None = None, **extra: str
) -> AsyncIterator[Notifying]:
    """The receiver process, and a worker process that notifies it (with `key`: encryption on,
    and a client of its own with that key)."""
    key = key or os.environ.get(ENV_KEY)  # a session run with --encrypt: the same key
    async with receiver_process(*receiver_args) as receiver:
        queue = f"notify-{uuid.uuid4().hex[:8]}"
        address = client.service_client.config.target_host
        settings = {
            "AGENT_NOTIFY_URL": f"{receiver.url}/hooks/{TOKEN}",
            "AGENT_INBOX_URL": INBOX,
            **extra,
        }
        if key:
            settings[ENV_KEY] = key
        env = worker_env(
            address=address,
            task_queue=queue,
            workspace=seed(tmp_path / "workspace"),
            state_dir=tmp_path / "state",
            llm_base_url=None,  # the offline `scripted` model
            extra=settings,
        )
        worker = await start_worker("notify-worker", env, tmp_path / "logs")
        keyed = client
        if key and key != os.environ.get(ENV_KEY):
            keyed = await Client.connect(address, data_converter=data_converter({ENV_KEY: key}))
        try:
            yield Notifying(keyed, worker, receiver, queue, encrypted=bool(key))
        finally:
            worker.stop()


async def waiting_call(handle: WorkflowHandle[Any, Any]) -> AgentStatus:
    st = await wait_for_phase(handle, "awaiting_approval", timeout=60)
    assert [c.name for c in st.pending_approvals] == ["delete_path"]
    return st


def when(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def finish(*handles: WorkflowHandle[Any, Any]) -> None:
    """Leave nothing running on the dev server (a terminated run notifies nobody)."""
    for handle in handles:
        try:
            await handle.terminate("test over")
        except Exception:  # already closed
            pass


async def test_a_waiting_call_reaches_the_receiver_and_so_does_the_end(client, tmp_path):
    async with notifying(client, tmp_path) as n:
        handle = await n.start()
        st = await waiting_call(handle)
        [post] = await n.receiver.wait_for(1)
        call = st.pending_approvals[0]
        expected: dict[str, Any] = {
            "event": "approval_waiting",
            "workflow_id": handle.id,
            "run_id": st.run_id,
            "call_id": call.id,
            "tool": "delete_path",
            "arguments": {"path": "logs"},
            "arguments_sha256": arguments_digest({"path": "logs"}),
            "url": f"{INBOX}/runs/{handle.id}",
        }
        if n.encrypted:
            del expected["arguments"], expected["arguments_sha256"]
        body = post["body"]
        assert {k: v for k, v in body.items() if k != "waiting_since"} == expected
        assert st.awaiting_since is not None
        assert when(body["waiting_since"]) == pytest.approx(st.awaiting_since.timestamp(), abs=1e-3)
        assert post["path"] == f"/hooks/{TOKEN}"
        assert st.run_id == handle.first_execution_run_id

        await n.approve(handle, call.id)
        result = await handle.result()
        assert result.finish_reason == "stop"
        posts = await n.receiver.wait_for(2)
        assert posts[1]["body"] == {
            "event": "run_finished",
            "workflow_id": handle.id,
            "run_id": st.run_id,
            "finish_reason": "stop",
            **({} if n.encrypted else {"error": None}),
            "url": f"{INBOX}/runs/{handle.id}",
        }
        assert not [e for e in await events(handle) if e.type == "warning"]


async def test_the_receiver_fails_twice_and_still_gets_it(client, tmp_path):
    async with notifying(client, tmp_path, "--fail-first", "2") as n:
        handle = await n.start()
        try:
            await waiting_call(handle)
            posts = await n.receiver.wait_for(3, timeout=60)
            assert [p["status"] for p in posts] == [500, 500, 200]
            assert posts[0]["body"] == posts[1]["body"] == posts[2]["body"]
            assert posts[0]["body"]["event"] == "approval_waiting"
            # Temporal's backoff: 1 s, then 2 s (the first retry at ~1 s, the second ~2 s later)
            gaps = [b["received_at"] - a["received_at"] for a, b in itertools.pairwise(posts)]
            assert 0.8 < gaps[0] < 5 and 1.7 < gaps[1] < 8, gaps
            # the run waited for its person all along, and no warning: it was delivered
            assert (await status(handle)).phase == "awaiting_approval"
            assert not [e for e in await events(handle) if e.type == "warning"]
        finally:
            await finish(handle)


async def test_a_short_retry_after_does_not_hurry_the_retries(client, tmp_path):
    """A receiver answering `429` with `Retry-After: 1` three times: the attempts still follow
    Temporal's backoff (1 s, 2 s, 4 s), not one a second."""
    async with notifying(
        client, tmp_path, "--fail-first", "3", "--fail-status", "429", "--retry-after", "1"
    ) as n:
        handle = await n.start()
        try:
            await waiting_call(handle)
            posts = await n.receiver.wait_for(4, timeout=60)
            assert [p["status"] for p in posts] == [429, 429, 429, 200]
            gaps = [b["received_at"] - a["received_at"] for a, b in itertools.pairwise(posts)]
            assert all(gap > 0.8 * 2**i for i, gap in enumerate(gaps)), gaps
        finally:
            await finish(handle)


async def test_a_receiver_that_never_answers_holds_nothing_up(client, tmp_path):
    async with notifying(client, tmp_path, "--hang") as n:
        handle = await n.start()
        try:
            st = await waiting_call(handle)
            [post] = await n.receiver.wait_for(1)
            assert post["status"] is None  # it hangs
            approved = time.monotonic()
            await n.approve(handle, st.pending_approvals[0].id)
            result = await handle.result()
            took = time.monotonic() - approved
            assert result.finish_reason == "stop"
            assert took < 10, took  # an attempt alone lasts 10 s: the run did not wait for it
        finally:
            await finish(handle)


def peak_rss_mib(pid: int) -> float:
    """The highest resident memory the process has had so far (`VmHWM`), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


async def slowest_query(handle: WorkflowHandle[Any, Any], seconds: float) -> float:
    """The longest a `status` query took, asked again and again for `seconds`."""
    slowest = 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        asked = time.monotonic()
        await status(handle)
        slowest = max(slowest, time.monotonic() - asked)
        await asyncio.sleep(0.05)
    return slowest


async def test_a_receiver_answering_a_huge_body_stalls_nothing(client, tmp_path):
    """A receiver that answers HTTP 500 with 200 MiB: the worker reads at most 64 KiB of it,
    its memory hardly grows, and it answers every query within 1 s meanwhile (attempts are
    made at 0, 1, 3 and 7 s of the watch)."""
    async with notifying(client, tmp_path, "--huge-body", "200") as n:
        before = peak_rss_mib(n.worker.pid)
        handle = await n.start()
        try:
            await waiting_call(handle)
            slowest = await slowest_query(handle, 10.0)
            posts = await n.receiver.wait_for(3, timeout=30)
            grew = peak_rss_mib(n.worker.pid) - before
            sent = [p["sent_bytes"] for p in posts]
            print(f"\nhuge body: slowest query {slowest:.3f} s, RSS +{grew:.0f} MiB, sent {sent}")
            assert slowest < 1.0, slowest
            assert grew < 64, grew
            # the socket buffers take a few MiB before the receiver notices the hang-up
            assert all(s < 16 * 1024 * 1024 for s in sent), sent
            assert (await status(handle)).phase == "awaiting_approval"
        finally:
            await finish(handle)


async def test_the_slack_format(client, tmp_path):
    async with notifying(client, tmp_path, AGENT_NOTIFY_FORMAT="slack") as n:
        handle = await n.start()
        try:
            st = await waiting_call(handle)
            [post] = await n.receiver.wait_for(1)
            call_id = st.pending_approvals[0].id
            pin = f"call `{call_id}`, run id `{st.run_id}`"
            arguments = ""
            if not n.encrypted:
                pin += f", sha256 `{arguments_digest({'path': 'logs'})}`"
                arguments = ': `{"path": "logs"}`'
            assert post["body"] == {
                "text": ":hourglass_flowing_sand: `delete_path` is waiting for approval in run"
                f" <{INBOX}/runs/{handle.id}|{handle.id}> ({pin}){arguments}"
            }
        finally:
            await finish(handle)


async def test_with_encryption_the_arguments_are_left_out(client, tmp_path):
    key = base64.b64encode(os.urandom(32)).decode()
    async with notifying(client, tmp_path, key=key) as n:
        handle = await n.start()
        try:
            st = await waiting_call(handle)
            [post] = await n.receiver.wait_for(1)
            body = post["body"]
            assert "arguments" not in body
            assert body["tool"] == "delete_path"
            assert body["call_id"] == st.pending_approvals[0].id
            assert "logs" not in str(body)
        finally:
            await finish(handle)


async def test_a_reminder_at_half_the_approval_timeout(client, tmp_path):
    options = AgentRunOptions(approval_timeout_seconds=4, on_approval_timeout="reject")
    async with notifying(client, tmp_path) as n:
        handle = await n.start(options)
        try:
            await waiting_call(handle)
            result = await handle.result()
            assert result.finish_reason == "stop"  # the timeout rejected; the model answered
            posts = await n.receiver.wait_for(3)
            bodies = [p["body"] for p in posts]
            assert [b["event"] for b in bodies] == [
                "approval_waiting",
                "approval_reminder",
                "run_finished",
            ]
            assert bodies[1]["waiting_since"] == bodies[0]["waiting_since"]
            assert bodies[1]["call_id"] == bodies[0]["call_id"]
            reminded_after = posts[1]["received_at"] - when(bodies[0]["waiting_since"])
            assert 1.5 < reminded_after < 3.5, reminded_after
        finally:
            await finish(handle)


async def test_escalation_and_expiry_reach_the_receiver(client, tmp_path):
    """The worker's defaults (AGENT_ESCALATE_AFTER_SECONDS=1, AGENT_ESCALATE_TO=ops,oncall) reach
    the run: after a second the call is escalated (an `approval_escalated` event, the groups in
    the status and in the POST); at its two-second timeout it expires (`approval_expired`, the
    default of new runs): nothing rejected, the run waits on."""
    options = AgentRunOptions(approval_timeout_seconds=2)
    extra = {"AGENT_ESCALATE_AFTER_SECONDS": "1", "AGENT_ESCALATE_TO": "ops,oncall"}
    async with notifying(client, tmp_path, **extra) as n:
        handle = await n.start(options)
        try:
            call_id = (await waiting_call(handle)).pending_approvals[0].id
            st = await wait_for_phase(handle, "approval_expired", timeout=60)
            assert st.expired == [call_id]
            assert st.escalations == {call_id: ["ops", "oncall"]}
            posts = await n.receiver.wait_for(4, timeout=60)  # and the reminder at half the timeout
            bodies = {p["body"]["event"]: p["body"] for p in posts}
            assert set(bodies) == {
                "approval_waiting",
                "approval_reminder",
                "approval_escalated",
                "approval_expired",
            }
            assert bodies["approval_escalated"]["groups"] == ["ops", "oncall"]
            assert bodies["approval_escalated"]["call_id"] == call_id
            assert bodies["approval_expired"]["call_id"] == call_id
            assert "groups" not in bodies["approval_expired"]
            evs = await events(handle)
            [escalated] = [e for e in evs if e.type == "approval_escalated"]
            assert (escalated.call_ids, escalated.groups) == ([call_id], ["ops", "oncall"])
            assert not [e for e in evs if e.type in ("approval", "finished", "warning")]
        finally:
            await finish(handle)


async def test_time_from_a_call_waiting_to_the_receiver_getting_it(client, tmp_path):
    async with notifying(client, tmp_path) as n:
        delays: list[float] = []
        handles = []
        for count in range(1, 21):
            handle = await n.start()
            handles.append(handle)
            post = (await n.receiver.wait_for(count, timeout=60))[-1]
            assert post["body"]["workflow_id"] == handle.id
            delays.append(post["received_at"] - when(post["body"]["waiting_since"]))
            await finish(handle)
    median = statistics.median(delays)
    print(
        f"\nnotify latency over {len(delays)} runs: median {median * 1000:.0f} ms,"
        f" min {min(delays) * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms"
    )
    assert all(d > 0 for d in delays), delays
    assert median < 5, delays


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("AGENT_NOTIFY_URL", f"ftp://hooks.example/{TOKEN}", "AGENT_NOTIFY_URL must be an http"),
        ("AGENT_NOTIFY_FORMAT", "teams", "AGENT_NOTIFY_FORMAT must be one of json, slack"),
        ("AGENT_NOTIFY_ARGUMENTS", "sure", "AGENT_NOTIFY_ARGUMENTS must be true or false"),
        ("AGENT_INBOX_URL", "https://inbox.example/?t=1", "AGENT_INBOX_URL must be"),
    ],
)
def test_a_notify_setting_the_worker_cannot_use_stops_it(tmp_path, variable, value, says):
    env = stopped_worker_env(tmp_path, **{variable: value})
    done = subprocess.run(
        [sys.executable, "worker.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"worker: {says}"), line
    assert TOKEN not in line


async def test_a_notification_started_directly_sends_nothing(client, tmp_path):
    """A namespace client starts `AgentNotification` itself, with text of its own: the worker
    fails that run before any activity, and the receiver gets nothing."""
    forged = NotifyRequest(
        event="run_finished",
        workflow_id="payroll-run",
        run_id="r1",
        finish_reason="error",
        error="Payroll failed: sign in again at http://evil.example/login",
    )
    async with notifying(client, tmp_path) as n:
        for workflow_id in (f"forged-{uuid.uuid4().hex[:8]}", "payroll-run/notify/r1"):
            handle = await n.client.start_workflow(
                "AgentNotification", forged, id=workflow_id, task_queue=n.queue
            )
            with pytest.raises(WorkflowFailureError) as failed:
                await asyncio.wait_for(handle.result(), 30)
            cause = failed.value.cause
            assert isinstance(cause, ApplicationError), cause
            assert cause.type == "NotificationRefused" and "sent nothing" in cause.message
            history = await handle.fetch_history()
            assert not [
                e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
            ]
        await asyncio.sleep(1.0)
        assert await n.receiver.received() == []


@workflow.defn(name="Payroll", sandboxed=False)
class ForeignWorkflow:
    """A namespace client's own workflow, on a worker of its own, asking the agent's worker to
    run `notify` (an activity it can schedule on any task queue)."""

    @workflow.run
    async def run(self, request: NotifyRequest, queue: str) -> None:
        await workflow.execute_activity(
            "notify",
            request,
            task_queue=queue,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )


async def test_another_workflow_cannot_have_the_worker_notify(client, tmp_path):
    """A workflow of another type schedules `notify` on the agent's task queue, about a run of
    its choosing: the real worker refuses it, and the receiver gets nothing."""
    forged = NotifyRequest(
        event="approval_waiting",
        workflow_id="payroll-run",
        run_id="r1",
        call_id="call_1",
        tool="delete_path",
        arguments='{"path": "http://evil.example/login"}',
    )
    async with notifying(client, tmp_path) as n:
        own_queue = f"foreign-{uuid.uuid4().hex[:8]}"
        async with Worker(n.client, task_queue=own_queue, workflows=[ForeignWorkflow]):
            with pytest.raises(WorkflowFailureError) as failed:
                await n.client.execute_workflow(
                    "Payroll",
                    args=[forged, n.queue],
                    id=f"payroll-{uuid.uuid4().hex[:8]}",
                    task_queue=own_queue,
                    execution_timeout=timedelta(seconds=60),
                )
        cause = failed.value.cause
        assert isinstance(cause, ActivityError), cause
        assert isinstance(cause.cause, ApplicationError) and cause.cause.type == "NotifyRefused"
        await asyncio.sleep(1.0)
        assert await n.receiver.received() == []
