"""CI guard for the benchmark: `python -m bench --quick` must keep running and report
every figure with numbers. Targets are deliberately not asserted: timings on shared CI machines
are not a pass/fail signal, the table is."""

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
    "cancel.immediate",
    "approval.signal_to_tool",
    "scale.throughput",
    "scale.throughput_logic",
    "scale.paused_rss",
    "scale.approve_all",
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
]


@pytest.mark.slow
@pytest.mark.timeout(240)
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
