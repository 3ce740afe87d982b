"""The packages' layering, read from the code: `starter/` and `activities/` never import each
other, `runtime/` imports only `workflows/`, and `workflows/` imports none of the others (nor
`worker.py`, `bench/` or `tests/`). Every import counts, also one inside a function: a late import
is still a dependency. Pure: no server."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OWN = frozenset({"activities", "bench", "runtime", "starter", "tests", "workflows", "worker"})
"""The repository's top-level packages and modules."""
FORBIDDEN: dict[str, frozenset[str]] = {
    "activities": OWN - {"activities", "runtime", "workflows"},
    "starter": OWN - {"starter", "runtime", "workflows"},
    "runtime": OWN - {"runtime", "workflows"},
    "workflows": OWN - {"workflows"},
}
"""What each package may not import."""


def imported(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """Every module `path` imports, as (line, dotted name), wherever the import stands; a relative
    import resolved against the file's own package."""
    package = list(path.relative_to(root).parts[:-1])  # a module's, or an __init__.py's own
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            yield node.lineno, ".".join([*base, *([node.module] if node.module else [])])


def crossings(package: str, root: Path = ROOT) -> list[str]:
    """`FILE:LINE: imports NAME` for each import in `package` that its rule forbids."""
    found = []
    for path in sorted((root / package).rglob("*.py")):
        for line, name in imported(path, root):
            if name.split(".")[0] in FORBIDDEN[package]:
                found.append(f"{path.relative_to(root)}:{line}: imports {name}")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_crosses_the_layers(package: str) -> None:
    found = crossings(package)
    may_not = ", ".join(sorted(FORBIDDEN[package]))
    assert found == [], f"{package}/ may not import {may_not}:\n" + "\n".join(found)


def test_the_scan_reads_late_and_relative_imports(tmp_path: Path) -> None:
    """The scan itself: an import inside a function, `import a.b` and `from a import b` are all
    read, and a relative import stays in its package."""
    (tmp_path / "runtime" / "inner").mkdir(parents=True)
    (tmp_path / "runtime" / "__init__.py").write_text("")
    (tmp_path / "runtime" / "inner" / "__init__.py").write_text("from .. import codec\n")
    (tmp_path / "runtime" / "late.py").write_text(
        "import os\nimport starter.cli\n\n\ndef f():\n"
        "    from activities.plugin import AgentPlugin\n"
        "    from .inner import codec\n"
        "    return AgentPlugin, codec\n"
    )
    assert crossings("runtime", tmp_path) == [
        "runtime/late.py:2: imports starter.cli",
        "runtime/late.py:6: imports activities.plugin",
    ]
    late = dict(imported(tmp_path / "runtime" / "late.py", tmp_path))
    assert late[7] == "runtime.inner"
    assert dict(imported(tmp_path / "runtime" / "inner" / "__init__.py", tmp_path)) == {
        1: "runtime"
    }
