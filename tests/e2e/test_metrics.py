"""The worker's Prometheus endpoint, scraped during real runs: the real `python worker.py` with
AGENT_METRICS_ADDRESS, pointed at the session dev server and (over HTTP) at the fake
OpenAI-compatible server, whose replies carry the token usage the counters must add up to.

- one worker, three runs: a rule's answer and a person's approval, then a person's rejection; the
  tokens equal the fake server's usage, one approval is counted per answer, the waits of the
  person's answers are observed (and no wait for the rule's), the tool calls by tool and outcome,
  the gauge of runs waiting for a person goes to 1 and back to 0, the SDK's own metrics are
  there, and no label carries an argument; a third run's request is compacted once;
- a worker restarted while a run waits: the new worker counts the run as waiting once it has
  rebuilt it from history, and counts only what happens after the restart (replay counts
  nothing twice).
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from tests.cli.test_starter import seed
from tests.e2e.test_e2e import Process, clean_env, spawn
from tests.fake_openai import FakeOpenAI, FakeOpenAIServer, Reply
from tests.helpers import wait_for_phase, wait_until
from tests.ports import free_port
from tests.prometheus_text import Sample, names, scrape, total
from workflows.contract.rules import ApprovalPolicy, PolicyRule
from workflows.model import AgentRunInput, AgentRunOptions

MARKER = "logs"
"""The path the model asks to delete: an argument, so it must never be a label value."""


def delete_call(call_id: str, usage: tuple[int, int]) -> Reply:
    return Reply(tool_calls=[(call_id, "delete_path", f'{{"path": "{MARKER}"}}')], usage=usage)


@dataclass
class MetricsWorker:
    client: Client
    fake: FakeOpenAIServer
    env: dict[str, str]
    queue: str
    url: str
    process: Process | None = None

    async def start(self) -> None:
        self.process = await spawn("worker", "worker.py", env=self.env)
        ready = await self.process.wait_for_line(r"^worker ready ", timeout=60)
        assert f" metrics={self.url} " in ready.string, ready.string

    async def stop(self) -> None:
        if self.process is not None:
            assert await self.process.stop() == 0
            self.process = None

    async def scrape(self) -> list[Sample]:
        return await scrape(self.url)

    async def value(self, name: str, **labels: str) -> float:
        return total(await self.scrape(), name, task_queue=self.queue, **labels)

    async def start_run(self, prompt: str, options: AgentRunOptions | None = None) -> Any:
        return await self.client.start_workflow(
            "AgentWorkflow",
            AgentRunInput.from_prompt(prompt, options),
            id=f"metrics-{uuid.uuid4().hex[:8]}",
            task_queue=self.queue,
        )


@pytest.fixture
async def metrics_worker(client: Client, tmp_path: Path) -> AsyncIterator[MetricsWorker]:
    address = f"127.0.0.1:{free_port()}"
    queue = f"metrics-{uuid.uuid4().hex[:8]}"
    env = clean_env()
    env.update(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_TASK_QUEUE=queue,
        AGENT_WORKSPACE=str(seed(tmp_path / "workspace")),
        AGENT_STATE_DIR=str(tmp_path / "state"),
        AGENT_METRICS_ADDRESS=address,
        AGENT_STREAM_DELTAS="false",
        LLM_MODEL="fake-model",
    )
    with FakeOpenAI() as fake:
        env["LLM_BASE_URL"] = fake.base_url
        worker = MetricsWorker(client, fake, env, queue, f"http://{address}/metrics")
        await worker.start()
        try:
            yield worker
        finally:
            await worker.stop()


async def answer(handle: WorkflowHandle[Any, Any], call_id: str, approved: bool) -> None:
    await handle.execute_update(
        "submit_approval", {"call_id": call_id, "approved": approved, "approver": "ann"}
    )


async def test_counters_move_by_what_happened(metrics_worker: MetricsWorker) -> None:
    w = metrics_worker
    usages = [(120, 30), (150, 9), (170, 12), (180, 5)]
    w.fake.enqueue(
        Reply(
            tool_calls=[
                ("call_1", "list_dir", '{"path": "."}'),
                ("call_2", "delete_path", f'{{"path": "{MARKER}"}}'),
            ],
            usage=usages[0],
        ),
        Reply(text="Deleted.", usage=usages[1]),
        delete_call("call_3", usages[2]),
        Reply(text="Kept it.", usage=usages[3]),
    )
    allow_listing = AgentRunOptions(
        approval_policy=ApprovalPolicy(rules=[PolicyRule(tool="list_dir", decision="allow")])
    )

    # Run 1: a rule answers call_1 at once, a person approves call_2 after a wait.
    first = await w.start_run("Please delete the logs folder", allow_listing)
    await wait_for_phase(first, "awaiting_approval")
    assert await wait_until(
        lambda: _equals(w.value("agent_runs_waiting_for_person"), 1), timeout=10
    )
    assert await w.value("agent_rounds_total") == 1
    assert await w.value("agent_approvals_total", source="policy", decision="approved") == 1
    assert await w.value("agent_approval_wait_seconds_count") == 0  # a rule's answer: no wait
    await asyncio.sleep(1.2)
    await answer(first, "call_2", approved=True)
    await first.result()

    samples = await w.scrape()
    mine = [s for s in samples if s.labels.get("task_queue") == w.queue]

    def value(name: str, **labels: str) -> float:
        return total(mine, name, **labels)

    assert value("agent_rounds_total") == 2
    assert value("agent_llm_tokens_total", kind="prompt") == 120 + 150
    assert value("agent_llm_tokens_total", kind="completion") == 30 + 9
    assert value("agent_llm_seconds_count") == 2
    assert value("agent_approvals_total", source="person", decision="approved") == 1
    assert value("agent_approvals_total") == 2
    assert value("agent_approval_wait_seconds_count", source="person") == 1
    assert value("agent_approval_wait_seconds_count") == 1
    assert value("agent_approval_wait_seconds_sum") >= 1.2
    assert value("agent_tool_calls_total", tool="list_dir", outcome="ok") == 1
    assert value("agent_tool_calls_total", tool="delete_path", outcome="ok") == 1
    assert value("agent_runs_waiting_for_person") == 0
    assert value("agent_compactions_total") == 0
    assert not (w.env["AGENT_WORKSPACE"] / Path(MARKER)).exists()

    # The SDK's own metrics are on the same endpoint, in the same conventions.
    assert value("temporal_workflow_completed_total", workflow_type="AgentWorkflow") >= 1
    assert {"temporal_activity_execution_latency_count", "temporal_request_total"} <= names(samples)
    # Bounded labels: tool names and fixed words, never an argument.
    assert all(MARKER not in v for s in samples for v in s.labels.values()), "an argument leaked"

    # Run 2: a person rejects; the rejected call never runs.
    second = await w.start_run("Please delete the logs folder")
    await wait_for_phase(second, "awaiting_approval")
    assert await wait_until(
        lambda: _equals(w.value("agent_runs_waiting_for_person"), 1), timeout=10
    )
    await answer(second, "call_3", approved=False)
    await second.result()
    assert await w.value("agent_approvals_total", source="person", decision="rejected") == 1
    assert await w.value("agent_approvals_total") == 3
    assert await w.value("agent_approval_wait_seconds_count") == 2
    assert await w.value("agent_tool_calls_total", tool="delete_path") == 1
    assert await w.value("agent_rounds_total") == 4
    assert await w.value("agent_llm_tokens_total") == sum(p + c for p, c in usages)
    assert await w.value("agent_runs_waiting_for_person") == 0
    assert len(w.fake.requests) == 4

    # Run 3: a result too big for a small window: the next request is compacted, once.
    (Path(w.env["AGENT_WORKSPACE"]) / "big.txt").write_text("lorem ipsum " * 1_200)
    w.fake.enqueue(
        Reply(tool_calls=[("call_4", "read_file", '{"path": "big.txt"}')], usage=(200, 10)),
        Reply(text="It is long.", usage=(900, 5)),
    )
    third = await w.start_run("Read big.txt", AgentRunOptions(context_tokens=4_000))
    await third.result()
    assert await w.value("agent_compactions_total") == 1
    assert await w.value("agent_tool_calls_total", tool="read_file", outcome="ok") == 1
    assert await w.value("agent_rounds_total") == 6


async def test_a_usage_no_model_could_report_is_one_warning_and_no_retry(
    metrics_worker: MetricsWorker,
) -> None:
    """A reply that says it used 2^64 tokens (past 10^9 for one call): its text and calls
    stand, its usage is ignored with one warning, nothing is retried, and the token counter
    (an integer the metrics library cannot hold past 2^64) never sees it."""
    w = metrics_worker
    w.fake.enqueue(
        Reply(tool_calls=[("call_1", "list_dir", '{"path": "."}')], usage=(2**64, 5)),
        Reply(text="Listed.", usage=(40, 2)),
    )
    handle = await w.start_run("list the files")
    result = await handle.result()
    assert result["finish_reason"] == "stop"
    assert len(w.fake.requests) == 2  # the reply was taken: no attempt again
    evs = await handle.query("events")
    warnings = [e["message"] for e in evs if e["type"] == "warning"]
    assert warnings == [
        "the model server reported 18,446,744,073,709,551,616 tokens for one call, more than any"
        " model takes (1,000,000,000): its usage is ignored as malformed"
    ]
    assert await w.value("agent_llm_tokens_total", kind="prompt") == 40
    process = w.process
    assert process is not None
    await w.stop()
    logged = "\n".join(process.lines) + await process.rest_of_stdout()
    assert "OverflowError" not in logged and "Traceback" not in logged, logged


async def test_a_restarted_worker_counts_only_what_it_sees(metrics_worker: MetricsWorker) -> None:
    w = metrics_worker
    w.fake.enqueue(delete_call("call_1", (100, 20)), Reply(text="Deleted.", usage=(130, 4)))
    handle = await w.start_run("Please delete the logs folder")
    await wait_for_phase(handle, "awaiting_approval")
    assert await wait_until(lambda: _equals(w.value("agent_runs_waiting_for_person"), 1))
    assert await w.value("agent_llm_tokens_total", kind="prompt") == 100

    await w.stop()
    await w.start()
    # A new process: nothing counted, and the run is not in its cache yet.
    assert await w.value("agent_rounds_total") == 0
    assert await w.value("agent_runs_waiting_for_person") == 0
    # A query makes the new worker rebuild the run from history: now it sees it waiting, and
    # the replayed round, tokens and answers are not counted again.
    await wait_for_phase(handle, "awaiting_approval", timeout=60)
    assert await wait_until(lambda: _equals(w.value("agent_runs_waiting_for_person"), 1))
    assert await w.value("agent_rounds_total") == 0
    assert await w.value("agent_llm_tokens_total") == 0

    await answer(handle, "call_1", approved=True)
    await handle.result()
    assert await w.value("agent_rounds_total") == 1
    assert await w.value("agent_llm_tokens_total", kind="prompt") == 130
    assert await w.value("agent_llm_tokens_total", kind="completion") == 4
    assert await w.value("agent_approvals_total", source="person", decision="approved") == 1
    # The wait is workflow time since the call was announced, restart included.
    assert await w.value("agent_approval_wait_seconds_count") == 1
    assert await w.value("agent_tool_calls_total", tool="delete_path", outcome="ok") == 1
    assert await w.value("agent_runs_waiting_for_person") == 0


async def test_an_expired_call_is_counted_as_expired(metrics_worker: MetricsWorker) -> None:
    """The approval timeout passes unanswered (`expire`, the default): one
    `agent_approvals_total{source="timeout", decision="expired"}` per call, no answer counted,
    and the run still counts as waiting for a person."""
    w = metrics_worker
    w.fake.enqueue(delete_call("call_1", (10, 2)), Reply(text="Kept.", usage=(12, 2)))
    handle = await w.start_run(
        "Please delete the logs folder", AgentRunOptions(approval_timeout_seconds=0.5)
    )
    await wait_for_phase(handle, "approval_expired")
    assert await wait_until(
        lambda: _equals(w.value("agent_approvals_total", source="timeout", decision="expired"), 1),
        timeout=10,
    )
    assert await w.value("agent_approvals_total", decision="rejected") == 0
    assert await w.value("agent_approvals_total", decision="approved") == 0
    assert await wait_until(
        lambda: _equals(w.value("agent_runs_waiting_for_person"), 1), timeout=10
    )
    await answer(handle, "call_1", approved=False)
    await handle.result()
    assert await w.value("agent_approvals_total", source="person", decision="rejected") == 1
    assert await w.value("agent_approvals_total", decision="expired") == 1
    assert await w.value("agent_runs_waiting_for_person") == 0


async def _equals(value: Any, expected: float) -> bool:
    return bool(await value == expected)


@pytest.mark.parametrize(
    ("setting", "variable"),
    [
        ({"AGENT_METRICS_ADDRESS": "metrics-please"}, "AGENT_METRICS_ADDRESS"),
        ({"AGENT_METRICS_ADDRESS": "TAKEN"}, "AGENT_METRICS_ADDRESS"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            },
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
    ],
    ids=["bad-address", "address-in-use", "grpc"],
)
async def test_a_setting_the_worker_cannot_use_stops_it(
    client: Client, tmp_path: Path, setting: dict[str, str], variable: str
) -> None:
    env = clean_env()
    env.update(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_WORKSPACE=str(tmp_path / "workspace"),
        AGENT_STATE_DIR=str(tmp_path / "state"),
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        in_use = f"127.0.0.1:{taken.getsockname()[1]}"
        env.update({k: in_use if v == "TAKEN" else v for k, v in setting.items()})
        worker = await spawn("worker", "worker.py", env=env)
        code = await asyncio.wait_for(worker.proc.wait(), 60)
        output = await worker.rest_of_stdout()
    assert code == 2, output
    named = [line for line in output.splitlines() if line.startswith(f"worker: {variable}")]
    assert len(named) == 1, output
    assert "Traceback" not in output and "worker ready" not in output
