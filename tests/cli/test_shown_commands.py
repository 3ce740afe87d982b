"""The commands the programs print for people to type next run as printed, on a fresh clone where
nothing is activated: `temporal` is in `.venv/bin`, not on the PATH, and `python` on the PATH (if
any) is not the project's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(os.path.abspath(sys.executable)).parent


def _here(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


PYTHON = _here(VENV_BIN / "python")


def _fresh_shell_env(**extra: str) -> dict[str, str]:
    """A login shell's environment on a fresh clone: no venv on the PATH."""
    path = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != VENV_BIN
    )
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "AGENT_", "VIRTUAL"))}
    return {**keep, "PATH": path, **extra}


def _sh(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_the_hint_of_an_unreachable_server_names_a_temporal_that_runs(tmp_path):
    env = _fresh_shell_env(TEMPORAL_ADDRESS="127.0.0.1:1", AGENT_WORKSPACE=str(tmp_path))
    done = subprocess.run(
        [str(VENV_BIN / "python"), "-m", "starter", "pending"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    hint = re.search(r"Start a server \(`([^`]+) server start-dev`\)", done.stderr)
    assert hint is not None, done.stderr
    temporal = hint.group(1)
    assert temporal == _here(VENV_BIN / "temporal")
    assert _sh(f"{temporal} --version", env).returncode == 0


def test_usage_names_a_starter_that_runs():
    env = _fresh_shell_env()
    done = subprocess.run(
        [str(VENV_BIN / "python"), "-m", "starter", "--help"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    usage = re.match(r"usage: (.+) \[-h\]", done.stdout)
    assert usage is not None, done.stdout
    assert usage.group(1) == f"{PYTHON} -m starter"
    again = _sh(f"{usage.group(1)} --help", env)
    assert again.returncode == 0 and again.stdout == done.stdout


def test_usage_of_the_worker_names_a_command_that_runs():
    env = _fresh_shell_env()
    done = _sh(f"{PYTHON} worker.py --help", env)
    usage = re.match(r"usage: (.+) \[-h\]", done.stdout)
    assert usage is not None, done.stdout
    assert usage.group(1) == f"{PYTHON} worker.py"
    assert _sh(f"{usage.group(1)} --help", env).returncode == 0


def test_an_activated_environment_is_shown_as_plain_python():
    env = _fresh_shell_env()
    env["PATH"] = os.pathsep.join([str(VENV_BIN), env["PATH"]])
    done = _sh("python -m starter --help", env)
    assert done.stdout.startswith("usage: python -m starter [-h]")
