"""Faults with real processes: `python worker.py` subprocesses killed with SIGKILL mid-call, two
workers on one queue, a dev server (with a database file) stopped and restarted mid-run, and an
LLM server (`python -m tests.fake_openai`) that drops connections, answers 500/429, or is slow.

Each test checks that the run then finishes correctly and that nothing was lost: every tool call
has exactly one tool message, a tool that is not safe to retry ran at most once (side effects
counted in the workspace), and every request the LLM server received kept the ordering invariant.
Each test records what it did and saw in results.json (see report.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from activities.scripted import HELP_TEXT
from runtime.connect import data_converter
from tests.helpers import messages, status, wait_until
from tests.reliability.agents import (
    approval_json,
    finished_well,
    openai_to_chat,
    wait_pending,
)
from tests.reliability.conftest import ResultRow
from tests.reliability.processes import (
    WORKER_CLEAN_EXIT_CODES,
    DevServer,
    FakeLLMProcess,
    ManagedProcess,
    signal_cli,
    start_worker,
    worker_env,
)
from workflows.conversation.record import invariant_violations
from workflows.model import AgentRunInput, AgentRunResult, ChatMessage
from workflows.run.agent import AgentWorkflow

SIDE_EFFECTS = "side_effects.txt"


@dataclass
class Rig:
    """The processes of one fault test: a fake LLM process and worker subprocesses on a fresh
    task queue, all stopped at teardown."""

    address: str
    queue: str
    workspace: Path
    state: Path
    logs: Path
    fake: FakeLLMProcess
    workers: list[ManagedProcess] = field(default_factory=list)
    killed: set[int] = field(default_factory=set)

    async def start_worker(
        self, name: str = "worker", address: str | None = None
    ) -> ManagedProcess:
        env = worker_env(
            address=address or self.address,
            task_queue=self.queue,
            workspace=self.workspace,
            state_dir=self.state,
            llm_base_url=self.fake.base_url,
        )
        worker = await start_worker(name, env, self.logs)
        self.workers.append(worker)
        return worker

    def kill(self, worker: ManagedProcess) -> None:
        worker.kill()
        self.killed.add(worker.pid)

    def stop_workers(self) -> dict[int, int | None]:
        """SIGTERM every worker still running; their exit codes by pid."""
        return {w.pid: w.stop() for w in self.workers if w.pid not in self.killed}

    def side_effect_lines(self) -> list[str]:
        path = self.workspace / SIDE_EFFECTS
        return path.read_text().splitlines() if path.exists() else []

    async def check_requests(self, row: ResultRow) -> list[dict[str, Any]]:
        """Every request the LLM server received keeps the ordering invariant."""
        requests = await self.fake.requests()
        for number, body in enumerate(requests):
            problems = invariant_violations(openai_to_chat(body["messages"]), allow_open_tail=False)
            assert problems == [], f"request {number}: {problems}"
        row.saw(f"LLM server received {len(requests)} request(s)")
        row.checked(f"ordering invariant held in all {len(requests)} LLM request(s)")
        return requests


@pytest.fixture
async def rig(env_address: str, tmp_dirs: dict[str, Path]) -> AsyncIterator[Rig]:
    fake = FakeLLMProcess(tmp_dirs["logs"])
    setup = Rig(
        address=env_address,
        queue=f"rel-fault-{uuid.uuid4().hex[:10]}",
        workspace=tmp_dirs["workspace"],
        state=tmp_dirs["state"],
        logs=tmp_dirs["logs"],
        fake=fake,
    )
    try:
        await fake.ready()
        yield setup
    finally:
        setup.stop_workers()
        fake.stop()


async def start(
    client: Client, queue: str, prompt: str
) -> WorkflowHandle[AgentWorkflow, AgentRunResult]:
    return await client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(messages=[ChatMessage.user(prompt)]),
        id=f"rel-fault-{uuid.uuid4().hex[:10]}",
        task_queue=queue,
    )


async def common_checks(
    row: ResultRow, rig: Rig, handle: WorkflowHandle[AgentWorkflow, AgentRunResult]
) -> AgentRunResult:
    result, log = await finished_well(handle, "stop", timeout=120)
    row.saw(f"finish_reason={result.finish_reason}, rounds={result.rounds}, events={len(log)}")
    assert invariant_violations(result.messages, allow_open_tail=False) == []
    row.checked(
        "run finished `stop`; queries answer afterwards; every tool call has one tool message"
    )
    await rig.check_requests(row)
    return result


async def wait_slow_chunks(fake: FakeLLMProcess, count: int, timeout: float = 30.0) -> None:
    async def check() -> bool:
        counters = (await fake.snapshot()).get("counters", {})
        return int(counters.get("slow_chunks_sent", 0)) >= count

    await wait_until(check, timeout, interval=0.1)


def check_clean_exits(row: ResultRow, rig: Rig) -> None:
    codes = rig.stop_workers()
    row.saw(f"surviving worker(s) exit codes after SIGTERM: {sorted(codes.values(), key=str)}")
    assert all(code in WORKER_CLEAN_EXIT_CODES for code in codes.values()), codes
    row.checked("surviving workers stopped gracefully on SIGTERM (exit 0)")


async def pending_activity(handle: WorkflowHandle[Any, Any]) -> tuple[str, str] | None:
    """(activity type, last worker identity) of the run's started activity, if any."""
    description = await handle.describe()
    for item in description.raw_description.pending_activities:
        if item.last_worker_identity:
            return item.activity_type.name, item.last_worker_identity
    return None


