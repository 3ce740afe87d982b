"""`python -m starter answer W CALL TEXT` as a real process, against the session dev server and a
worker with the real activities and the scripted model: the model's question (`ask_user`) shown
by `pending` and `watch`, answered from the command line, the answer reaching the model as the
tool's result; refusals exit 1 with one line and change nothing; the audit says who answered."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli import test_starter, test_starter_signed
from tests.cli.test_starter import Agent, new_id
from tests.helpers import events, of_type, status, wait_for_phase
from tests.people import ssh_keygen

agent = test_starter.agent  # the fixture: a worker with the real activities, the scripted model

ASK = "ask me: Which folder should I clean up next? (options: tmp, logs)"


async def asking(agent: Agent, prompt: str = ASK) -> str:
    workflow_id = new_id()
    started = await agent.cli("run", "--no-follow", "--ask-user", "--id", workflow_id, prompt)
    assert started.code == 0, started
    st = await wait_for_phase(agent.handle(workflow_id), "awaiting_answer")
    assert [q.call_id for q in st.pending_questions] == ["call_1"]
    return workflow_id


async def test_a_question_is_listed_answered_and_read_by_the_model(agent: Agent) -> None:
    workflow_id = await asking(agent)
    pending = await agent.cli("pending")
    assert pending.code == 0, pending
    assert 'question call_1 "Which folder should I clean up next?" (one of: tmp, logs)' in (
        pending.stdout
    )
    assert f"answer {workflow_id} call_1 TEXT" in pending.stdout

    wrong = await agent.cli("answer", workflow_id, "call_1", "green")
    assert wrong.code == 1, wrong
    assert "'green' is not one of the options: tmp, logs" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1
    unknown = await agent.cli("answer", workflow_id, "call_7", "tmp")
    assert unknown.code == 1, unknown
    assert "call 'call_7' is not a question waiting for an answer (waiting: call_1)" in (
        unknown.stderr
    )
    assert [q.call_id for q in (await status(agent.handle(workflow_id))).pending_questions] == [
        "call_1"
    ]

    answered = await agent.cli("answer", workflow_id, "call_1", "tmp", "--approver", "ann")
    assert answered.code == 0, answered
    assert 'call_1 answered "tmp" by ann; questions still waiting: none' in answered.stdout
    result = await agent.handle(workflow_id).result()
    assert result.messages[-1].content == "You answered: tmp"
    tool = next(m for m in result.messages if m.role == "tool")
    assert json.loads(tool.content)["data"] == {"answer": "tmp"}

    watched = await agent.cli("watch", workflow_id)
    lines = watched.stdout.splitlines()
    assert '[r0] question call_1 "Which folder should I clean up next?" (one of: tmp, logs)' in (
        lines
    )
    assert '[r0] answer call_1 "tmp" by ann' in lines
    again = await agent.cli("answer", workflow_id, "call_1", "tmp")
    assert again.code != 0 and "has already finished" in again.stderr

    audit = await agent.cli("audit", workflow_id)
    assert "questions answered 1" in audit.stdout
    row = next(line for line in audit.stdout.splitlines() if "ask_user" in line)
    assert "answered" in row and "person ann" in row and 'answer: "tmp"' in row


async def test_several_options_one_per_text_and_free_text_joined(agent: Agent) -> None:
    several = await asking(agent, "ask me: Which ones? (any of: tmp, logs, notes)")
    answered = await agent.cli("answer", several, "call_1", "logs", "tmp")
    assert answered.code == 0, answered
    result = await agent.handle(several).result()
    assert result.messages[-1].content == "You chose: logs, tmp."

    free = await asking(agent, "ask me: What should the report be called?")
    answered = await agent.cli("answer", free, "call_1", "weekly", "report")
    assert answered.code == 0, answered
    result = await agent.handle(free).result()
    assert result.messages[-1].content == "You answered: weekly report"


async def test_ask_user_is_not_offered_without_the_option(agent: Agent) -> None:
    workflow_id = new_id()
    started = await agent.cli("run", "--id", workflow_id, ASK)
    assert started.code == 0, started
    assert "I would use the ask_user tool for that, but it is not available" in started.stdout


keyed = test_starter_signed.keyed  # the fixture: a worker with an approvers file


async def test_answer_signs_with_the_persons_key_and_another_key_is_refused(
    keyed: test_starter_signed.Keyed, tmp_path: Path
) -> None:
    workflow_id = await asking(keyed.agent)
    stranger = ssh_keygen(tmp_path / "stranger")
    unknown = await keyed.cli("answer", workflow_id, "call_1", "tmp", "--key", str(stranger))
    assert unknown.code == 2 and "is not in AGENT_APPROVERS_FILE" in unknown.stderr, unknown
    ann = str(keyed.people.key_files["ann"])
    someone = await keyed.cli(
        "answer", workflow_id, "call_1", "tmp", "--approver", "mallory", "--key", ann
    )
    assert someone.code == 2 and "which is ann's key" in someone.stderr, someone
    taken = await keyed.cli("answer", workflow_id, "call_1", "tmp", "--key", ann, USER="ben")
    assert taken.code == 0, taken
    await keyed.agent.handle(workflow_id).result()
    [answer] = of_type(await events(keyed.agent.handle(workflow_id)), "answer")
    assert answer.approver == "ann" and answer.groups == ["ops"]
