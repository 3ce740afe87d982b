"""The README's and docs/worker.md's tables of settings are the ones the settings' own docs make
(`python -m runtime.settings_table`): a setting is written once, in runtime/settings.py."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from runtime.settings import ALSO_READ, variables
from runtime.settings_table import PLACES, ROOT, between_markers, table


@pytest.mark.parametrize(("page", "is_readme"), PLACES.items())
def test_the_page_holds_the_generated_table(page, is_readme):
    held = between_markers((ROOT / page).read_text())
    assert held is not None, f"{page} has no settings table between the markers"
    assert held == table(readme=is_readme), (
        f"{page}'s settings table is not the generated one:"
        " run `python -m runtime.settings_table --write`"
    )


def test_every_setting_is_in_the_full_table_once():
    full = table(readme=False)
    for name in variables():
        assert full.count(f"| `{name}` |") == 1, name


def test_the_script_prints_the_table():
    done = subprocess.run(
        [sys.executable, "-m", "runtime.settings_table", "--readme"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout == table(readme=True) + "\n"
    assert "| `LLM_BASE_URL` | worker |" in done.stdout
    assert "`LLM_STREAM`" not in done.stdout  # the README keeps the short list


def test_every_variable_the_programs_name_is_a_documented_setting():
    """A variable named in the programs' code (`"AGENT_…"`, `"LLM_…"`) is a field of the typed
    settings, so it is checked at start and has its row in the tables (or one the tests and
    tools read, listed as such: `ALSO_READ`)."""
    named: set[str] = set()
    for folder in ("activities", "runtime", "starter", "workflows"):
        for path in (ROOT / folder).rglob("*.py"):
            named |= set(re.findall(r"\"((?:AGENT|LLM)_[A-Z0-9_]+)\"", path.read_text()))
    named |= set(re.findall(r"\"((?:AGENT|LLM)_[A-Z0-9_]+)\"", (ROOT / "worker.py").read_text()))
    assert named, "no variable found: the scan is broken"
    assert named - set(variables()) - set(ALSO_READ) == set()
