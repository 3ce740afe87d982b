"""The agent's real activities (`activities.AgentActivities`) wired to a fake LLM endpoint, or
the bench's fallback when the package is not importable. The label says which one ran."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client

from bench.fallback_activities import FallbackActivities

REAL = "real activities.AgentActivities"
FALLBACK = "bench fallback activities (activities package missing)"


@contextlib.asynccontextmanager
async def agent_activities(
    client: Client, base_url: str, workdir: Path
) -> AsyncIterator[tuple[list[Callable[..., Any]], str, Any]]:
    """Yields (activity functions, label, the object owning them)."""
    workspace = workdir / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.txt").write_text("bench\n")
    try:
        module = importlib.import_module("activities.agent_activities")
        settings_module = importlib.import_module("activities.settings")
        tools_module = importlib.import_module("activities.tools")
    except ImportError:
        fallback = FallbackActivities(client, base_url, workspace)
        try:
            yield fallback.all(), FALLBACK, fallback
        finally:
            await fallback.aclose()
        return
    settings = settings_module.Settings(
        llm_base_url=base_url,
        llm_api_key="bench-key",
        llm_model="bench-model",
        workspace=workspace,
        state_dir=workdir / "state",
    )
    registry = tools_module.build_default_registry(workspace)
    real = module.AgentActivities(client, settings, registry)
    try:
        yield list(real.all()), REAL, real
    finally:
        await real.aclose()
