"""The updates that put people in charge, driven ONLY through the `temporal` CLI with plain JSON
(an in-process worker with fake activities; every client call is a CLI subprocess):

    temporal workflow update execute --workflow-id W --name submit_answer \
        --input '{"call_id":"call_1","answer":"tmp"}'
    temporal workflow update execute --workflow-id W --name grant_budget --input '{"tokens":100}'
    temporal workflow update execute --workflow-id W --name reopen_approval \
        --input '{"call_id":"call_1"}'

A refused update exits 1 with the workflow's reason on stderr and changes nothing.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.cli.test_temporal_cli import Cli
from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import wait_until, worker_for

QUESTION = '{"question": "Which folder?", "options": ["logs", "tmp"]}'


def run_input(prompt: str, **options: Any) -> str:
    return json.dumps({"messages": [{"role": "user", "content": prompt}], "options": options})


async def update(cli: Cli, workflow_id: str, name: str, body: dict[str, Any]) -> tuple[int, str]:
    code, out, err = await cli.run(
        "workflow", "update", "execute", "--workflow-id", workflow_id, "--name", name,
        "--input", json.dumps(body), check=False,
    )  # fmt: skip
    return code, out + err


async def in_phase(cli: Cli, workflow_id: str, phase: str) -> Any:
    async def reached() -> Any:
        st = await cli.query(workflow_id, "status")
        return st if st["phase"] == phase else None

    return await wait_until(reached)


async def result(cli: Cli, workflow_id: str) -> Any:
    return (await cli.json("workflow", "result", "--workflow-id", workflow_id))["result"]


async def test_a_question_is_answered_with_submit_answer(client):
    cli = Cli(client.service_client.config.target_host)
    queue, wid = f"cli-{uuid.uuid4()}", f"cli-q-{uuid.uuid4()}"
    fake = FakeAgentActivities(replies=[calls(("call_1", "ask_user", QUESTION)), text("tmp then")])
    async with worker_for(client, queue, fake):
        await cli.start(queue, wid, run_input("clean up", ask_user=True))
        st = await in_phase(cli, wid, "awaiting_answer")
        assert st["pending_questions"][0]["question"] == "Which folder?"
        code, said = await update(cli, wid, "submit_answer", {"call_id": "call_1", "answer": "x"})
        assert code == 1 and "not one of the options: logs, tmp" in said, said
        code, said = await update(cli, wid, "submit_answer", {"call_id": "call_9", "answer": "tmp"})
        assert code == 1 and "unknown question 'call_9'" in said, said
        assert (await cli.query(wid, "status"))["phase"] == "awaiting_answer"
        code, said = await update(cli, wid, "submit_answer", {"call_id": "call_1", "answer": "tmp"})
        assert code == 0, said
        done = await result(cli, wid)
    tool = next(m for m in done["messages"] if m["role"] == "tool")
    assert json.loads(tool["content"])["data"] == {"answer": "tmp"}
    assert done["finish_reason"] == "stop"


async def test_a_budget_is_granted_with_grant_budget(client):
    cli = Cli(client.service_client.config.target_host)
    queue, wid = f"cli-{uuid.uuid4()}", f"cli-b-{uuid.uuid4()}"
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "list_dir", '{"path": "."}')), text("listed")]
    )
    async with worker_for(client, queue, fake):
        # the fake model reports 15 tokens for its first reply: over a budget of 10
        await cli.start(queue, wid, run_input("list", max_run_tokens=10))
        st = await in_phase(cli, wid, "budget_exhausted")
        assert st["budget"]["used"] == 15 and st["budget"]["limit"] == 10
        code, said = await update(cli, wid, "grant_budget", {"tokens": 0})
        assert code == 1, said
        assert (await cli.query(wid, "status"))["budget"]["limit"] == 10
        code, said = await update(cli, wid, "grant_budget", {"tokens": 100})
        assert code == 0, said
        done = await result(cli, wid)
    assert done["finish_reason"] == "stop"
    assert len(fake.llm_requests) == 2


async def test_an_expired_call_is_asked_again_with_reopen_approval(client):
    cli = Cli(client.service_client.config.target_host)
    queue, wid = f"cli-{uuid.uuid4()}", f"cli-e-{uuid.uuid4()}"
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "delete_path", '{"path": "logs"}')), text("kept")]
    )
    async with worker_for(client, queue, fake):
        await cli.start(queue, wid, run_input("delete logs", approval_timeout_seconds=2))
        await in_phase(cli, wid, "awaiting_approval")
        code, said = await update(cli, wid, "reopen_approval", {"call_id": "call_1"})
        assert code == 1 and "call_1" in said, said  # not expired yet: refused
        st = await in_phase(cli, wid, "approval_expired")
        assert st["expired"] == ["call_1"], st
        code, said = await update(cli, wid, "reopen_approval", {"call_id": "call_1"})
        assert code == 0, said
        # asked again: a person's answer is taken (a rejection is taken either way)
        code, said = await update(
            cli, wid, "submit_approval", {"call_id": "call_1", "approved": False, "reason": "no"}
        )
        assert code == 0, said
        done = await result(cli, wid)
    assert done["finish_reason"] == "stop"
    tool = next(m for m in done["messages"] if m["role"] == "tool")
    assert "no" in tool["content"]
