"""A rule of `AGENT_POLICY_FILE` that can never match stops the worker's start in one line
(exit 2), checked once every tool is known: the real `python worker.py`, with the real
`mcp-server-time` for rules about an MCP server's tools. So does an enforced approver rule no one
in AGENT_APPROVERS_FILE could meet, a bad line of that file, and the retired AGENT_APPROVER_KEY;
a path the worker may not look at (started as another user) never does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from activities.plugin import AgentPlugin
from runtime.settings import Settings
from tests.people import make_people
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


def approver_rule(groups: list[str], count: int = 1) -> dict[str, Any]:
    rule = {
        "tool": "delete_path",
        "decision": "ask",
        "approvers": {"groups": groups, "count": count},
    }
    return {"enforced": [rule]}


@pytest.mark.parametrize(
    ("rules", "why"),
    [
        (
            approver_rule(["opps"]),
            "rule 0 (enforced, delete_path) asks opps to approve, and no one in the approvers"
            " file is in it",
        ),
        (
            approver_rule(["ops"], count=3),
            "rule 0 (enforced, delete_path) asks 3 people of ops, and the approvers file has 2",
        ),
    ],
)
def test_an_enforced_rule_no_one_could_meet_stops_the_worker(tmp_path, rules, why):
    people = make_people(tmp_path / "people", {"ann": ["ops"], "ben": ["ops", "dev"]})
    done = start_worker_process(tmp_path, rules, AGENT_APPROVERS_FILE=str(people.path))
    assert done.returncode == 2, done.stderr
    assert said(done) == [
        f"worker: AGENT_POLICY_FILE {tmp_path / 'policy.json'}: {why} (AGENT_APPROVERS_FILE"
        f" {people.path}); not starting"
    ]
    without = start_worker_process(tmp_path, approver_rule(["ops"]))
    assert without.returncode == 2, without.stderr
    assert said(without)[-1].endswith(
        "a rule names approvers, whose signed answers the worker verifies with their keys: set"
        " AGENT_APPROVERS_FILE; not starting"
    )


def test_a_bad_approvers_line_or_the_retired_key_stops_the_worker(tmp_path):
    people = make_people(tmp_path / "people", {"ann": ["ops"]})
    people.path.write_text(people.path.read_text() + "ben ops via:web\n")
    done = start_worker_process(tmp_path, {}, AGENT_APPROVERS_FILE=str(people.path))
    assert done.returncode == 2, done.stderr
    assert said(done) == [
        "worker: AGENT_APPROVERS_FILE line 3: via:web names no signing service (a `web @service"
        " KEY` line); not starting"
    ]
    retired = start_worker_process(tmp_path, {}, AGENT_APPROVER_KEY="c2VjcmV0")
    assert retired.returncode == 2, retired.stderr
    assert said(retired) == [
        "worker: AGENT_APPROVER_KEY is retired: each person signs with their own key; list people"
        " and their keys in AGENT_APPROVERS_FILE (docs/approvers.md)"
    ]


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv"
)
def test_a_path_the_worker_cannot_stat_never_stops_it():
    """The worker started as another user (nobody), with a Python whose path runs through a
    folder that user may not look into: every path it checks at start that cannot be stat'ed
    (PermissionError) counts as missing, and the worker gets as far as Temporal."""
    tmp_path = Path(tempfile.mkdtemp(prefix="unstat-"))  # outside pytest's folder, which is 0700
    try:
        _start_as_nobody(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _start_as_nobody(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    locked = tmp_path / "locked"
    (venv / "bin").mkdir(parents=True)
    locked.mkdir()
    (locked / "python").symlink_to(Path(sys.executable).resolve())
    locked.chmod(0o700)
    (venv / "bin" / "python").symlink_to(locked / "python")
    (venv / "lib").symlink_to(Path(sys.prefix) / "lib")
    shutil.copy(Path(sys.prefix) / "pyvenv.cfg", venv / "pyvenv.cfg")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    tmp_path.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_"))}
    env.update(
        HOME=str(shared),
        TEMPORAL_ADDRESS="127.0.0.1:1",
        AGENT_WORKSPACE=str(shared / "ws"),
        AGENT_STATE_DIR=str(shared / "state"),
        AGENT_SANDBOX="off",
    )
    command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    done = subprocess.run(
        [*command, str(venv / "bin" / "python"), "worker.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    assert said(done)[-1].startswith("worker: cannot reach Temporal at 127.0.0.1:1"), done.stderr


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