# ---------------------------------------------------------------- worker crashes


@pytest.mark.slow
async def test_worker_killed_during_llm_call(client: Client, rig: Rig, record: Any) -> None:
    row = record("faults", "Worker SIGKILLed during an LLM call (slow stream), new worker started")
    await rig.fake.enqueue({"kind": "slow", "chunks": 60, "delay": 0.1})
    first = await rig.start_worker("worker-a")
    handle = await start(client, rig.queue, "hello there")
    await wait_slow_chunks(rig.fake, 5)
    rig.kill(first)
    row.did("LLM reply streams 60 chunks 0.1 s apart; SIGKILL the worker after 5 chunks")
    killed_at = time.monotonic()
    await rig.start_worker("worker-b")
    row.did("start a new `python worker.py`")
    result = await common_checks(row, rig, handle)
    waited = time.monotonic() - killed_at
    row.saw(f"run finished {waited:.0f} s after the kill (call_llm heartbeat timeout is 60 s)")
    requests = await rig.fake.requests()
    assert len(requests) == 2
    assert result.messages[-1].content == HELP_TEXT
    row.checked("the LLM call was retried once on the new worker; its reply ended the run")
    check_clean_exits(row, rig)


@pytest.mark.slow
async def test_worker_killed_during_tool_call(client: Client, rig: Rig, record: Any) -> None:
    row = record("faults", "Worker SIGKILLed during a run_command (not safe to retry)")
    first = await rig.start_worker("worker-a")
    command = f"sleep 3; echo x >> {SIDE_EFFECTS}"
    handle = await start(client, rig.queue, f"run: {command}")
    pending = await wait_pending(handle)
    result = await signal_cli(rig.address, handle.id, "tool_approval", approval_json(pending[0].id))
    assert result.returncode == 0, result.summary()
    row.did(f"approve `{command}` with `temporal workflow signal`")
    markers = rig.state / "tool-calls"
    await wait_until(lambda: markers.exists() and any(markers.iterdir()), 30)
    await asyncio.sleep(0.5)
    rig.kill(first)
    row.did("SIGKILL the worker while the command sleeps; start a new worker")
    await rig.start_worker("worker-b")
    final = await common_checks(row, rig, handle)
    tool = [m for m in final.messages if m.role == "tool"]
    assert len(tool) == 1
    row.saw(f"tool message: {tool[0].content}")
    assert "Framework error: tool execution failed" in tool[0].content
    assert "timeout" in tool[0].content.lower()
    row.checked("the interrupted call got an error tool message (heartbeat timeout), not a rerun")
    await asyncio.sleep(3.5)  # let the orphaned shell of the killed worker finish, if it lives
    lines = rig.side_effect_lines()
    row.saw(f"side effects: {len(lines)} line(s) in {SIDE_EFFECTS}")
    assert len(lines) <= 1
    row.checked("the command ran at most once")
    check_clean_exits(row, rig)


