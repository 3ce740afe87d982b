"""`python -m starter audit W [--json]` as a real process against the session dev server and a
worker with the real activities and the scripted model: every decision of a run in order (the
rule's and the person's, an edit marked, a reason made visible), the `--json` form exactly the
`audit` query's answer (which the `temporal` CLI reads too), a clear error for an unknown run."""

from __future__ import annotations

import json
import re

from tests.cli import test_starter
from tests.cli.test_starter import Agent, new_id, start_waiting
from tests.cli.test_temporal_cli import Cli
from tests.helpers import wait_for_phase
from workflows.model import AuditView

agent = test_starter.agent  # the fixture: a worker with the real activities, the scripted model


async def test_audit_lists_the_rules_and_the_peoples_decisions_in_order(
    agent: Agent, encrypted: bool
) -> None:
    workflow_id = new_id()
    started = await agent.cli(
        "run", "--no-follow", "--id", workflow_id, "--allow", "list_dir",
        "Please delete the logs folder",
    )  # fmt: skip
    assert started.code == 0, started
    await wait_for_phase(agent.handle(workflow_id), "awaiting_approval")
    approved = await agent.cli(
        "approve", workflow_id, "call_2", "--approver", "ann", "--yes",
        "--arguments", '{"path": "logs/old.log"}',
    )  # fmt: skip
    assert approved.code == 0, approved
    await agent.handle(workflow_id).result()

    result = await agent.cli("audit", workflow_id)
    assert result.code == 0, result
    lines = result.stdout.splitlines()
    description = await agent.handle(workflow_id).describe()
    first_run = description.raw_description.workflow_execution_info.first_run_id
    assert lines[0] == f"audit of {workflow_id} (run id {first_run}): 2 decisions"
    assert lines[1] == (
        "  approved by people 1, rejected by people 0, decided by rules 1,"
        " by the approval timeout 0"
    )
    assert lines[2].startswith("  tokens: ") and lines[2].endswith(" completion")
    header = next(i for i, line in enumerate(lines) if line.startswith("#"))
    assert lines[header].split() == ["#", "at", "call", "tool", "decision", "by", "arguments"]
    first, second = lines[header + 1], lines[header + 2]
    assert first.split()[0] == "1" and re.search(r' rule 0 +\{"path": "\."\}$', first)
    assert " call_1 " in first and " list_dir " in first and " approved " in first
    assert second.split()[0] == "2" and " call_2 " in second and " delete_path " in second
    assert re.search(r' person ann +\{"path": "logs/old\.log"\} \(edited\)$', second)
    # The columns line up: every cell starts where its header does.
    for column in ("call", "tool", "decision", "by", "arguments"):
        at = lines[header].index(column)
        assert first[at - 2 : at] == "  " and first[at] != " ", column
        assert second[at - 2 : at] == "  " and second[at] != " ", column

    as_json = await agent.cli("audit", workflow_id, "--json")
    assert as_json.code == 0, as_json
    assert len(as_json.stdout.splitlines()) == 1
    queried = await agent.handle(workflow_id).query("audit", result_type=AuditView)
    assert json.loads(as_json.stdout) == queried.model_dump(mode="json")
    if not encrypted:  # the `temporal` CLI reads the same query (sealed payloads need the codec)
        from_cli = await Cli(agent.address).query(workflow_id, "audit")
        assert AuditView.model_validate(from_cli) == queried


async def test_audit_shows_a_reason_as_people_see_it_and_refuses_an_unknown_run(
    agent: Agent,
) -> None:
    workflow_id = await start_waiting(agent, "Please delete notes.txt", "call_2")
    rejected = await agent.cli(
        "reject",
        workflow_id,
        "call_2",
        "--approver",
        "bo",
        "--yes",
        "--reason",
        "no\x1b[2K\u202eok",
    )
    assert rejected.code == 0, rejected
    await agent.handle(workflow_id).result()
    result = await agent.cli("audit", workflow_id)
    assert result.code == 0, result
    lines = result.stdout.splitlines()
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    row = next(line for line in lines if " call_2 " in line)
    assert " rejected " in row and re.search(r' person bo +\{"path": "notes\.txt"\}$', row)
    assert lines[lines.index(row) + 1] == "   reason: no\\u001b[2K\\u202eok"

    missing = await agent.cli("audit", "no-such-run-here")
    assert missing.code == 1
    assert missing.stdout == ""
    assert (
        missing.stderr.strip()
        == "error: no workflow with id 'no-such-run-here' in namespace 'default'"
    )
