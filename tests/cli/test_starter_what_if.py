"""`starter what-if` as a real process against the session dev server, with an in-process
production worker (the scripted model): every recorded call of the runs named, or of the recent
runs, decided again under a proposed policy beside what was decided then, with a summary; a
policy file that does not parse exits 2 naming the line; nothing about the runs changes (no
signal, update or query reaches them: their histories keep their length)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    SignalWorkflowInput,
    StartWorkflowInput,
    StartWorkflowUpdateInput,
    TerminateWorkflowInput,
    WorkflowHandle,
    WorkflowUpdateHandle,
)

from starter.handle import AgentHandle
from starter.what_if import parse_policy
from starter.what_if_runs import what_if
from tests.cli.test_starter import Agent, agent, new_id
from tests.helpers import history_length, wait_for_phase
from workflows.model import ToolApprovalResponse

__all__ = ["agent"]  # the fixture

POLICY = """{
  "enforced": [
    {"tool": "delete_path", "decision": "deny", "reason": "no deletes"}
  ],
  "rules": [
    {"tool": "read_file", "decision": "ask"}
  ]
}
"""


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, seen: Counter[str]) -> None:
        super().__init__(next)
        self._seen = seen

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        self._seen["start"] += 1
        return await super().start_workflow(input)

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        self._seen["signal"] += 1
        await super().signal_workflow(input)

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        self._seen["query"] += 1
        return await super().query_workflow(input)

    async def start_workflow_update(
        self, input: StartWorkflowUpdateInput
    ) -> WorkflowUpdateHandle[Any]:
        self._seen["update"] += 1
        return await super().start_workflow_update(input)

    async def terminate_workflow(self, input: TerminateWorkflowInput) -> None:
        self._seen["terminate"] += 1
        await super().terminate_workflow(input)


class Counting(Interceptor):
    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self.seen)


async def recorded_runs(agent: Agent) -> tuple[str, str, str]:
    """A delete a person approved (its list_dir allowed by the run's rule), a read that ran
    without asking, and a run still waiting for a person to approve a delete."""
    deleted, read, waiting = new_id(), new_id(), new_id()
    for workflow_id, args in (
        (deleted, ["--allow", "list_dir", "Please delete the logs folder"]),
        (read, ["read notes.txt"]),
        (waiting, ["Please delete the tmp folder"]),
    ):
        started = await agent.cli("run", "--no-follow", "--id", workflow_id, *args)
        assert started.code == 0, started
    await wait_for_phase(agent.handle(deleted), "awaiting_approval")
    await AgentHandle(agent.client, deleted).answer(
        ToolApprovalResponse(call_id="call_2", approved=True, approver="ann")
    )
    for workflow_id in (deleted, read):
        assert (await agent.handle(workflow_id).result()).finish_reason == "stop"
    await wait_for_phase(agent.handle(waiting), "awaiting_approval")
    return deleted, read, waiting


async def test_what_if_decides_every_recorded_call_again(agent: Agent, tmp_path: Path) -> None:
    deleted, read, waiting = await recorded_runs(agent)
    ids = (deleted, read, waiting)
    before = [await history_length(agent.client, w) for w in ids]
    policy = tmp_path / "proposed.json"
    policy.write_text(POLICY)
    result = await agent.cli("what-if", "--policy", str(policy), *ids)
    assert result.code == 0, result
    lines = result.stdout.splitlines()
    assert lines[:2] == [
        f'{deleted} call_1 list_dir {{"path": "."}}',
        "    then: allowed by rule 0; now: allow (the tool's default); unchanged",
    ]
    assert lines[2:4] == [
        f'{deleted} call_2 delete_path {{"path": "logs"}}',
        "    then: approved by ann; now: deny by rule 0 (enforced): no deletes; changed",
    ]
    assert lines[4:6] == [
        f'{read} call_1 read_file {{"path": "notes.txt"}}',
        "    then: ran without asking; now: ask by rule 1 (run); changed",
    ]
    assert lines[6:10] == [
        f'{waiting} call_1 list_dir {{"path": "."}}',
        "    then: ran without asking; now: allow (the tool's default); unchanged",
        f'{waiting} call_2 delete_path {{"path": "tmp"}}',
        "    then: waiting for a person; now: deny by rule 0 (enforced): no deletes; changed",
    ]
    assert lines[-1] == (
        "5 calls: 1 would now ask (ran without asking then), 2 would be denied"
        " (1 approved by a person, 1 waiting for a person then), 2 unchanged"
    )

    as_json = await agent.cli("what-if", "--json", "--policy", str(policy), deleted)
    assert as_json.code == 0, as_json
    objects = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert objects[1] == {
        "workflow_id": deleted,
        "run_id": (await agent.handle(deleted).describe()).run_id,
        "call_id": "call_2",
        "tool": "delete_path",
        "arguments": {"path": "logs"},
        "then": {
            "decision": "ask",
            "by": "approved by ann",
            "source": "person",
            "rule": None,
            "approver": "ann",
        },
        "now": {
            "decision": "deny",
            "by": "deny by rule 0 (enforced): no deletes",
            "rule": 0,
            "origin": "enforced",
            "reason": "no deletes",
        },
        "changed": True,
    }
    assert (
        objects[-1]["summary"]
        == "2 calls: 1 would be denied (approved by a person then), 1 unchanged"
    )
    assert (objects[-1]["calls"], objects[-1]["would_deny"]) == (2, 1)

    recent = await agent.cli("what-if", "--json", "--since", "2m", "--policy", str(policy))
    assert recent.code == 0, recent
    listed = {json.loads(line).get("workflow_id") for line in recent.stdout.splitlines()}
    assert set(ids) <= listed

    assert [await history_length(agent.client, w) for w in ids] == before
    assert (await agent.handle(waiting).describe()).status is not None
    await wait_for_phase(agent.handle(waiting), "awaiting_approval")
    await AgentHandle(agent.client, waiting).raw.terminate("test over")


async def test_what_if_sends_nothing_to_any_run(agent: Agent) -> None:
    """In-process, through a client that counts what it sends: only reads."""
    deleted, read, waiting = await recorded_runs(agent)
    counting = Counting()
    config = agent.client.config()
    config["interceptors"] = [*config.get("interceptors", []), counting]
    report = await what_if(Client(**config), parse_policy(POLICY, "p"), [deleted, read, waiting])
    assert [len(run.calls) for run in report.runs] == [2, 1, 2]
    assert counting.seen == Counter()
    await AgentHandle(agent.client, waiting).raw.terminate("test over")


async def test_a_policy_that_does_not_parse_exits_2_naming_the_line(
    agent: Agent, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "enforced": [\n    {"tool": "delete_path" "decision": "deny"}\n  ]\n}')
    result = await agent.cli("what-if", "--policy", str(broken), "any-run")
    assert result.code == 2, result
    assert result.stderr.strip() == (f"error: {broken}: line 3, column 28: Expecting ',' delimiter")
    invalid = tmp_path / "invalid.json"
    invalid.write_text(POLICY.replace('"decision": "ask"', '"decision": "maybe"'))
    result = await agent.cli("what-if", "--policy", str(invalid), "any-run")
    assert result.code == 2, result
    assert result.stderr.strip() == (
        f"error: {invalid}: line 6: rules.0.decision: Input should be 'allow', 'deny' or 'ask'"
        ' (got "maybe")'
    )
    missing = await agent.cli("what-if", "--policy", str(tmp_path / "proposed.json"), new_id())
    assert missing.code == 2 and "cannot read it" in missing.stderr
    policy = tmp_path / "ok.json"
    policy.write_text(POLICY)
    unknown = await agent.cli("what-if", "--policy", str(policy), "no-such-run-" + new_id())
    assert unknown.code == 1 and "no workflow with id" in unknown.stderr
    bad_since = await agent.cli("what-if", "--policy", str(policy), "--since", "a week")
    assert bad_since.code == 2 and "--since" in bad_since.stderr