@pytest.mark.slow
async def test_worker_killed_while_awaiting_approval(client: Client, rig: Rig, record: Any) -> None:
    row = record("faults", "Worker SIGKILLed while the run waits for approval")
    first = await rig.start_worker("worker-a")
    handle = await start(client, rig.queue, f"run: echo once >> {SIDE_EFFECTS}")
    pending = await wait_pending(handle)
    rig.kill(first)
    row.did("SIGKILL the only worker during the approval wait; start a new worker")
    await rig.start_worker("worker-b")
    result = await signal_cli(rig.address, handle.id, "tool_approval", approval_json(pending[0].id))
    assert result.returncode == 0, result.summary()
    row.did("approve with `temporal workflow signal`")
    final = await common_checks(row, rig, handle)
    lines = rig.side_effect_lines()
    row.saw(f"side effects: {len(lines)} line(s); last message: {final.messages[-1].content!r}")
    assert lines == ["once"]
    row.checked("the approved command ran exactly once")
    check_clean_exits(row, rig)


@pytest.mark.slow
async def test_two_workers_one_killed_mid_call(client: Client, rig: Rig, record: Any) -> None:
    row = record("faults", "Two workers on one queue; the one running the LLM call is SIGKILLed")
    workers = [await rig.start_worker("worker-a"), await rig.start_worker("worker-b")]
    await rig.fake.enqueue({"kind": "slow", "chunks": 60, "delay": 0.1})
    handle = await start(client, rig.queue, "list")
    await wait_slow_chunks(rig.fake, 5)
    found = await pending_activity(handle)
    assert found is not None and found[0] == "call_llm", found
    pid = int(found[1].split("@")[0])
    victim = next(w for w in workers if w.pid == pid)
    rig.kill(victim)
    row.did(f"slow LLM reply; SIGKILL the worker that runs call_llm ({victim.name}); no restart")
    result = await common_checks(row, rig, handle)
    survivor = next(w for w in workers if w is not victim)
    assert survivor.proc.poll() is None
    found_after = await pending_activity(handle)
    assert found_after is None
    tool = [m for m in result.messages if m.role == "tool"]
    assert len(tool) == 1 and '"ok": true' in tool[0].content
    row.saw(f"the other worker ({survivor.name}) finished the run: {len(result.messages)} messages")
    row.checked("the surviving worker retried the LLM call and ran list_dir once")
    check_clean_exits(row, rig)


# ---------------------------------------------------------------- server restart


@pytest.mark.slow
async def test_server_restart_while_awaiting_approval(
    rig: Rig, tmp_dirs: dict[str, Path], record: Any
) -> None:
    row = record("faults", "Dev server (database file) stopped and restarted during an approval")
    server = DevServer(db_file=tmp_dirs["db"] / "t.db", log_dir=tmp_dirs["logs"])
    await server.start()
    try:
        client = await Client.connect(server.address, data_converter=data_converter())
        await rig.start_worker("worker-a", address=server.address)
        handle = await start(client, rig.queue, f"run: echo restarted >> {SIDE_EFFECTS}")
        pending = await wait_pending(handle)
        code = server.stop()
        row.did(f"SIGTERM the dev server (exit {code}) during the approval wait; start it again")
        await asyncio.sleep(1)
        await server.start()
        client = await Client.connect(server.address, data_converter=data_converter())
        handle = client.get_workflow_handle_for(AgentWorkflow.run, handle.id)
        after = await wait_until(lambda: _status_or_none(handle), 60, interval=0.5)
        assert after.phase == "awaiting_approval"
        assert [c.id for c in after.pending_approvals] == [pending[0].id]
        row.saw("after the restart the run still awaits the same call")
        worker_alive = rig.workers[0].proc.poll() is None
        row.saw(f"worker survived the restart: {worker_alive}")
        if not worker_alive:
            await rig.start_worker("worker-b", address=server.address)
        result = await signal_cli(
            server.address, handle.id, "tool_approval", approval_json(pending[0].id)
        )
        assert result.returncode == 0, result.summary()
        row.did("approve with `temporal workflow signal` after the restart")
        final = await common_checks(row, rig, handle)
        assert rig.side_effect_lines() == ["restarted"]
        row.saw(f"last message: {final.messages[-1].content!r}")
        row.checked("the approval sent after the restart was applied; the command ran once")
        check_clean_exits(row, rig)
    finally:
        rig.stop_workers()
        server.stop()


async def _status_or_none(handle: WorkflowHandle[Any, Any]) -> Any:
    try:
        return await status(handle)
    except Exception:
        return None


