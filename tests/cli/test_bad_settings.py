"""A value a setting cannot take stops every program at start, the same way: exit code 2 and one
line on stderr naming the variable and what it accepts, no traceback (the worker used to take
`LLM_STREAM=flase` as "stream", and the starter never looked)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ACCEPTS = "must be true or false (or 1/0, yes/no, on/off), got 'flase'"


def _run(command: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "AGENT_"))}
    clean.update(TEMPORAL_ADDRESS="127.0.0.1:1", AGENT_WORKSPACE=str(tmp_path / "ws"), **env)
    return subprocess.run(command, cwd=ROOT, env=clean, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("command", "prefix"),
    [
        ([sys.executable, "worker.py"], "worker: "),
        ([sys.executable, "-m", "starter", "pending"], "error: "),
        ([sys.executable, "-m", "starter", "web", "--port", "0"], "error: "),
    ],
    ids=["worker", "starter", "web"],
)
def test_llm_stream_flase_stops_the_program_in_one_line(command, prefix, tmp_path):
    done = _run(command, tmp_path, LLM_STREAM="flase")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"{prefix}LLM_STREAM {ACCEPTS}"]
    assert not (tmp_path / "ws").exists()  # stopped before anything was made


def test_the_starter_names_a_worker_mode_it_cannot_take(tmp_path):
    done = _run([sys.executable, "-m", "starter", "pending"], tmp_path, AGENT_SANDBOX="sometimes")
    assert done.returncode == 2
    assert done.stderr == (
        "error: AGENT_SANDBOX must be one of auto, required, off, got 'sometimes'\n"
    )


@pytest.mark.parametrize("command", ["web", "codec-server"])
def test_a_port_is_a_port_number(command, tmp_path):
    done = _run([sys.executable, "-m", "starter", command, "--port", "70000"], tmp_path)
    assert done.returncode == 2
    assert "argument --port: must be a port number from 0 to 65535, got 70000" in done.stderr
    assert "Traceback" not in done.stderr
