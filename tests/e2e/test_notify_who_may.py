"""A notification says who may answer, end to end: the real `python worker.py` with an approvers
file (ann and ben of ops, each with a key of their own), `AGENT_BUDGET_GROUPS=ops` and
`AGENT_NOTIFY_URL` pointing at the receiver process `python -m tests.notify_receiver`, runs on the
session's dev server with the offline `scripted` model. A call under a run's rule that needs two
of ops is `approval_waiting` with `who_may: {"groups": ["ops"], "count": 2}` (the Slack line: `2
of `ops` may approve`); a run at its token budget is `budget_exhausted` with `who_may:
{"groups": ["ops"], "count": 1}` (`only `ops` may`); a question, and a call under no approver
rule, carry none: anyone may answer them."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from tests.e2e.test_notify_e2e import INBOX, finish, notifying, waiting_call
from tests.helpers import start_run, wait_for_phase
from tests.people import make_people
from workflows.contract.rules import ApprovalPolicy, Approvers, PolicyRule
from workflows.model import AgentRunInput, AgentRunOptions

TWO_OF_OPS = AgentRunOptions(
    approval_policy=ApprovalPolicy(
        rules=[
            PolicyRule(
                tool="delete_path", decision="ask", approvers=Approvers(groups=("ops",), count=2)
            )
        ]
    )
)


ASK = "ask me: Which folder should I clean up next? (options: tmp, logs)"


def settings(tmp_path: Path, **extra: str) -> dict[str, str]:
    people = make_people(tmp_path / "people", {"ann": ["ops"], "ben": ["ops"], "dora": ["dev"]})
    return {"AGENT_APPROVERS_FILE": str(people.path), "AGENT_BUDGET_GROUPS": "ops", **extra}


async def test_the_json_body_says_who_may_answer(client: Client, tmp_path: Path) -> None:
    async with notifying(client, tmp_path, **settings(tmp_path)) as n:
        quorum = await n.start(TWO_OF_OPS)
        plain = await n.start()
        question = AgentRunInput.from_prompt(ASK, AgentRunOptions(ask_user=True))
        asked = await start_run(n.client, n.queue, question, f"notify-{uuid.uuid4().hex[:10]}")
        spent = await n.start(AgentRunOptions(max_run_tokens=1))
        try:
            quorum_call = (await waiting_call(quorum)).pending_approvals[0]
            plain_call = (await waiting_call(plain)).pending_approvals[0]
            await wait_for_phase(asked, "awaiting_answer", timeout=60)
            await wait_for_phase(spent, "budget_exhausted", timeout=60)
            posts = await n.receiver.wait_for(4, timeout=60)
            told = {p["body"]["workflow_id"]: p["body"] for p in posts}
            assert told[quorum.id]["event"] == "approval_waiting"
            assert told[quorum.id]["call_id"] == quorum_call.id
            assert told[quorum.id]["who_may"] == {"groups": ["ops"], "count": 2}
            assert told[plain.id]["call_id"] == plain_call.id
            assert "who_may" not in told[plain.id]  # anyone may answer it
            assert told[asked.id]["event"] == "question_waiting"
            assert "who_may" not in told[asked.id]
            assert told[spent.id] == {
                "event": "budget_exhausted",
                "workflow_id": spent.id,
                "run_id": spent.first_execution_run_id,
                "used": told[spent.id]["used"],
                "limit": 1,
                "waiting_since": told[spent.id]["waiting_since"],
                "who_may": {"groups": ["ops"], "count": 1},
                "url": f"{INBOX}/runs/{spent.id}",
            }
        finally:
            await finish(quorum, plain, asked, spent)


async def test_the_slack_line_says_who_may_answer(client: Client, tmp_path: Path) -> None:
    extra = settings(tmp_path, AGENT_NOTIFY_FORMAT="slack")
    async with notifying(client, tmp_path, **extra) as n:
        quorum = await n.start(TWO_OF_OPS)
        spent: WorkflowHandle[Any, Any] | None = None
        try:
            await waiting_call(quorum)
            [post] = await n.receiver.wait_for(1, timeout=60)
            text = post["body"]["text"]
            assert text.startswith(":hourglass_flowing_sand: `delete_path` is waiting"), text
            assert text.endswith("; 2 of `ops` may approve"), text
            spent = await n.start(AgentRunOptions(max_run_tokens=1))
            await wait_for_phase(spent, "budget_exhausted", timeout=60)
            posts = await n.receiver.wait_for(2, timeout=60)
            budget = posts[1]["body"]["text"]
            assert budget.startswith(":money_with_wings: Run "), budget
            assert budget.endswith(
                "tokens: it waits for a person to grant more or stop it (only `ops` may)"
            ), budget
        finally:
            for handle in (quorum, spent):
                if handle is not None:
                    await finish(handle)
