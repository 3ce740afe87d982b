"""CI guard for the benchmark: `python -m bench --quick` must keep running and report
every figure with numbers, and its throughput floor must stay fair (the same model requests, of
the same bytes, as the agent's). Targets are deliberately not asserted: timings on shared CI
machines are not a pass/fail signal, the table is. (The worker variants of figure 5, compiled
bytecode and `workflows/` passed through the sandbox, are measured by the full profile only.)"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FIGURES = [
    "overhead.per_round",
    "overhead.in_process",
    "history.bytes_per_round.10x500",
    "history.bytes_per_round.100x500",
    "history.largest_generation.500",
    "history.rounds_completed.500",
    "history.bytes_per_round.10x5000",
    "history.bytes_per_round.100x5000",
    "history.largest_generation.5000",
    "history.rounds_completed.5000",
    "sessions.bytes_per_round.500",
    "sessions.rounds_completed.5000",
    "sessions.bytes_per_round.5000",
    "sessions.big_conversation",
    "compaction.round_time",
    "compaction.activities",
    "cancel.immediate",
    "approval.signal_to_tool",
    "scale.throughput",
    "scale.worker_cpu_per_round",
    "scale.throughput_logic",
    "scale.paused_rss",
    "scale.approve_all",
    "processes.throughput",
    "replay.seconds",
    "sandbox.per_command",
    "encryption.per_round",
    "encryption.history_bytes_per_round",
    "policy.per_call",
    "mcp.per_call",
    "store.round_trip.file",
    "store.round_trip.s3",
    "observability.per_round",
    "observability.worker_cpu_per_round",
    "forks.what_if_seconds",
    "forks.fork_first_call",
    "forks.fork_first_call_open",
    "sub_agents.history_bytes",
    "sub_agents.delegate_round",
    "votes.signed_vote",
    "votes.cpu_per_vote",
    "votes.verify",
]


@pytest.mark.slow
@pytest.mark.timeout(420)  # a hang guard (the suite runs beside it), not a timing check
def test_bench_quick_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=230,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["errors"] == {}
    for key in ("cpu_count", "python", "temporalio", "date"):
        assert report["machine"][key]
    for key in FIGURES:
        figure = report["figures"][key]
        for field in ("value", "floor", "ratio"):
            assert isinstance(figure[field], int | float), (key, field, figure)
            assert math.isfinite(figure[field]), (key, field, figure)
    # The fair floor: per round the same model request as the agent's, of the same bytes (the
    # fake model server's call ids differ in length only), and the same tool.
    for agent, floor in report["details"]["scale"]["pairs"]["fair"]:
        assert agent["model_requests"] == floor["model_requests"] > 0, (agent, floor)
        assert abs(agent["request_bytes"] - floor["request_bytes"]) <= 0.02 * floor["request_bytes"]
        assert (
            agent["activities_per_run"]["execute_tool"]
            == floor["activities_per_run"]["bench_step_b"]
        ), (agent, floor)
