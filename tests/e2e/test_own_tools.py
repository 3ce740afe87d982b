"""Your own tools (`AGENT_TOOLS`), the built-ins left out (`AGENT_BUILTIN_TOOLS=false`), and
everything that stops the worker's start with one line: through the production worker
(`run_worker`, with the OpenAI-compatible server on 127.0.0.1) and the real `python worker.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from activities.plugin import AgentPlugin, run_worker
from activities.tools import Tool
from activities.tools.loading import ToolLoadError
from runtime.settings import Settings
from tests.fake_openai import FakeOpenAI, FakeOpenAIServer, text, tool_calls
from tests.helpers import start_run
from tests.reliability.processes import ROOT
from workflows.model import AgentRunInput

BIN = Path(sys.executable).parent


@contextlib.asynccontextmanager
async def agent_worker(
    client: Client, task_queue: str, tmp_path: Path, **environ: str
) -> AsyncIterator[FakeOpenAIServer]:
    with FakeOpenAI() as fake:
        settings = Settings.from_env(
            {
                "LLM_BASE_URL": fake.base_url,
                "LLM_API_KEY": "sk-test",
                "AGENT_WORKSPACE": str(tmp_path / "ws"),
                "AGENT_STATE_DIR": str(tmp_path / "state"),
                **environ,
            }
        )
        stop = asyncio.Event()
        worker = asyncio.create_task(run_worker(client, settings, queue=task_queue, stop=stop))
        try:
            yield fake
        finally:
            stop.set()
            await worker


def offered(fake: FakeOpenAIServer) -> list[str]:
    return [t["function"]["name"] for t in fake.requests[0]["tools"]]


def tool_results(result: Any) -> list[dict[str, Any]]:
    return [json.loads(m.content) for m in result.messages if m.role == "tool"]


async def test_your_own_tools_run_beside_the_built_ins(client, task_queue, tmp_path):
    tools = "tests.own_tools:SHOUT, tests.own_tools:more_tools"
    async with agent_worker(client, task_queue, tmp_path, AGENT_TOOLS=tools) as fake:
        fake.enqueue(
            tool_calls(
                ("call_1", "shout", '{"text": "hello"}'),
                ("call_2", "count_words", '{"text": "one two three"}'),
                ("call_3", "shout", '{"text": 5}'),
                ("call_4", "list_dir", '{"path": "."}'),
            ),
            text("done"),
        )
        result = await (
            await start_run(client, task_queue, AgentRunInput.from_prompt("go"))
        ).result()
    assert offered(fake) == [
        "list_dir",
        "read_file",
        "run_command",
        "delete_path",
        "shout",
        "count_words",
    ]
    shouted, counted, refused, listed = tool_results(result)
    assert shouted == {"ok": True, "data": {"shouted": "HELLO!"}}
    assert counted == {"ok": True, "data": 3}
    assert refused == {"ok": False, "error": "shout needs a 'text' string", "data": None}
    assert listed["ok"] is True
    # The model's second request carried those results.
    sent = [m["content"] for m in fake.requests[1]["messages"] if m["role"] == "tool"]
    assert json.loads(sent[0]) == shouted


async def test_without_the_built_ins_only_your_tools_are_offered(client, task_queue, tmp_path):
    async with agent_worker(
        client,
        task_queue,
        tmp_path,
        AGENT_TOOLS="tests.own_tools:SHOUT",
        AGENT_BUILTIN_TOOLS="false",
    ) as fake:
        fake.enqueue(
            tool_calls(
                ("call_1", "read_file", '{"path": "x"}'), ("call_2", "shout", '{"text": "a"}')
            ),
            text("done"),
        )
        result = await (
            await start_run(client, task_queue, AgentRunInput.from_prompt("go"))
        ).result()
    assert offered(fake) == ["shout"]
    missing, shouted = [m.content for m in result.messages if m.role == "tool"]
    assert missing == "Tool 'read_file' not found"
    assert json.loads(shouted) == {"ok": True, "data": {"shouted": "A!"}}


@pytest.mark.parametrize("value", ["false", "0", "no"])
def test_builtin_tools_setting(value, tmp_path):
    environ = {"AGENT_WORKSPACE": str(tmp_path / "ws"), "AGENT_BUILTIN_TOOLS": value}
    assert Settings.from_env(environ).builtin_tools is False
    assert Settings.from_env({"AGENT_WORKSPACE": str(tmp_path / "ws")}).builtin_tools is True


# ---------------------------------------------------------------- no start, one line


def run_worker_process(tmp_path: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_")) and k != "PYTHONPATH"
    }
    env.update(
        {
            "TEMPORAL_ADDRESS": "127.0.0.1:1",  # never reached: these fail before connecting
            "AGENT_WORKSPACE": str(tmp_path / "ws"),
            "AGENT_STATE_DIR": str(tmp_path / "state"),
            "AGENT_SANDBOX": "off",
            **environ,
        }
    )
    return subprocess.run(
        [sys.executable, "worker.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=90
    )


def said(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The worker's stderr lines, without the warning about commands not being sandboxed."""
    lines = done.stderr.strip().splitlines()
    return [line for line in lines if not line.startswith("worker: warning: run_command")]


def mcp_config(tmp_path: Path, servers: dict[str, Any]) -> str:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return str(path)


