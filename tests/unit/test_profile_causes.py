"""`python -m bench.profile`'s split of the worker's CPU: each sample counted once, for its most
specific cause, and the threads' CPU grouped as the kernel names them."""

from __future__ import annotations

import pytest

from bench.profile_causes import OTHER, RUST, by_cause, by_thread, cause_of, per_round

QUERY = (
    "MainThread;run (asyncio/runners.py:190);_WorkflowWorker._handle_activation"
    " (temporalio/worker/_workflow.py:385);decode_activation (temporalio/bridge/worker.py:1);"
    "_apply_query_workflow (temporalio/worker/_workflow_instance.py:9)"
)
IMPORT = (
    "MainThread;_WorkflowWorker._create_workflow_instance (temporalio/worker/_workflow.py:1);"
    "_Instance.__init__ (temporalio/worker/workflow_sandbox/_runner.py:1);"
    "SourceLoader.source_to_code (<frozen importlib._bootstrap_external>:1)"
)
CONVERSION = (
    "MainThread;_WorkflowWorker._handle_activation (temporalio/worker/_workflow.py:385);"
    "encode_completion (temporalio/bridge/worker.py:1)"
)


def test_a_sample_counts_for_its_most_specific_cause() -> None:
    assert cause_of(QUERY).startswith("the conversation read")
    assert cause_of(IMPORT).startswith("sandbox")
    assert cause_of(CONVERSION).startswith("payload conversion")
    assert cause_of("MainThread;BaseEventLoop._run_once (asyncio/base_events.py:1)") == OTHER


def test_shares_add_up_to_one() -> None:
    raw = f"{QUERY} 3\n{IMPORT} 1\n\n"
    shares = dict(by_cause(raw))
    assert shares[cause_of(QUERY)] == pytest.approx(0.75)
    assert sum(shares.values()) == pytest.approx(1.0)


def test_threads_are_grouped_and_the_python_cpu_is_split_by_the_samples() -> None:
    before = {(10, "python"): 1.0, (11, "python"): 0.0, (12, "tokio-rt-worker"): 0.0}
    after = {(10, "python"): 2.0, (11, "python"): 1.0, (12, "tokio-rt-worker"): 0.5}
    threads = by_thread(10, before, after, rounds=100)
    assert threads[RUST] == pytest.approx(5.0)
    assert sum(threads.values()) == pytest.approx(25.0)
    split = per_round(f"{QUERY} 1\n{IMPORT} 1\n", threads)
    assert split[cause_of(QUERY)] == pytest.approx(10.0)
    assert split[RUST] == pytest.approx(5.0)
