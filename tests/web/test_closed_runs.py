"""Finished runs on the web with no worker running: the web app on 127.0.0.1 (uvicorn) against
the session dev server, after the production worker that ran the runs (the scripted model) has
stopped. A finished run's page, `GET /api/runs/{id}` and its audit answer from the run's
history, with no query (well within the 30 s a query would wait for a worker); a run refused at
start says why on its page, in the API and in `/runs`."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowFailureError

from runtime.settings import Settings
from tests.web.conftest import serve_web
from worker import run_worker
from workflows.model import AgentRunInput, AgentRunOptions, AgentRunResult

pytestmark = pytest.mark.web

READ_SECONDS = 10.0
"""Well under the 30 s a query waits for a worker (the reads make no query: checked by count)."""
TYPO = {"rules": [{"tool": "run_comand", "decision": "allow"}]}


async def finished_runs(client: Client, queue: str, tmp: Path) -> tuple[str, str]:
    """A run that finished and one refused at start, run by a worker that is stopped after."""
    workspace = tmp / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("remember the milk\n")
    settings = Settings.from_env(
        {"AGENT_WORKSPACE": str(workspace), "AGENT_STATE_DIR": str(tmp / "state")}
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        run_worker(client, settings, queue=queue, stop=stop, ready=lambda _q: ready.set())
    )
    await asyncio.wait_for(ready.wait(), 30)
    done, refused = f"web-done-{uuid.uuid4().hex[:8]}", f"web-refused-{uuid.uuid4().hex[:8]}"
    try:
        ran = await client.execute_workflow(
            "AgentWorkflow",
            AgentRunInput.from_prompt("read notes.txt"),
            id=done,
            task_queue=queue,
            result_type=AgentRunResult,
        )
        assert ran.finish_reason == "stop"
        with pytest.raises(WorkflowFailureError):
            await client.execute_workflow(
                "AgentWorkflow",
                AgentRunInput.from_prompt("list", AgentRunOptions(approval_policy=TYPO)),
                id=refused,
                task_queue=queue,
            )
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    return done, refused


async def timed_get(http: httpx.AsyncClient, path: str) -> tuple[httpx.Response, float]:
    began = time.monotonic()
    response = await http.get(path)
    return response, time.monotonic() - began


async def test_finished_runs_read_without_a_worker(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    done, refused = await finished_runs(client, task_queue, tmp_path)
    (tmp_path / "web").mkdir()
    async with serve_web(client, task_queue, tmp_path / "web", signed_in=True) as served:
        headers = {"Authorization": f"Bearer {served.token}"}
        async with httpx.AsyncClient(base_url=served.url, headers=headers, timeout=60) as http:
            answer, seconds = await timed_get(http, f"/api/runs/{done}")
            assert answer.status_code == 200, answer.text
            assert seconds < READ_SECONDS, seconds
            run: dict[str, Any] = answer.json()
            assert run["status"]["phase"] == "finished"
            assert run["status"]["finish_reason"] == "stop"
            assert [e["type"] for e in run["events"]] == [
                "tool_call",
                "tool_result",
                "text_delta",
                "finished",
            ]
            assert "remember the milk" in run["messages"][-1]["content"]

            audit, seconds = await timed_get(http, f"/api/runs/{done}/audit")
            assert audit.status_code == 200, audit.text
            assert seconds < READ_SECONDS, seconds
            assert audit.json()["decisions"] == []

            page, seconds = await timed_get(http, f"/runs/{done}")
            assert page.status_code == 200
            assert seconds < READ_SECONDS, seconds
            assert 'data-phase="finished"' in page.text
            assert "remember the milk" in page.text
            # Read from the run's history: no query, which would wait for a worker.
            assert [c for c in served.polls.calls if c.startswith("query:")] == []

            said = (await http.get(f"/api/runs/{refused}")).json()
            assert said["status"]["phase"] == "finished"
            assert said["status"]["finish_reason"] == "error"
            assert [e["type"] for e in said["events"]] == ["error", "finished"]
            assert "did you mean 'run_command'?" in said["events"][0]["message"]

            page = await http.get(f"/runs/{refused}")
            assert 'data-finish-reason="error"' in page.text
            assert "did you mean &#39;run_command&#39;?" in page.text

            rows = (await http.get("/api/runs", params={"q": refused})).json()["runs"]
            assert [r["workflow_id"] for r in rows] == [refused]
            assert "did you mean 'run_command'?" in rows[0]["error"]
            listing = await http.get("/runs", params={"q": refused})
            assert "did you mean &#39;run_command&#39;?" in listing.text
