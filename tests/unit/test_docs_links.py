"""The docs stay a front page and guides, not a maze: the README fits its budget, no guide is
too long to read for one task, every relative link lands on a file and heading that exist, and
every file path the docs name in backticks is in the repository. Pure: no server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_BUDGET = 14_000
"""Bytes: the README is a front page; the rest is in docs/."""
GUIDE_BUDGET = 20_000
"""Bytes of a guide; the generated reports under docs/reports/ are not guides."""
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
REPO_PATH = re.compile(
    r"`((?:activities|bench|docs|runtime|starter|tests|workflows)/[A-Za-z0-9_./-]*[A-Za-z0-9_])`"
)
GENERATED = ("tests/reliability/results.json",)
"""Paths the docs name that a run writes, not the repository."""


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (outside code blocks; repeats get `-1`, `-2` …)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"#{1,6} (.*)", line)
        if heading:
            name = slug(heading.group(1))
            count = seen.get(name, 0)
            seen[name] = count + 1
            found.add(name if count == 0 else f"{name}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    """The relative links of a page whose file or heading does not exist."""
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = page.parent / path if path else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
            broken.append(target)
    return broken


def test_the_readme_is_a_front_page() -> None:
    size = len(README.read_bytes())
    assert size <= README_BUDGET, f"README.md is {size} bytes, over {README_BUDGET}"


@pytest.mark.parametrize(
    "page",
    sorted(DOCS.glob("*.md")),
    ids=lambda p: p.name,
)
def test_no_guide_is_too_long(page: Path) -> None:
    size = len(page.read_bytes())
    assert size <= GUIDE_BUDGET, f"{page.name} is {size} bytes, over {GUIDE_BUDGET}: split it"


def test_the_reports_are_under_docs_reports() -> None:
    assert (DOCS / "reports" / "benchmark.md").exists()
    assert (DOCS / "reports" / "reliability.md").exists()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_lands(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_path_named_exists(page: Path) -> None:
    named = set(REPO_PATH.findall(page.read_text(encoding="utf-8"))) - set(GENERATED)
    assert sorted(p for p in named if not (ROOT / p).exists()) == []


def test_the_checks_see_a_broken_link_and_a_stale_path(tmp_path: Path) -> None:
    """The checks can fail: a link to a missing heading, and a path that is not there."""
    page = tmp_path / "page.md"
    page.write_text("# Title\n\nSee [there](#elsewhere) and [here](#title).\n")
    assert broken_links(page) == ["#elsewhere"]
    assert REPO_PATH.findall("the codec (`starter/codec.py`)") == ["starter/codec.py"]
    assert not (ROOT / "starter" / "codec.py").exists()
