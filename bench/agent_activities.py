"""The agent's real activities (`activities.AgentActivities`) wired to a fake LLM endpoint."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client

from activities.agent_activities import AgentActivities
from activities.tools import build_default_registry
from runtime.settings import Settings

REAL = "real activities.AgentActivities"
API_KEY = "bench-key"
"""The key the bench's activities send (the fair floor sends it too)."""


def bench_workspace(workdir: Path) -> Path:
    """The workspace `agent_activities` makes under `workdir` (what `list_dir` lists)."""
    return workdir / "workspace"


@contextlib.asynccontextmanager
async def agent_activities(
    client: Client, base_url: str, workdir: Path, *, live_text: bool = True
) -> AsyncIterator[tuple[list[Callable[..., Any]], str, AgentActivities]]:
    """Yields (activity functions, label for the report, the object owning them). `live_text`
    off for callers without a workflow to publish to (the activities called outside Temporal)."""
    workspace = bench_workspace(workdir)
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.txt").write_text("bench\n")
    settings = Settings(
        llm_base_url=base_url,
        llm_api_key=API_KEY,
        llm_model="bench-model",
        workspace=workspace,
        state_dir=workdir / "state",
        stream_deltas=live_text,
    )
    real = AgentActivities(client, settings, build_default_registry(workspace))
    try:
        yield list(real.all()), REAL, real
    finally:
        await real.aclose()
