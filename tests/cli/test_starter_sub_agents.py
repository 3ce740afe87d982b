"""Sub-agents through the real `python -m starter` and the `temporal` CLI, each a process of its
own, against the session dev server and a worker with the real activities whose model is the
scripted OpenAI-compatible server (`tests.fake_openai`, over HTTP): it answers the parent and
each sub-agent by their own conversations ("delegate: TASK" → a `delegate` call; a sub-agent's
task then plays as any prompt).

Parallel sub-agents and the tree, a sub-agent that fails, a sub-agent's approval asked where
people look and answered on it, one budget for the tree, a cancelled parent that closes its
whole tree, and the depth limit."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from runtime.settings import Settings
from tests.cli.test_starter import Agent, seed
from tests.cli.test_temporal_cli import TEMPORAL
from tests.fake_openai import FakeOpenAI, FakeOpenAIServer, from_openai_messages
from tests.helpers import status, wait_for_phase, wait_until
from worker import run_worker
from workflows.contract.arguments import arguments_digest
from workflows.model import AgentStatus


@dataclass
class Tree(Agent):
    model: FakeOpenAIServer | None = None

    def asked(self, first_user: str) -> list[dict[str, Any]]:
        """The requests the model server got for the conversation whose user message is
        `first_user` (the parent's prompt, or a sub-agent's task)."""
        assert self.model is not None
        found = []
        for body in list(self.model.requests):
            users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
            if users and users[0].get("content") == first_user:
                found.append(body)
        return found


@pytest.fixture
async def tree(client: Client, task_queue: str, tmp_path: Path) -> AsyncIterator[Tree]:
    workspace = seed(tmp_path / "workspace")
    with FakeOpenAI() as model:
        settings = Settings(
            llm_base_url=model.base_url,
            llm_api_key="sk-sub-agents",
            llm_model="fake-model",
            workspace=workspace,
            state_dir=tmp_path / "state",
        )
        stop, ready = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(
            run_worker(client, settings, queue=task_queue, stop=stop, ready=lambda _q: ready.set())
        )
        await asyncio.wait_for(ready.wait(), 30)
        try:
            yield Tree(
                client, client.service_client.config.target_host, task_queue, workspace, model
            )
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)


def new_id() -> str:
    return f"tree-{uuid.uuid4().hex[:8]}"


async def temporal(agent: Agent, *args: str) -> Any:
    """`temporal …  --output json` against the session dev server, parsed."""
    proc = await asyncio.create_subprocess_exec(
        TEMPORAL,
        *args,
        "--address",
        agent.address,
        "--namespace",
        "default",
        "--output",
        "json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    text = out.decode().strip()
    if not text:
        return []
    try:
        return json.loads(text)
    except json.JSONDecodeError:  # one object per line
        return [json.loads(line) for line in text.splitlines() if line.strip()]


async def listed(agent: Agent, query: str, count: int) -> list[dict[str, Any]]:
    """`temporal workflow list --query QUERY` once visibility lists `count` runs."""

    async def found() -> tuple[list[dict[str, Any]]] | None:
        rows = await temporal(agent, "workflow", "list", "--query", query)
        rows = rows if isinstance(rows, list) else [rows]
        return (rows,) if len(rows) == count else None

    rows: list[dict[str, Any]] = (await wait_until(found, timeout=30, interval=0.5))[0]
    return rows


def tool_result(body: dict[str, Any], call_id: str) -> dict[str, Any]:
    """The `tool` message of `call_id` in a request the model server got, parsed."""
    messages = from_openai_messages(body["messages"])
    found = next(m for m in messages if m.role == "tool" and m.tool_call_id == call_id)
    parsed: dict[str, Any] = json.loads(found.content)
    return parsed


async def test_parallel_sub_agents_answer_and_the_tree_shows_them(tree: Tree) -> None:
    workflow_id = new_id()
    prompt = "delegate: list; delegate: read notes.txt"
    run = await tree.cli("run", "--sub-agents", "--id", workflow_id, prompt)
    assert run.code == 0, run
    lines = run.stdout.splitlines()
    one, two = f"{workflow_id}.call_1", f"{workflow_id}.call_2"
    assert f"[r0] sub_agent_started call_1 {one}: list" in lines
    assert f"[r0] sub_agent_started call_2 {two}: read notes.txt" in lines
    finished = [line for line in lines if "sub_agent_finished" in line]
    assert len(finished) == 2 and all(": stop (" in line for line in finished), finished
    assert f"assistant: Sub-agent {one} answered: The workspace contains: " in run.stdout
    assert f"Sub-agent {two} answered: notes.txt begins with:" in run.stdout
    assert lines[-1] == "finished: stop"
    # Both ran at once: each started before either ended.
    kinds = [line.split()[1] for line in lines if "] sub_agent_" in line]
    assert kinds == ["sub_agent_started", "sub_agent_started", *["sub_agent_finished"] * 2]
    first = await tree.client.get_workflow_handle(one).describe()
    second = await tree.client.get_workflow_handle(two).describe()
    assert first.close_time and second.close_time
    assert second.start_time < first.close_time and first.start_time < second.close_time
    # The model server answered each by its own conversation.
    assert [len(tree.asked("list")), len(tree.asked("read notes.txt"))] == [2, 2]
    child_tools = [t["function"]["name"] for t in tree.asked("list")[0]["tools"]]
    assert "delegate" in child_tools  # depth 1 may delegate again (AGENT_MAX_DEPTH 2)

    # Temporal lists them as the parent's children, and the tree shows them under it.
    rows = await listed(tree, f'ParentWorkflowId="{workflow_id}"', 2)
    assert sorted(r["execution"]["workflowId"] for r in rows) == [one, two]
    described = await temporal(tree, "workflow", "describe", "--workflow-id", one)
    assert described["workflowExecutionInfo"]["parentExecution"]["workflowId"] == workflow_id
    shown = await tree.cli("history", workflow_id, "--tree")
    assert shown.code == 0, shown
    tree_lines = shown.stdout.splitlines()
    assert tree_lines[0] == f"{workflow_id}  finished stop"
    assert tree_lines[1].startswith(f"├─ {one} (call call_1)  finished stop, ")
    assert tree_lines[1].endswith(" tokens: list")
    assert tree_lines[2].startswith(f"└─ {two} (call call_2)  finished stop, ")
    as_json = await tree.cli("history", workflow_id, "--tree", "--json")
    nodes = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(n["workflow_id"], n["parent_workflow_id"], n["depth"]) for n in nodes] == [
        (workflow_id, None, 0),
        (one, workflow_id, 1),
        (two, workflow_id, 1),
    ]


async def test_a_sub_agent_that_fails_is_a_failed_call_the_parent_reads(tree: Tree) -> None:
    workflow_id = new_id()
    prompt = "delegate (max_rounds 1): delete the logs folder"
    run = await tree.cli("run", "--sub-agents", "--id", workflow_id, prompt)
    assert run.code == 0, run  # the parent goes on: its model read the failure
    child = f"{workflow_id}.call_1"
    assert f"[r0] sub_agent_finished call_1 {child}: max_rounds (" in run.stdout
    [last] = tree.asked(prompt)[-1:]
    result = tool_result(last, "call_1")
    assert result["ok"] is False and result["data"] is None
    assert result["error"].startswith(f"sub-agent {child} ended with max_rounds")
    assert f"The delegate tool failed: sub-agent {child} ended with max_rounds" in run.stdout
    assert (tree.workspace / "logs").exists()  # its delete was never reached


async def test_a_sub_agents_approval_is_asked_where_people_look(tree: Tree) -> None:
    workflow_id = new_id()
    task = "delete the logs folder"
    started = await tree.cli(
        "run", "--sub-agents", "--no-follow", "--id", workflow_id, f"delegate: {task}"
    )
    assert started.code == 0, started
    child_id = f"{workflow_id}.call_1"
    child = tree.handle(child_id)
    await wait_until(lambda: exists(tree, child_id))
    waiting = await wait_for_phase(child, "awaiting_approval")
    [call] = waiting.pending_approvals
    assert (call.id, call.name) == ("call_2", "delete_path")

    parent = tree.handle(workflow_id)

    async def parent_shows_it() -> AgentStatus | None:
        now = await status(parent)
        return now if now.sub_agents and now.sub_agents[0].pending_approvals else None

    shown = await wait_until(parent_shows_it)
    assert shown.phase == "waiting_for_sub_agents"
    assert shown.sub_agents[0].workflow_id == child_id

    # `pending` lists the sub-agent's call, naming its parent and task, with the command that
    # answers it on the sub-agent.
    async def pending_lists_it() -> str | None:
        result = await tree.cli("pending")
        return result.stdout if child_id in result.stdout else None

    listing = await wait_until(pending_lists_it, timeout=30, interval=0.5)
    lines = listing.splitlines()
    at = lines.index(next(line for line in lines if line.startswith(f"{child_id} (round 1")))
    assert lines[at + 1] == f"  sub-agent of {workflow_id} (call call_1): {task}"
    pin = f"{child_id} call_2 --run-id {waiting.run_id} --sha256 {arguments_digest(call.arguments)}"
    assert any(line.endswith(f" approve|reject {pin}") for line in lines), listing
    assert not any(line.startswith(f"{workflow_id} (") for line in lines)  # the parent waits on it
    as_json = await tree.cli("pending", "--json")
    entries = [json.loads(line) for line in as_json.stdout.splitlines()]
    [entry] = [e for e in entries if e["workflow_id"] == child_id]
    assert entry["parent"] == {
        "workflow_id": workflow_id,
        "call_id": "call_1",
        "depth": 1,
        "task": task,
    }
    history = await tree.cli("history", workflow_id)
    assert (
        f'sub_agent_waiting call_1 {child_id} waits for call_2 delete_path {{"path": "logs"}}'
        in history.stdout
    )

    approved = await tree.cli("approve", *pin.split(), "--approver", "ann")
    assert approved.code == 0, approved
    watched = await tree.cli("watch", workflow_id)
    assert watched.code == 0, watched
    assert watched.stdout.splitlines()[-1] == "finished: stop"
    assert f"Sub-agent {child_id} answered: Deleted logs." in watched.stdout
    assert not (tree.workspace / "logs").exists()
    audit = await tree.cli("audit", workflow_id)
    assert audit.code == 0, audit
    rows = audit.stdout.splitlines()
    decided = next(
        i for i, line in enumerate(rows) if "delete_path" in line and "person ann" in line
    )
    assert rows[decided + 1].strip() == f"in sub-agent {child_id}"
    as_json = await tree.cli("audit", workflow_id, "--json")
    decisions = json.loads(as_json.stdout)["decisions"]
    assert [d.get("workflow_id") for d in decisions if d["tool"] == "delete_path"] == [child_id]


async def test_one_budget_for_the_tree(tree: Tree) -> None:
    workflow_id = new_id()
    started = await tree.cli(
        "run", "--sub-agents", "--max-run-tokens", "1", "--no-follow", "--id", workflow_id,
        "delegate: list",
    )  # fmt: skip
    assert started.code == 0, started
    child_id = f"{workflow_id}.call_1"
    child = tree.handle(child_id)
    await wait_until(lambda: exists(tree, child_id))
    at_budget = await wait_for_phase(child, "budget_exhausted")
    assert at_budget.budget is not None and at_budget.budget.limit == 1  # what was left: none

    parent = tree.handle(workflow_id)

    async def parent_counts_it() -> AgentStatus | None:
        now = await status(parent)
        agents = now.sub_agents
        return now if agents and agents[0].phase == "budget_exhausted" else None

    counted = await wait_until(parent_counts_it)
    assert counted.sub_agents[0].tokens == at_budget.budget.used  # reported at its pause

    async def pending_lists_it() -> str | None:
        result = await tree.cli("pending")
        return result.stdout if child_id in result.stdout else None

    listing = await wait_until(pending_lists_it, timeout=30, interval=0.5)
    assert f"  sub-agent of {workflow_id} (call call_1): list" in listing
    granted = await tree.cli("grant", child_id, "1000")
    assert granted.code == 0, granted
    result = await parent.result()
    assert result.finish_reason == "stop"  # the grant counted for the tree: no second grant
    child_done = await child.result()
    final = await status(parent)
    assert final.budget is not None
    assert final.budget.granted == 1000 and final.budget.limit == 1 + 1000
    assert final.budget.used >= result.usage.total + child_done.usage.total


async def test_cancelling_the_parent_closes_its_whole_tree(tree: Tree) -> None:
    workflow_id = new_id()
    prompt = "delegate: delete the logs folder; delegate: delete notes.txt"
    started = await tree.cli("run", "--sub-agents", "--no-follow", "--id", workflow_id, prompt)
    assert started.code == 0, started
    children = [f"{workflow_id}.call_1", f"{workflow_id}.call_2"]
    for child_id in children:
        await wait_until(lambda c=child_id: exists(tree, c))  # type: ignore[misc]
        await wait_for_phase(tree.handle(child_id), "awaiting_approval")
    cancelled = await tree.cli(
        "cancel", workflow_id, "--reason", "wrong folder", USER="ann", LOGNAME="ann"
    )
    assert cancelled.code == 0, cancelled
    assert (await tree.handle(workflow_id).result()).finish_reason == "cancelled"
    for child_id in children:
        watched = await tree.cli("watch", child_id)
        assert watched.code == 3, watched
        assert watched.stdout.splitlines()[-2:] == [
            "[r1] error: Agent run cancelled by ann: wrong folder",
            "finished: cancelled",
        ]
    # Nothing of the tree is left running.
    everything = await listed(tree, f'RootWorkflowId="{workflow_id}"', 3)
    assert {r["status"] for r in everything} == {"WORKFLOW_EXECUTION_STATUS_COMPLETED"}
    assert (
        await listed(tree, f'RootWorkflowId="{workflow_id}" AND ExecutionStatus="Running"', 0) == []
    )
    assert (tree.workspace / "logs").exists() and (tree.workspace / "notes.txt").exists()


async def test_the_depth_is_bounded(tree: Tree) -> None:
    workflow_id = new_id()
    run = await tree.cli(
        "run", "--sub-agents", "--id", workflow_id, "delegate: delegate: delegate: list"
    )
    assert run.code == 0, run
    middle, bottom = f"{workflow_id}.call_1", f"{workflow_id}.call_1.call_1"
    [asked] = tree.asked("delegate: list")
    assert asked["messages"][0]["content"] == "delegate: list"  # depth 2: no delegate offered
    assert "delegate" not in [t["function"]["name"] for t in asked.get("tools") or []]
    shown = await tree.cli("history", workflow_id, "--tree")
    assert [line.strip().split("  ")[0].strip("├└─ ") for line in shown.stdout.splitlines()] == [
        workflow_id,
        f"{middle} (call call_1)",
        f"{bottom} (call call_1)",
    ]
    said = (await tree.handle(bottom).result()).messages[-1].content
    assert said == "I would use the delegate tool for that, but it is not available in this run."
    with pytest.raises(RPCError):
        await tree.client.get_workflow_handle(f"{bottom}.call_1").describe()
    described = await tree.handle(bottom).describe()
    assert described.status == WorkflowExecutionStatus.COMPLETED and described.parent_id == middle


async def exists(agent: Agent, workflow_id: str) -> bool:
    try:
        await agent.client.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return False
    return True