@pytest.mark.parametrize(
    ("environ", "code", "line"),
    [
        (
            {"AGENT_TOOLS": "tests.own_tools:CLASHING"},
            2,
            "worker: two tools are named 'read_file' (built-in and AGENT_TOOLS"
            " tests.own_tools:CLASHING); not starting",
        ),
        (
            {"AGENT_TOOLS": "tests.no_such_module:TOOLS"},
            2,
            "worker: AGENT_TOOLS: cannot import tests.no_such_module (ModuleNotFoundError: No"
            " module named 'tests.no_such_module'); not starting",
        ),
        (
            {"AGENT_TOOLS": "tests.own_tools:MISSING"},
            2,
            "worker: AGENT_TOOLS: tests.own_tools has no attribute MISSING; not starting",
        ),
        (
            {"AGENT_TOOLS": "tests.own_tools:NOT_A_TOOL"},
            2,
            "worker: AGENT_TOOLS: tests.own_tools:NOT_A_TOOL is a dict, not a Tool, an iterable"
            " of Tools or a callable returning them; not starting",
        ),
        (
            {"AGENT_TOOLS": "not a spec"},
            2,
            "worker: AGENT_TOOLS lists 'not a spec', which is not package.module:attribute",
        ),
    ],
)
def test_a_tool_that_cannot_be_loaded_stops_the_start_with_one_line(tmp_path, environ, code, line):
    done = run_worker_process(tmp_path, **environ)
    assert done.returncode == code, done.stderr
    assert said(done) == [line]
    assert "worker ready" not in done.stdout


def test_an_mcp_server_that_does_not_start_stops_the_worker_with_one_line(tmp_path):
    servers = {
        "time": {"command": str(BIN / "mcp-server-time")},
        "broken": {"command": "no-such-server"},
    }
    done = run_worker_process(tmp_path, AGENT_MCP_CONFIG=mcp_config(tmp_path, servers))
    assert done.returncode == 1, done.stderr
    (line,) = said(done)
    assert line.startswith("worker: MCP server 'broken' did not start: "), line
    assert line.endswith("; not starting")
    assert "worker ready" not in done.stdout


@pytest.mark.parametrize(
    ("servers", "line"),
    [
        (
            {"my server": {"command": "x"}},
            "worker: MCP server name 'my server' must match ^[a-zA-Z0-9_-]+$ (letters, digits,"
            " '_' and '-'); not starting",
        ),
        (
            {"s": {"command": "x", "approval": "maybe"}},
            "worker: MCP server 's': \"approval\" must be one of always, never, annotations, got"
            " 'maybe'; not starting",
        ),
    ],
)
def test_a_bad_mcp_config_stops_the_worker_with_one_line(tmp_path, servers, line):
    done = run_worker_process(tmp_path, AGENT_MCP_CONFIG=mcp_config(tmp_path, servers))
    assert done.returncode == 2, done.stderr
    assert said(done) == [line]


async def test_an_mcp_tool_that_takes_your_tool_s_name_stops_the_start(tmp_path):
    async def run(_args: dict[str, Any]) -> str:
        return ""

    mine = Tool(name="time__convert_time", description="mine", parameters={}, run=run)
    settings = Settings(
        llm_base_url=None,
        llm_api_key=None,
        llm_model="m",
        workspace=tmp_path,
        state_dir=tmp_path.parent / "state",
        mcp_config=Path(mcp_config(tmp_path, {"time": {"command": str(BIN / "mcp-server-time")}})),
    )
    plugin = AgentPlugin(tools=[mine], settings=settings)
    before = plugin.tool_names
    with pytest.raises(ToolLoadError) as caught:
        await plugin.start()
    await plugin.aclose()
    assert plugin.tool_names == before  # none of the server's tools was added
    assert str(caught.value) == (
        "two tools are named 'time__convert_time' (AgentPlugin(tools=…) and MCP server 'time')"
    )


async def test_two_of_your_tools_with_one_name_are_refused(tmp_path):
    async def run(_args: dict[str, Any]) -> str:
        return ""

    twice = [Tool(name="same", description="", parameters={}, run=run)] * 2
    with pytest.raises(ToolLoadError, match="two tools are named 'same'"):
        AgentPlugin(tools=twice, settings=Settings.from_env({"AGENT_WORKSPACE": str(tmp_path)}))


async def test_the_plugin_refuses_a_client_without_the_agent_s_data_converter(client, task_queue):
    plain = Client(client.service_client, namespace=client.namespace)  # the SDK's default converter
    with pytest.raises(ValueError, match="does not use the agent's data converter"):
        Worker(plain, task_queue=task_queue, plugins=[AgentPlugin(activities=[])])


async def test_a_tool_list_too_big_for_a_run_to_carry_is_refused(tmp_path):
    async def run(_args: dict[str, Any]) -> str:
        return ""

    wordy = Tool(name="wordy", description="w" * 200_000, parameters={}, run=run)
    settings = Settings.from_env({"AGENT_WORKSPACE": str(tmp_path / "ws")})
    with pytest.raises(ToolLoadError, match=r"take 20\d KB, more than the 160 KB a run can carry"):
        AgentPlugin(tools=[wordy], settings=settings)
    # The four built-ins and a modest tool of your own fit easily.
    modest = Tool(name="modest", description="m" * 2_000, parameters={}, run=run)
    assert AgentPlugin(tools=[modest], settings=settings).tool_names[-1] == "modest"
