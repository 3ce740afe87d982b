"""The audit lists every call answered with a person's remembered no: a real worker (the real
model client against the fake OpenAI-compatible server on 127.0.0.1, which asks for the same
command again after a person rejected it), and the real `python -m starter reject` and `audit`.
The second call is not asked about; the audit says it was rejected, by whom first, that the
answer was remembered, and why."""

from __future__ import annotations

import json

from tests import fake_openai
from tests.cli import test_starter_session_transcript
from tests.cli.test_starter import Agent, start_waiting

model = test_starter_session_transcript.model  # the fixtures: the fake model server, and a
agent = test_starter_session_transcript.agent  # worker with the real activities talking to it

RM = '{"command": "rm -rf tmp"}'


async def test_the_audit_lists_a_call_answered_with_a_remembered_no(
    agent: Agent, model: fake_openai.FakeOpenAIServer
) -> None:
    model.enqueue(
        fake_openai.tool_calls(("call_1", "run_command", RM)),
        fake_openai.tool_calls(("call_2", "run_command", RM)),
        fake_openai.text("I will leave tmp alone."),
    )
    workflow_id = await start_waiting(agent, "Please clean up tmp", "call_1")
    rejected = await agent.cli(
        "reject", workflow_id, "call_1", "--reason", "keep tmp", "--approver", "ann", "--yes"
    )
    assert rejected.code == 0, rejected
    result = await agent.handle(workflow_id).result()
    assert result.finish_reason == "stop", result
    assert (agent.workspace / "tmp").exists()

    table = await agent.cli("audit", workflow_id)
    assert table.code == 0, table
    rows = {line.split()[4]: line for line in table.stdout.splitlines() if " run_command " in line}
    assert set(rows) == {"call_1", "call_2"}, table.stdout
    assert " rejected " in rows["call_1"] and " person ann " in rows["call_1"], table.stdout
    assert " rejected " in rows["call_2"], table.stdout
    assert " person ann (remembered) " in rows["call_2"], table.stdout
    assert table.stdout.count("reason: keep tmp") == 2, table.stdout
    assert "rejected by people 1," in table.stdout and "with a remembered no 1" in table.stdout

    shown = await agent.cli("--json", "audit", workflow_id)
    assert shown.code == 0, shown
    view = json.loads(shown.stdout)
    [first, again] = [d for d in view["decisions"] if d["tool"] == "run_command"]
    assert first["call_id"] == "call_1" and "remembered" not in first
    assert again == {
        **again,
        "call_id": "call_2",
        "approved": False,
        "source": "person",
        "approver": "ann",
        "reason": "keep tmp",
        "remembered": True,
    }
    assert view["counts"]["rejected_by_person"] == 1 and view["counts"]["remembered"] == 1
