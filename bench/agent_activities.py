"""The agent's real activities (`activities.AgentActivities`) wired to a fake LLM endpoint."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client

from activities.agent_activities import AgentActivities
from activities.llm import OpenAIChatClient
from activities.tools import build_default_registry
from runtime.settings import Settings

REAL = "real activities.AgentActivities"


@contextlib.asynccontextmanager
async def agent_activities(
    client: Client, base_url: str, workdir: Path, *, live_text: bool = True
) -> AsyncIterator[tuple[list[Callable[..., Any]], str, AgentActivities]]:
    """Yields (activity functions, label for the report, the object owning them). `live_text`
    off for callers without a workflow to publish to (the in-process floor)."""
    workspace = workdir / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.txt").write_text("bench\n")
    settings = Settings(
        llm_base_url=base_url,
        llm_api_key="bench-key",
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


def model_client(real: AgentActivities) -> OpenAIChatClient:
    """The agent's own model client (its settings, its connection pool), for the fair floor: the
    floor's model call then costs exactly what the agent's does on the HTTP side."""
    client = real._llm
    if client is None:
        raise RuntimeError("the bench's activities have no model server (LLM_BASE_URL)")
    return client
