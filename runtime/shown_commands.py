"""The commands the programs print for people to run next (`… -m starter approve W call_2`, `…
worker.py`, `temporal server start-dev`), written so they run as printed from where the program
was started: on a fresh clone nothing is activated, `python` may be missing or another Python,
and `temporal` lives in `.venv/bin`, not on the PATH."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path


def _exists(path: Path) -> bool:
    """Whether `path` exists; a path this process may not look at (a worker started as another
    user: PermissionError) counts as missing, never as a reason not to start."""
    try:
        return path.exists()
    except OSError:
        return False


def _shown_path(path: Path) -> str:
    """`path` relative to the working folder when it is inside it (`.venv/bin/python`), else
    absolute; quoted for a shell."""
    try:
        absolute = Path(os.path.abspath(path))
    except OSError:  # a working folder this process cannot read (or one removed since)
        return shlex.quote(str(path))
    try:
        shown = str(absolute.relative_to(Path.cwd()))
    except (ValueError, OSError):
        shown = str(absolute)
    return shlex.quote(shown)


def _on_path(name: str, folder: Path) -> bool:
    """Whether `name` on the PATH is the one in `folder` (an activated environment)."""
    found = shutil.which(name)
    return found is not None and Path(os.path.abspath(found)).parent == folder


def python_command() -> str:
    """How to run this Python: `python` when the PATH finds this one (an activated venv), else
    its path, e.g. `.venv/bin/python`."""
    executable = Path(os.path.abspath(sys.executable))
    folder = executable.parent
    if _on_path("python", folder):
        return "python"
    plain = folder / "python"
    return _shown_path(plain if _exists(plain) else executable)


def starter_command() -> str:
    """`python -m starter`, as it runs from here."""
    return f"{python_command()} -m starter"


WORKER = Path(__file__).resolve().parent.parent / "worker.py"


def worker_command() -> str:
    """`python worker.py`, as it runs from here."""
    return f"{python_command()} {_shown_path(WORKER)}"


def temporal_command() -> str:
    """The `temporal` CLI: on the PATH, else the one the dev extras put beside this Python."""
    if shutil.which("temporal"):
        return "temporal"
    beside = Path(os.path.abspath(sys.executable)).parent / "temporal"
    return _shown_path(beside) if _exists(beside) else "temporal"
