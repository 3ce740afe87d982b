"""`python worker.py --processes 2`: two full workers, each a process of its own with its own
Temporal client, polling one task queue and sharing its runs; SIGTERM to the loop stops both;
a count that cannot be used, or a setting the copies cannot use, is said in one line (exit 2)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.ports import free_ports
from tests.reliability.processes import ROOT, ManagedProcess, worker_env
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage
from workflows.run.agent import AgentWorkflow


def processes_env(env: WorkflowEnvironment, task_queue: str, tmp_path: Path) -> dict[str, str]:
    address = env.client.service_client.config.target_host
    return worker_env(
        address=address,
        task_queue=task_queue,
        workspace=tmp_path / "ws",
        state_dir=tmp_path / "state",
        llm_base_url=None,  # the scripted model
        extra={"AGENT_SANDBOX": "off"},
    )


async def poller_identities(client: Client, task_queue: str) -> set[str]:
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return {poller.identity for poller in response.pollers}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "Z"
    return stat[stat.rindex(")") + 2 :].split()[0]


@pytest.mark.timeout(180)
async def test_two_worker_processes_both_poll_and_stop_together(
    env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    (tmp_path / "ws").mkdir()
    loop = ManagedProcess(
        "worker-processes",
        [sys.executable, "worker.py", "--processes", "2"],
        env=processes_env(env, task_queue, tmp_path),
        log_dir=tmp_path / "logs",
    )
    try:
        started = await loop.wait_for_line("worker processes ready: 2", timeout=120)
        pids = [int(p) for p in started.split("(pids ")[1].rstrip(")").split()]
        assert len(set(pids)) == 2 and loop.pid not in pids, started
        ready = [line for line in loop.output() if line.startswith("worker ready")]
        assert len(ready) == 2, loop.output()

        # Both copies poll the queue, each with its own client (the SDK's identity is pid@host).
        wanted = {str(pid) for pid in pids}
        deadline = time.monotonic() + 30
        seen: set[str] = set()
        while time.monotonic() < deadline:
            seen = {
                identity.split("@")[0] for identity in await poller_identities(client, task_queue)
            }
            if wanted <= seen:
                break
            await asyncio.sleep(0.5)
        assert wanted <= seen, (seen, pids)

        # And they serve: runs started on the queue finish.
        handles = [
            await client.start_workflow(
                AgentWorkflow.run,
                AgentRunInput(messages=[ChatMessage.user("list")], options=AgentRunOptions()),
                id=f"processes-{task_queue}-{i}",
                task_queue=task_queue,
            )
            for i in range(4)
        ]
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 60)
        assert all(r.finish_reason == "stop" for r in results), results

        # SIGTERM to the loop stops both copies, and the loop exits 0.
        code = loop.stop(timeout=40)
        assert code == 0, loop.stderr_tail()
        assert not any(alive(pid) for pid in pids), pids
        assert sum(line == "worker stopped" for line in loop.output()) == 2, loop.output()
    finally:
        loop.stop()


def run_worker(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "worker.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


@pytest.mark.parametrize(
    ("args", "environ", "said"),
    [
        (
            ["--processes", "0"],
            {},
            "worker: --processes='0' is not a whole number from 1 to 64",
        ),
        (
            [],
            {"AGENT_WORKER_PROCESSES": "two"},
            "worker: AGENT_WORKER_PROCESSES='two' is not a whole number from 1 to 64",
        ),
    ],
)
def test_a_count_that_cannot_be_used_is_one_line(
    args: list[str], environ: dict[str, str], said: str, tmp_path: Path
) -> None:
    env = worker_env(
        address="127.0.0.1:1",
        task_queue="unused",
        workspace=tmp_path,
        state_dir=tmp_path / "state",
        llm_base_url=None,
        extra=environ,
    )
    done = run_worker(args, env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [said]


def test_a_setting_the_copies_cannot_use_is_said_once(tmp_path: Path) -> None:
    env = worker_env(
        address="127.0.0.1:1",
        task_queue="unused",
        workspace=tmp_path,
        state_dir=tmp_path / "state",
        llm_base_url=None,
        extra={"AGENT_PAYLOAD_STORE": "file:///no/such/folder", "AGENT_SANDBOX": "off"},
    )
    done = run_worker(["--processes", "3"], env)
    assert done.returncode == 2, done.stderr
    lines = [
        line
        for line in done.stderr.strip().splitlines()
        if not line.startswith("worker: warning: run_command")
    ]
    assert len(lines) == 1, lines
    assert "AGENT_PAYLOAD_STORE" in lines[0], lines
    assert "worker processes ready" not in done.stdout


@pytest.mark.timeout(180)
async def test_when_one_copy_dies_the_other_is_stopped_and_its_code_returned(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    (tmp_path / "ws").mkdir()
    loop = ManagedProcess(
        "worker-processes",
        [sys.executable, "worker.py", "--processes", "2"],
        env=processes_env(env, task_queue, tmp_path),
        log_dir=tmp_path / "logs",
    )
    try:
        started = await loop.wait_for_line("worker processes ready: 2", timeout=120)
        first, second = (int(p) for p in started.split("(pids ")[1].rstrip(")").split())
        os.kill(first, signal.SIGKILL)  # a crash: no graceful stop
        loop.proc.wait(timeout=60)
        assert loop.proc.returncode == 128 + signal.SIGKILL, loop.stderr_tail()
        assert not alive(second)
        assert "worker stopped" in loop.output(), loop.output()  # the other stopped gracefully
    finally:
        loop.stop()


@pytest.mark.timeout(180)
async def test_every_copy_serves_its_metrics_on_a_port_of_its_own(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """AGENT_METRICS_ADDRESS=127.0.0.1:P with two copies: copy 0 serves on P, copy 1 on P + 1
    (one port is bound once), both start, and the ready line lists both addresses."""
    (tmp_path / "ws").mkdir()
    port = free_ports(2)
    environ = processes_env(env, task_queue, tmp_path)
    environ["AGENT_METRICS_ADDRESS"] = f"127.0.0.1:{port}"
    loop = ManagedProcess(
        "worker-processes",
        [sys.executable, "worker.py", "--processes", "2"],
        env=environ,
        log_dir=tmp_path / "logs",
    )
    try:
        started = await loop.wait_for_line("worker processes ready: 2", timeout=120)
        urls = [f"http://127.0.0.1:{port + i}/metrics" for i in range(2)]
        assert started.endswith(f" metrics={urls[0]} {urls[1]}"), started
        ready = sorted(line for line in loop.output() if line.startswith("worker ready"))
        assert [line.split(" metrics=")[1].split()[0] for line in ready] == sorted(urls), ready
        async with httpx.AsyncClient(timeout=10) as http:
            for url in urls:
                scraped = await http.get(url)
                assert scraped.status_code == 200 and "temporal_" in scraped.text, url
        assert loop.stop(timeout=40) == 0, loop.stderr_tail()
    finally:
        loop.stop()


def test_metrics_ports_past_the_last_are_one_line(tmp_path: Path) -> None:
    env = worker_env(
        address="127.0.0.1:1",
        task_queue="unused",
        workspace=tmp_path / "ws",
        state_dir=tmp_path / "state",
        llm_base_url=None,
        extra={"AGENT_METRICS_ADDRESS": "127.0.0.1:65535", "AGENT_SANDBOX": "off"},
    )
    done = run_worker(["--processes", "2"], env)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("worker: AGENT_METRICS_ADDRESS=127.0.0.1:65535: 2 worker processes"), (
        line
    )
