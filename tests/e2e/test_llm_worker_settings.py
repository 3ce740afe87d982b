"""`python worker.py` with a model setting it cannot use stops with one line naming the variable,
exit code 2, before it connects to anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def worker_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_"))}
    env.update(
        TEMPORAL_ADDRESS="127.0.0.1:1",  # never reached: the worker stops before connecting
        AGENT_WORKSPACE=str(tmp_path / "ws"),
        AGENT_STATE_DIR=str(tmp_path / "state"),
        LLM_BASE_URL="http://127.0.0.1:1/v1",
        **extra,
    )
    return env


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("LLM_TEXT_TOOL_CALLS", "sometimes", "LLM_TEXT_TOOL_CALLS must be one of parse, warn, off"),
        ("LLM_PARALLEL_TOOL_CALLS", "maybe", "LLM_PARALLEL_TOOL_CALLS must be true or false"),
        ("LLM_CONTEXT_TOKENS", "2k", "LLM_CONTEXT_TOKENS must be a positive whole number"),
        ("AGENT_SYSTEM_PROMPT", "@/nonexistent/prompt.txt", "AGENT_SYSTEM_PROMPT names"),
    ],
)
def test_a_model_setting_the_worker_cannot_use_stops_it(tmp_path, variable, value, says):
    done = subprocess.run(
        [sys.executable, "worker.py"],
        cwd=ROOT,
        env=worker_env(tmp_path, **{variable: value}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"worker: {says}"), line
    assert done.stdout == ""
