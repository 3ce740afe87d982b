"""The workflow side of metrics and traces, on the real dev server with in-process workers (the
activities are stand-ins: the subject is what the workflow and its interceptors do).

- The gauge of runs waiting for a person is this worker's view: a run continued as new while it
  waits is counted once (the new run), and a run the worker does not keep in its cache is not
  counted at all.
- A run traced by Temporal's interceptor (the project's `AgentTracingInterceptor`) is one tree
  of spans, and its history replays with the interceptors on and off; replaying creates no span.
- Every recorded history (tests/histories/) replays with the tracing and run-tracking
  interceptors on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from runtime.connect import data_converter
from runtime.trace_interceptor import AgentTracingInterceptor
from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import start_run, wait_for_phase, wait_until, worker_for
from tests.workflow.test_replay import SAMPLE, _name, load
from workflows.metrics import RunTracking, waiting_here
from workflows.model import AgentRunInput, AgentRunOptions
from workflows.run.agent import AgentWorkflow
from workflows.waiting_runs import WAITING_RUNS


def traced() -> tuple[AgentTracingInterceptor, InMemorySpanExporter]:
    """A tracing interceptor with a tracer of its own (no process-wide provider is touched)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return AgentTracingInterceptor(tracer=provider.get_tracer("test")), exporter


def delete_logs() -> FakeAgentActivities:
    return FakeAgentActivities(
        replies=[calls(("call_1", "delete_path", '{"path": "logs"}')), text("deleted")]
    )


async def test_a_run_continued_as_new_while_waiting_is_counted_once(
    client: Client, task_queue: str
) -> None:
    ns = client.namespace
    options = AgentRunOptions(max_history_events=100)
    async with worker_for(client, task_queue, delete_logs()):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go", options))
        await wait_for_phase(handle, "awaiting_approval")
        first = (await handle.describe()).run_id
        assert waiting_here(ns, task_queue) == 1
        for i in range(40):  # messages held while it waits grow the history past the cap
            await handle.signal("send_message", {"content": f"also {i}"})
            if (await handle.describe()).run_id != first:
                break
        latest = client.get_workflow_handle(handle.id)
        assert await wait_until(lambda: _continued(latest, first))
        await wait_for_phase(latest, "awaiting_approval")
        assert waiting_here(ns, task_queue) == 1  # the new run, not the old one as well
        await latest.signal("tool_approval", {"call_id": "call_1", "approved": True})
        assert await wait_until(lambda: waiting_here(ns, task_queue) == 0)


async def _continued(handle: Any, first: str) -> bool:
    return bool((await handle.describe()).run_id != first)


async def test_a_run_not_kept_in_the_cache_is_not_counted(client: Client, task_queue: str) -> None:
    async with worker_for(client, task_queue, delete_logs(), max_cached_workflows=0):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("go"))
        await wait_for_phase(handle, "awaiting_approval")
        # Each activation (the query's too) rebuilds the run and evicts it when it is done.
        assert await wait_until(lambda: waiting_here(client.namespace, task_queue) == 0, 5)
        await handle.signal("tool_approval", {"call_id": "call_1", "approved": True})
        await handle.result()
    assert waiting_here(client.namespace, task_queue) == 0


async def test_a_traced_run_is_one_tree_and_replays(client: Client, task_queue: str) -> None:
    tracing, exporter = traced()
    config = client.config()
    config["interceptors"] = [tracing]
    traced_client = Client(**config)
    async with worker_for(traced_client, task_queue, delete_logs()):
        handle = await start_run(traced_client, task_queue, AgentRunInput.from_prompt("go"))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal("tool_approval", {"call_id": "call_1", "approved": True})
        await handle.result()

    spans = exporter.get_finished_spans()
    names = [s.name for s in spans]
    root = next(s for s in spans if s.name == "StartWorkflow:AgentWorkflow")
    assert {s.context.trace_id for s in spans if s.name != "SignalWorkflow:tool_approval"} == {
        root.context.trace_id
    }
    for name in (
        "RunWorkflow:AgentWorkflow",
        "HandleSignal:tool_approval",
        "StartActivity:execute_tool",
        "RunActivity:execute_tool",
        "CompleteWorkflow:AgentWorkflow",
    ):
        assert names.count(name) == 1, (name, names)
    assert names.count("StartActivity:call_llm") == 2
    assert not [n for n in names if "__temporal_" in n]

    history = await handle.fetch_history()
    assert any(
        "_tracer-data" in e.workflow_execution_started_event_attributes.header.fields
        for e in history.events
        if e.HasField("workflow_execution_started_event_attributes")
    ), "the recording carries the trace context"
    again, replay_exporter = traced()
    for interceptors in ([again, RunTracking()], []):
        replayer = Replayer(
            workflows=[AgentWorkflow], data_converter=data_converter(), interceptors=interceptors
        )
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, result.replay_failure
    assert replay_exporter.get_finished_spans() == ()

    # The history up to the wait: the replayer rebuilds a run that waits, then evicts it, and
    # the process no longer counts it.
    signalled = next(
        i
        for i, e in enumerate(history.events)
        if e.HasField("workflow_execution_signaled_event_attributes")
    )
    cut = WorkflowHistory(history.workflow_id, list(history.events[:signalled]))
    before = WAITING_RUNS.total()
    replayer = Replayer(
        workflows=[AgentWorkflow], data_converter=data_converter(), interceptors=[RunTracking()]
    )
    result = await replayer.replay_workflow(cut, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
    assert WAITING_RUNS.total() == before


@pytest.mark.parametrize("path", SAMPLE, ids=[_name(p) for p in SAMPLE])
async def test_recorded_histories_replay_traced(path: Path) -> None:
    tracing, exporter = traced()
    history: WorkflowHistory = load(path)
    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=data_converter(),
        interceptors=[tracing, RunTracking()],
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"
    assert exporter.get_finished_spans() == ()
