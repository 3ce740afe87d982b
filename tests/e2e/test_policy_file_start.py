"""A rule of `AGENT_POLICY_FILE` that can never match stops the worker's start in one line
(exit 2), checked once every tool is known: the real `python worker.py`, with the real
`mcp-server-time` for rules about an MCP server's tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from activities.plugin import AgentPlugin
from runtime.settings import Settings
from tests.reliability.processes import ROOT

BIN = Path(sys.executable).parent
TIME_SERVER = {"time": {"command": str(BIN / "mcp-server-time")}}


def start_worker_process(
    tmp_path: Path, rules: dict[str, Any], **environ: str
) -> subprocess.CompletedProcess[str]:
    """`python worker.py` with these rules; Temporal is never reached (port 1), so a worker that
    got past its checks ends with `cannot reach Temporal`."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(rules))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_")) and k != "PYTHONPATH"
    }
    env.update(
        {
            "TEMPORAL_ADDRESS": "127.0.0.1:1",
            "AGENT_WORKSPACE": str(tmp_path / "ws"),
            "AGENT_STATE_DIR": str(tmp_path / "state"),
            "AGENT_SANDBOX": "off",
            "AGENT_POLICY_FILE": str(policy),
            **environ,
        }
    )
    return subprocess.run(
        [sys.executable, "worker.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=90
    )


def said(done: subprocess.CompletedProcess[str]) -> list[str]:
    lines = done.stderr.strip().splitlines()
    return [line for line in lines if not line.startswith("worker: warning: run_command")]


def mcp_config(tmp_path: Path) -> str:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": TIME_SERVER}))
    return str(path)


@pytest.mark.parametrize(
    ("rules", "why"),
    [
        (
            {"enforced": [{"tool": "mcp.fs.*", "decision": "deny"}]},
            "rule 0 (enforced): tool pattern 'mcp.fs.*' matches none of the worker's tools"
            " (list_dir, read_file, run_command, delete_path) (an MCP server's tools are named"
            " SERVER__TOOL)",
        ),
        (
            {
                "defaults": [
                    {"tool": "read_file", "decision": "allow"},
                    {"tool": "read_file", "when": {" path": "*.env"}, "decision": "deny"},
                ]
            },
            "rule 1 (default): when key ' path' has spaces around it (the parameter is 'path')",
        ),
        (
            {"enforced": [{"tool": "delete_path", "when": {"file": "*"}, "decision": "ask"}]},
            "rule 0 (enforced): when key 'file' is not a parameter of delete_path (its"
            " parameters: path)",
        ),
    ],
)
def test_a_dead_rule_stops_the_worker_with_one_line(tmp_path, rules, why):
    policy = tmp_path / "policy.json"
    done = start_worker_process(tmp_path, rules)
    assert done.returncode == 2, done.stderr
    assert said(done) == [f"worker: AGENT_POLICY_FILE {policy}: {why}; not starting"]
    assert "worker ready" not in done.stdout


def test_rules_about_mcp_tools_are_checked_once_the_servers_started(tmp_path):
    config = mcp_config(tmp_path)
    dead = start_worker_process(
        tmp_path,
        {"enforced": [{"tool": "time__now", "decision": "deny"}]},
        AGENT_MCP_CONFIG=config,
    )
    assert dead.returncode == 2, dead.stderr
    (line,) = said(dead)
    assert "rule 0 (enforced): tool pattern 'time__now' matches none of the worker's tools" in line
    assert "time__get_current_time" in line and "time__convert_time" in line
    wrong_key = start_worker_process(
        tmp_path,
        {"enforced": [{"tool": "time__*", "when": {"timezone": "Europe/*"}, "decision": "deny"}]},
        AGENT_MCP_CONFIG=config,
    )
    assert wrong_key.returncode == 2, wrong_key.stderr
    assert "when key 'timezone' is not a parameter of time__convert_time" in said(wrong_key)[0]
    # rules that match the servers' tools pass the check: the worker goes on to connect
    alive = start_worker_process(
        tmp_path,
        {
            "enforced": [
                {
                    "tool": "time__get_current_time",
                    "when": {"timezone": "Mars/*"},
                    "decision": "deny",
                }
            ],
            "defaults": [{"tool": "time__*", "decision": "allow"}],
        },
        AGENT_MCP_CONFIG=config,
    )
    assert alive.returncode == 1, alive.stderr
    assert said(alive)[-1].startswith("worker: cannot reach Temporal at 127.0.0.1:1"), alive.stderr


async def test_the_plugin_refuses_the_start_and_stops_its_servers(tmp_path):
    """Embedded: `AgentPlugin.start()` raises the same one-line ValueError, with its MCP
    servers stopped again."""
    (tmp_path / "ws").mkdir()
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"enforced": [{"tool": "mcp.time.*", "decision": "deny"}]}))
    settings = Settings(
        llm_base_url=None,
        llm_api_key=None,
        llm_model="scripted",
        workspace=tmp_path / "ws",
        state_dir=tmp_path / "state",
        sandbox="off",
        mcp_config=Path(mcp_config(tmp_path)),
        policy_file=policy,
    )
    plugin = AgentPlugin(settings=settings)
    with pytest.raises(ValueError) as refused:
        await plugin.start()
    assert str(refused.value).startswith(
        f"AGENT_POLICY_FILE {policy}: rule 0 (enforced): tool pattern 'mcp.time.*' matches none"
    )
    assert "time__get_current_time" in str(refused.value)
    assert _time_servers() == [], "the MCP server was left running"


def _time_servers() -> list[Path]:
    """This process's live children that run `mcp-server-time`."""
    return [
        p
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and _child_of_us(p) and b"mcp-server-time" in _cmdline(p)
    ]


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def _child_of_us(proc: Path) -> bool:
    try:
        stat = (proc / "stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]) == os.getpid() and fields[0] != "Z"
