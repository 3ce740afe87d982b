"""Figure 9, what an MCP tool adds to a tool call: `time__get_current_time` of the real
`mcp-server-time` (a stdio process, one session kept by the worker) against the built-in
`read_file` of a small file, both through `execute_tool`'s own code path (`run_tool`: argument
parsing, the envelope, the bound on the output), interleaved in one run; median per call. No
Temporal in the loop: scheduling the activity costs both the same."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from activities.agent_activities import AgentActivities
from activities.plugin import AgentPlugin
from activities.tools.sandbox import choose_policy
from bench.harness import Bench, median
from bench.report import Figure
from runtime.settings import Settings
from workflows.model import ToolRequest

CALLS = {"quick": 20, "full": 200}
"""Calls per tool."""


async def seconds(acts: AgentActivities, name: str, arguments: str) -> float:
    request = ToolRequest(workflow_id="bench-mcp", call_id="call", name=name, arguments=arguments)
    started = time.perf_counter()
    content = await acts.run_tool(request)
    elapsed = time.perf_counter() - started
    if not json.loads(content).get("ok"):
        raise RuntimeError(f"{name} failed: {content}")
    return elapsed


async def measure(b: Bench) -> list[Figure]:
    count = CALLS.get(b.profile.name, CALLS["full"])
    workspace = b.workdir / "mcp-workspace"
    workspace.mkdir(exist_ok=True)
    (workspace / "notes.txt").write_text("a short note\n")
    config = b.workdir / "mcp.json"
    server = str(Path(sys.executable).parent / "mcp-server-time")
    config.write_text(json.dumps({"mcpServers": {"time": {"command": server}}}))
    settings = Settings(
        llm_base_url=None,
        llm_api_key=None,
        llm_model="bench",
        workspace=workspace,
        state_dir=b.workdir / "mcp-state",
        mcp_config=config,
    )
    plugin = AgentPlugin(settings=settings, commands=choose_policy("off"))
    started = time.perf_counter()
    await plugin.start()
    start_seconds = time.perf_counter() - started
    mcp_call = ("time__get_current_time", '{"timezone": "UTC"}')
    builtin_call = ("read_file", '{"path": "notes.txt"}')
    mcp_times: list[float] = []
    builtin_times: list[float] = []
    try:
        acts = AgentActivities(b.client, settings, plugin.registry)
        for call in (mcp_call, builtin_call):  # warm-up
            await seconds(acts, *call)
        for i in range(count):
            first, second = (mcp_call, builtin_call) if i % 2 == 0 else (builtin_call, mcp_call)
            for call in (first, second):
                (mcp_times if call is mcp_call else builtin_times).append(
                    await seconds(acts, *call)
                )
        await acts.aclose()
    finally:
        await plugin.aclose()
    b.details["mcp"] = {
        "mcp_seconds": mcp_times,
        "builtin_seconds": builtin_times,
        "server_start_seconds": start_seconds,
    }
    return [
        Figure(
            key="mcp.per_call",
            label="9. MCP tool call vs built-in, per call",
            value=1000 * median(mcp_times),
            unit="ms",
            floor=1000 * median(builtin_times),
            floor_label="built-in read_file",
            note=(
                f"{count} calls each, interleaved; mcp-server-time over stdio; the server's"
                f" start (once per worker) took {start_seconds:.2f} s; report only"
            ),
        )
    ]
