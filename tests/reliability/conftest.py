"""Fixtures of the reliability suites: a results recorder (every test writes one row of what it
did, what it observed and what it checked into `results.json`, which `report.py` turns into
`docs/reports/reliability.md`), temporary folders for workspaces and logs, and the CLI address of the
session dev server."""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.fake_openai import FakeOpenAI, FakeOpenAIServer
from tests.reliability.agents import InProcessWorker, in_process_worker

RESULTS_FILE = Path(__file__).with_name("results.json")
RESULTS_LOCK = Path(tempfile.gettempdir()) / "durable-agent-reliability-results.lock"


@dataclass
class ResultRow:
    """One row of the report: filled by a test as it goes; saved with its real outcome."""

    suite: str
    scenario: str
    nodeid: str
    action: list[str] = field(default_factory=list)
    observed: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)

    def did(self, text: str) -> None:
        """What the test did to the system (the fault or the input)."""
        self.action.append(text)

    def saw(self, text: str) -> None:
        """An outcome as observed (a warning text, a finish reason, an exit code…)."""
        self.observed.append(text)

    def checked(self, text: str) -> None:
        """An assertion that held (call it right after the assert)."""
        self.checks.append(text)


def _write_row(row: ResultRow, status: str, duration: float, error: str | None) -> None:
    """Read, add the row, write back: under a lock, since the suite's processes (pytest-xdist)
    each write rows of their own."""
    with RESULTS_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _add_row(row, status, duration, error)


def _add_row(row: ResultRow, status: str, duration: float, error: str | None) -> None:
    try:
        data = json.loads(RESULTS_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    rows: dict[str, Any] = data.get("rows", {}) if isinstance(data, dict) else {}
    rows[row.nodeid] = {
        "suite": row.suite,
        "scenario": row.scenario,
        "action": row.action,
        "observed": row.observed,
        "checks": row.checks,
        "status": status,
        "error": error,
        "duration_s": round(duration, 1),
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    data = {"schema": 1, "rows": dict(sorted(rows.items()))}
    fd, temporary = tempfile.mkstemp(dir=RESULTS_FILE.parent, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, ensure_ascii=False)
        handle.write("\n")
    os.replace(temporary, RESULTS_FILE)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call" or (report.when == "setup" and report.failed):
        item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


_REPORTS = pytest.StashKey[dict[str, Any]]()


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Iterator[Any]:
    """`row = record("faults" | "bad_input", "scenario")`; saved at teardown with pass/fail."""
    rows: list[ResultRow] = []
    started = time.monotonic()

    def make(suite: str, scenario: str) -> ResultRow:
        suffix = "" if not rows else f"#{len(rows)}"
        row = ResultRow(suite, scenario, request.node.nodeid + suffix)
        rows.append(row)
        return row

    yield make
    reports = request.node.stash.get(_REPORTS, {})
    call = reports.get("call")
    status, error = "not run", None
    if call is not None:
        status = call.outcome
        if call.failed:
            text = str(call.longrepr)
            error = text.strip().splitlines()[-1][:300] if text.strip() else "failed"
    for row in rows:
        _write_row(row, status, time.monotonic() - started, error)


@pytest.fixture
def tmp_dirs() -> Generator[dict[str, Path], None, None]:
    """A workspace, a state folder (outside the workspace) and a log folder for one test."""
    with tempfile.TemporaryDirectory(prefix="agent-rel-") as base:
        root = Path(base)
        dirs = {name: root / name for name in ("workspace", "state", "logs", "db")}
        for path in dirs.values():
            path.mkdir()
        yield dirs


@pytest.fixture(scope="session")
def env_address(env: WorkflowEnvironment) -> str:
    """The `host:port` of the session dev server, for the `temporal` CLI and subprocesses."""
    config = env.client.service_client.config
    return str(config.target_host)


@pytest.fixture(scope="module")
async def model_rig(
    client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[InProcessWorker, FakeOpenAIServer]]:
    """The real activities against the fake OpenAI-compatible server on 127.0.0.1, in this
    process (one per test module); yields (worker, server)."""
    base = tmp_path_factory.mktemp("model-rig")
    (base / "ws").mkdir()
    with FakeOpenAI() as fake:
        async with in_process_worker(
            client, base / "ws", base / "state", llm_base_url=fake.base_url
        ) as worker:
            yield worker, fake
