"""Approval rules from the command line, every command a real `python -m starter` process
against the session dev server and a worker with the real activities and the scripted model:
`run --allow/--deny/--policy`, `approve --remember/--arguments`, `reject --remember`, `policy W`,
`policy W --set FILE`; and the same through the `temporal` CLI (`policy` query,
`set_approval_policy` update, a run started with rules)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli import test_starter
from tests.cli.test_starter import Agent, new_id, start_waiting
from tests.cli.test_temporal_cli import Cli
from tests.helpers import events, of_type, wait_for_phase

agent = test_starter.agent  # the fixture: a worker with the real activities, the scripted model


async def test_run_with_rules_from_flags_and_a_file(agent: Agent, tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"rules": [{"tool": "delete_path", "decision": "ask"}]}))
    workflow_id = new_id()
    # The echo is decided by the first rule; nothing waits for a person.
    started = await agent.cli(
        "run",
        "--no-follow",
        "--id",
        workflow_id,
        "--allow",
        "run_command:command=echo *",
        "--deny",
        "read_file",
        "--policy",
        str(rules),
        "run: echo policy",
    )
    assert started.code == 0, started
    handle = agent.handle(workflow_id)
    result = await handle.result()
    log = await events(handle)
    decided = [(e.call_id, e.approved, e.source, e.rule) for e in of_type(log, "approval")]
    assert decided == [("call_1", True, "policy", 0)]
    assert result.finish_reason == "stop"
    shown = await agent.cli("policy", workflow_id)
    assert shown.code == 0, shown
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["0", "run", "allow", "run_command", "when", "command=echo", "*"]
    assert lines[1].split()[:4] == ["1", "run", "deny", "read_file"]
    assert lines[2].split()[:4] == ["2", "run", "ask", "delete_path"]
    history = await agent.cli("history", workflow_id)
    assert "approval call_1 approved by policy rule 0" in history.stdout


async def test_approve_remember_and_arguments(agent: Agent) -> None:
    workflow_id = await start_waiting(agent, "run: echo original", "call_1")
    bad = await agent.cli("approve", workflow_id, "call_1", "--yes", "--arguments", "[1]")
    assert bad.code != 0 and "arguments" in bad.stderr
    done = await agent.cli(
        "approve",
        workflow_id,
        "call_1",
        "--yes",
        "--remember",
        "--arguments",
        '{"command": "echo edited"}',
        "--approver",
        "ann",
    )
    assert done.code == 0, done
    assert 'with arguments {"command": "echo edited"}' in done.stdout
    assert "from now on allowed in this run" in done.stdout
    handle = agent.handle(workflow_id)
    result = await handle.result()
    tools = [m.content for m in result.messages if m.role == "tool"]
    assert '"stdout": "edited\\n"' in tools[0]
    shown = await agent.cli("policy", workflow_id, "--json")
    rules = json.loads(shown.stdout.splitlines()[-1])["rules"]
    assert [(r["tool"], r["decision"], r["origin"]) for r in rules] == [
        ("run_command", "allow", "run")
    ]


async def test_reject_remember_and_policy_set(agent: Agent, tmp_path: Path) -> None:
    workflow_id = await start_waiting(agent, "Please delete the logs folder", "call_2")
    replaced = tmp_path / "new.json"
    replaced.write_text(
        json.dumps({"rules": [{"tool": "delete_path", "decision": "deny", "reason": "no"}]})
    )
    invalid = tmp_path / "bad.json"
    invalid.write_text(json.dumps({"rules": [{"tool": "x", "decision": "perhaps"}]}))
    refused = await agent.cli("policy", workflow_id, "--set", str(invalid))
    assert refused.code != 0 and "decision" in refused.stderr
    assert (await wait_for_phase(agent.handle(workflow_id), "awaiting_approval")).pending_approvals
    set_ = await agent.cli("policy", workflow_id, "--set", str(replaced))
    assert set_.code == 0, set_
    assert "run      deny  delete_path (no)" in set_.stdout
    result = await agent.handle(workflow_id).result()
    assert [m.content for m in result.messages if m.role == "tool"][-1] == "Rejected: no"
    # reject --remember: the rule is the run's from then on.
    other = await start_waiting(agent, "run: echo x", "call_1")
    done = await agent.cli(
        "reject", other, "call_1", "--reason", "not today", "--remember", "--yes"
    )
    assert done.code == 0 and "from now on denied in this run" in done.stdout, done
    shown = await agent.cli("policy", other)
    assert "run      deny  run_command (not today)" in shown.stdout


async def test_the_temporal_cli_reads_and_sets_the_rules(agent: Agent, env) -> None:
    cli = Cli(env.client.service_client.config.target_host)
    workflow_id = new_id()
    body = {
        "messages": [{"role": "user", "content": "run: echo hi"}],
        "options": {"approval_policy": {"rules": [{"tool": "list_dir", "decision": "ask"}]}},
    }
    await cli.run(
        "workflow",
        "start",
        "--type",
        "AgentWorkflow",
        "--task-queue",
        agent.queue,
        "--workflow-id",
        workflow_id,
        "--input",
        json.dumps(body),
    )
    await wait_for_phase(agent.handle(workflow_id), "awaiting_approval")
    _, out, _ = await cli.run(
        "workflow", "query", "--workflow-id", workflow_id, "--name", "policy", "--output", "json"
    )
    view = json.loads(out)["queryResult"][0]
    assert view["rules"] == [
        {"tool": "list_dir", "when": None, "decision": "ask", "reason": None, "origin": "run"}
    ]
    rules = {"rules": [{"tool": "run_command", "decision": "allow"}]}
    _, out, _ = await cli.run(
        "workflow",
        "update",
        "execute",
        "--workflow-id",
        workflow_id,
        "--name",
        "set_approval_policy",
        "--input",
        json.dumps(rules),
        "--output",
        "json",
    )
    assert json.loads(out)["result"]["rules"][0]["decision"] == "allow"
    result = await agent.handle(workflow_id).result()
    assert result.finish_reason == "stop"
    assert '"exit_code": 0' in next(m.content for m in result.messages if m.role == "tool")
