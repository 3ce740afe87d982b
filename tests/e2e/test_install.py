"""A normal (not editable) `pip install` of the repository ships every package the programs
import: a wheel built from a copy of the repository, installed into a fresh virtual environment
(its dependencies read from this one's site-packages, so the install takes seconds, not a
minute), and `python -m starter demo` run from a folder outside the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_demo import EXPECTED_LINES

ROOT = Path(__file__).resolve().parents[2]
NOT_SHIPPED = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "build", "*.egg-info", ".*_cache", "bench-results"
)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_normal_install_runs_the_demo_from_another_folder(tmp_path: Path) -> None:
    source = tmp_path / "source"  # a copy: the build leaves nothing in the checkout
    shutil.copytree(ROOT, source, ignore=NOT_SHIPPED)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # The dependencies come from this environment's site-packages (a path on sys.path: its own
    # .pth files, this checkout's editable finder among them, are not read), the project itself
    # only from the wheel built from the copy: what the wheel leaves out is missing.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    ours = next(p for p in sys.path if p.endswith("site-packages"))
    Path(site, "dependencies.pth").write_text(ours + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "AGENT_", "LLM_"))}
    env.pop("PYTHONPATH", None)
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [wheel] = list(wheels.glob("*.whl"))
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    shutil.rmtree(source)  # the programs must run from the install alone

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The demo starts the `temporal` dev server, which comes with the dev extras: this venv's.
    env["PATH"] = os.pathsep.join(
        [str(venv / "bin"), str(Path(sys.executable).parent), env["PATH"]]
    )
    env["TEMPORAL_ADDRESS"] = "127.0.0.1:1"  # nothing there: the demo runs its own server
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import activities.tools, starter, workflows, worker; print(worker.__file__)",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv)
    demo = subprocess.run(
        [str(python), "-m", "starter", "demo"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    lines = demo.stdout.splitlines()
    for expected in EXPECTED_LINES:
        assert expected in lines, (expected, demo.stdout)
