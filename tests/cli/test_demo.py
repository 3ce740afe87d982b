"""`python -m starter demo` as a user runs it: once on the session dev server (a server answers at
TEMPORAL_ADDRESS), once with nothing at the address (it starts and stops its own embedded server).
"""

from __future__ import annotations

import os
import re

from temporalio.client import Client

from tests.cli.test_starter import Result, starter
from tests.ports import free_port

EXPECTED_LINES = [
    "[r0] approval call_1 approved by policy rule 0",
    '[r1] tool_call call_2 delete_path {"path": "logs"} (needs approval)',
    "[r1] approval call_2 approved by demo",
    "[r0] approval call_1 rejected by demo: check what is in tmp first",
    "[r0] tool_result call_1 run_command: Rejected: check what is in tmp first",
    "[r1] error: Agent run cancelled: changed my mind",
    "finished: cancelled",
    '[r0] awaiting_approval call_1 run_command {"command": "echo hello > hello.txt"}',
    "[r0] approval call_1 approved by policy rule 1",
    "  ana approves, signing with ana.key",
    "  counted: 1 of 2 approvals: ana; who may answer: ops",
    "  ana again approves, signing with ana.key",
    "  ana again is refused: ana has already answered call 'call_2' (the same person counts once)",
    "  ben approves, signing with ben.key",
    "  counted: the call is decided",
    "[r1] approval_vote call_2 approved by ana (ops): 1 of 2 approvals",
    "[r1] approval_vote call_2 approved by ben (ops): 2 of 2 approvals",
    "[r1] approval call_2 approved by ana, ben",
    '[r0] tool_call call_1 delegate {"task": "delete the tmp folder"}',
]
SUB_AGENT_LINES = [
    ("[r0] sub_agent_started call_1 demo-", ".call_1: delete the tmp folder"),
    ("[r0] sub_agent_waiting call_1 demo-", 'waits for call_2 delete_path {"path": "tmp"}'),
    ("  demo approves call_2 delete_path ", "on the sub-agent demo-"),
    ("[r0] sub_agent_finished call_1 demo-", ": stop"),
    ("assistant: Sub-agent demo-", "answered: Deleted tmp."),
]
KEYS_MADE = re.compile(
    r"two people of ops, each with a key made now, offline, by (ssh-keygen -t ed25519|cryptography):"
    r" ana SHA256:[A-Za-z0-9+/]{43}, ben SHA256:[A-Za-z0-9+/]{43}"
)
"""The demo's two keys are made when it runs (no key is built in), offline."""


def demo_env(address: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "AGENT_"))}
    env["TEMPORAL_ADDRESS"] = address
    # The demo always uses the scripted model, even when an LLM is configured.
    env["LLM_BASE_URL"] = "http://127.0.0.1:9/v1"
    return env


def check_transcript(result: Result) -> list[str]:
    assert result.code == 0, result
    lines = result.stdout.splitlines()
    for expected in EXPECTED_LINES:
        assert expected in lines, (expected, result.stdout)
    assert any(line.startswith("assistant: Deleted logs.") for line in lines)
    assert any(
        line.startswith("assistant: ") and "check what is in tmp first" in line for line in lines
    )
    for start, within in SUB_AGENT_LINES:
        assert any(line.startswith(start) and within in line for line in lines), (start, within)
    assert "model: scripted (rule-based, not an LLM)" in result.stdout
    assert [line for line in lines if KEYS_MADE.fullmatch(line)], result.stdout
    assert "  ok   ana's second approval was refused: the same person counts once" in lines
    assert "FAIL" not in result.stdout
    assert lines[-1].startswith("demo passed")
    return lines


async def test_demo_on_a_running_server(client: Client) -> None:
    address = client.service_client.config.target_host
    result = await starter("demo", env=demo_env(address), timeout=90)
    lines = check_transcript(result)
    assert lines[0] == f"using the Temporal server at {address} (namespace default)"


async def test_demo_starts_its_own_server() -> None:
    port = free_port()
    result = await starter("demo", env=demo_env(f"127.0.0.1:{port}"), timeout=120)
    lines = check_transcript(result)
    assert lines[0].startswith(f"no Temporal server at 127.0.0.1:{port}; starting an embedded")
    assert "Temporal Server:" not in result.stdout  # the server's banner is kept out