# ---------------------------------------------------------------- LLM server faults


LLM_FAULTS: list[tuple[str, list[dict[str, Any]], str, float]] = [
    (
        "drops the connection mid-stream twice",
        [{"kind": "cut_off", "after_chunks": 2}, {"kind": "cut_off", "after_chunks": 3}],
        "dropped",
        0.0,
    ),
    (
        "answers HTTP 500 three times",
        [{"kind": "http_error", "status": 500, "body": {"error": {"message": "boom"}}}] * 3,
        "500",
        6.0,
    ),
    (
        "answers HTTP 429 with Retry-After: 3",
        [
            {
                "kind": "http_error",
                "status": 429,
                "body": {"error": {"message": "slow down"}},
                "headers": {"Retry-After": "3"},
            }
        ],
        "429",
        3.0,
    ),
    ("streams slowly (40 chunks, 0.1 s apart)", [{"kind": "slow", "chunks": 40}], "slow", 4.0),
    (
        "sends a malformed body after a 500 (non-retryable)",
        [{"kind": "http_error", "status": 500}, {"kind": "malformed"}],
        "malformed",
        1.0,
    ),
]


@pytest.mark.parametrize(
    ("what", "behaviours", "key", "min_seconds"), LLM_FAULTS, ids=[f[2] for f in LLM_FAULTS]
)
async def test_llm_server_faults(
    client: Client,
    rig: Rig,
    record: Any,
    what: str,
    behaviours: list[dict[str, Any]],
    key: str,
    min_seconds: float,
) -> None:
    row = record("faults", f"LLM server {what}")
    await rig.fake.enqueue(*behaviours)
    await rig.start_worker()
    started = time.monotonic()
    handle = await start(client, rig.queue, "list")
    row.did(
        f"the first {len(behaviours)} LLM answer(s): {', '.join(b['kind'] for b in behaviours)}"
    )
    if key == "malformed":
        result, _ = await finished_well(handle, "error", timeout=120)
        row.saw(f"finish_reason=error: {result.error}")
        assert result.error is not None and "unparseable" in result.error
        requests = await rig.check_requests(row)
        assert len(requests) == 2
        row.checked("500 retried; the malformed body is not retried: `error` event, clean end")
        check_clean_exits(row, rig)
        return
    final = await common_checks(row, rig, handle)
    elapsed = time.monotonic() - started
    requests = await rig.fake.requests()
    expected = len(behaviours) + 2  # the faults, then the list_dir round and the summary
    if key == "slow":
        expected = 1  # the slow reply is a whole (text) answer: no tool round
    assert len(requests) == expected, len(requests)
    assert elapsed >= min_seconds
    row.saw(f"{len(requests)} requests; finished after {elapsed:.1f} s")
    if key == "slow":
        assert final.messages[-1].content == "tick " * 40
    else:
        assert [m.name for m in final.messages if m.role == "tool"] == ["list_dir"]
    row.checked(f"retried by Temporal with backoff (>= {min_seconds:g} s); run completed")
    check_clean_exits(row, rig)


async def test_history_ordering_after_faults(client: Client, rig: Rig, record: Any) -> None:
    """A message sent while a call waits for approval, across a worker kill, lands after the
    tool message in the history and in the next LLM request."""
    row = record("faults", "Worker SIGKILLed with a user message held during the approval wait")
    first = await rig.start_worker("worker-a")
    handle = await start(client, rig.queue, f"run: echo held >> {SIDE_EFFECTS}")
    pending = await wait_pending(handle)
    await handle.signal("send_message", {"content": "also, thanks"})
    rig.kill(first)
    await rig.start_worker("worker-b")
    row.did("send_message during the approval wait; SIGKILL the worker; new worker; approve")
    await handle.signal("tool_approval", {"call_id": pending[0].id, "approved": True})
    final = await common_checks(row, rig, handle)
    history = await messages(handle)
    roles = [m.role for m in history]
    tool_at = roles.index("tool")
    assert history[tool_at + 1].role == "user" and history[tool_at + 1].content == "also, thanks"
    assert rig.side_effect_lines() == ["held"]
    row.saw(f"roles: {roles}; last: {final.messages[-1].content[:60]!r}")
    row.checked("the held user message follows the tool message; the command ran once")
    check_clean_exits(row, rig)
