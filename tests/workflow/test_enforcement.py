"""The worker re-checks its enforced rules as a call is about to run: `execute_tool` (the real
activity, in ActivityEnvironment and in a real worker on the dev server) answers a call its
`AGENT_POLICY_FILE` denies `Rejected: {reason}` without running it, whatever the run's state
says, and for a path with the path the tool would open."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, cast

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.agent_activities import AgentActivities
from activities.plugin import run_worker
from activities.tools import build_default_registry
from runtime.settings import Settings
from tests.helpers import start_run, wait_for_phase, wait_until
from workflows import names
from workflows.contract.rules import WorkerPolicy
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    ApprovalSource,
    ChatMessage,
    ToolApprovalResponse,
    ToolCall,
    ToolRequest,
)

SECRET = "LLM_API_KEY=sk-do-not-leak"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "keep").mkdir(parents=True)
    (ws / "keep" / "a.txt").write_text("keep me\n")
    (ws / "sub").mkdir()
    (ws / ".env").write_text(SECRET + "\n")
    (ws / "notes.txt").write_text("remember the milk\n")
    (ws / "innocent.txt").symlink_to(".env")
    (ws / "alias").symlink_to("keep", target_is_directory=True)
    return ws


def settings(workspace: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "llm_base_url": None,
        "llm_api_key": None,
        "llm_model": "scripted",
        "workspace": workspace,
        "state_dir": workspace.parent / "state",
    }
    values.update(overrides)
    return Settings(**values)


def activities(workspace: Path, enforced: list[dict[str, Any]]) -> AgentActivities:
    policy = WorkerPolicy.model_validate({"enforced": enforced})
    registry = build_default_registry(workspace)
    # execute_tool never touches the Temporal client (only call_llm queries the workflow).
    return AgentActivities(cast(Client, None), settings(workspace), registry, policy=policy)


async def execute(
    acts: AgentActivities,
    name: str,
    arguments: Any,
    call_id: str = "c1",
    answered_by: ApprovalSource | None = None,
) -> str:
    request = ToolRequest(
        workflow_id="wf-forged",
        call_id=call_id,
        name=name,
        arguments=arguments,
        answered_by=answered_by,
    )
    result: str = await ActivityEnvironment().run(acts.execute_tool, request)
    return result


async def test_an_enforced_deny_is_rejected_whatever_the_run_says(workspace):
    """A request as a forged state would send it (no rules, no person): the worker refuses."""
    acts = activities(
        workspace, [{"tool": "run_command", "decision": "deny", "reason": "no commands here"}]
    )
    command = {"command": "touch PWNED && id"}
    assert await execute(acts, "run_command", command) == "Rejected: no commands here"
    assert await execute(acts, "run_command", json.dumps(command), "c2") == (
        "Rejected: no commands here"
    )
    assert not (workspace / "PWNED").exists()
    # refused before the at-most-once record was claimed: the same call runs on a worker
    # without the rule (a claimed record would answer it as interrupted instead)
    free = activities(workspace, [])
    ran = json.loads(await execute(free, "run_command", command))
    assert ran["ok"] is True and ran["data"]["exit_code"] == 0, ran
    assert (workspace / "PWNED").exists()


async def test_the_first_enforced_rule_decides_as_in_the_workflow(workspace):
    acts = activities(
        workspace,
        [
            {"tool": "run_command", "when": {"command": "echo *"}, "decision": "allow"},
            {"tool": "run_command", "when": {"command": "ls*"}, "decision": "ask"},
            {"tool": "run_command", "decision": "deny"},
        ],
    )
    ok = json.loads(await execute(acts, "run_command", {"command": "echo hi"}, "c1"))
    assert ok["ok"] is True and ok["data"]["stdout"] == "hi\n"
    # an allow is shell-safe by position: the chained command is not allowed, so the deny decides
    chained = {"command": "echo hi | touch PWNED"}
    assert await execute(acts, "run_command", chained, "c2") == "Rejected: Denied by policy"
    assert not (workspace / "PWNED").exists()
    # an `ask` is for a person: the worker runs it only when a person approved it
    listed = json.loads(await execute(acts, "run_command", {"command": "ls"}, "c3", "person"))
    assert listed["ok"] is True


@pytest.mark.parametrize(
    "path",
    [".env", "./.env", "sub/../.env", "innocent.txt", "./innocent.txt", "sub/../innocent.txt"],
)
async def test_a_deny_path_glob_sees_the_file_the_tool_would_open(workspace, path):
    acts = activities(
        workspace,
        [
            {
                "tool": "read_file",
                "when": {"path": "*.env"},
                "decision": "deny",
                "reason": "secrets stay on the worker",
            }
        ],
    )
    result = await execute(acts, "read_file", {"path": path})
    assert result == "Rejected: secrets stay on the worker"
    assert "sk-do-not-leak" not in result


async def test_what_the_enforced_rules_do_not_deny_runs(workspace):
    acts = activities(
        workspace,
        [{"tool": "read_file", "when": {"path": "*.env"}, "decision": "deny"}],
    )
    result = json.loads(await execute(acts, "read_file", {"path": "notes.txt"}))
    assert result == {"ok": True, "data": "remember the milk\n"}
    listing = json.loads(await execute(acts, "list_dir", {"path": "."}, "c2"))
    assert listing["ok"] is True


async def test_delete_path_is_checked_with_the_entry_it_removes(workspace):
    acts = activities(
        workspace,
        [{"tool": "delete_path", "when": {"path": "keep/*"}, "decision": "deny", "reason": "kept"}],
    )
    for index, path in enumerate(["keep/a.txt", "keep//a.txt", "sub/../keep/a.txt", "alias/a.txt"]):
        assert await execute(acts, "delete_path", {"path": path}, f"c{index}") == "Rejected: kept"
    assert (workspace / "keep" / "a.txt").read_text() == "keep me\n"
    # the link itself is not under keep/: removing it (never its target) runs
    gone = json.loads(await execute(acts, "delete_path", {"path": "alias"}, "c9"))
    assert gone["data"] == {"path": "alias", "kind": "symlink", "files": 1}
    assert (workspace / "keep" / "a.txt").exists()


SECRET_ASK = [
    {"tool": "read_file", "when": {"path": "keep/*"}, "decision": "ask", "reason": "a person"},
    {"tool": "delete_path", "when": {"path": "keep/*"}, "decision": "ask"},
]


@pytest.mark.parametrize("source", [None, "seed", "policy"])
@pytest.mark.parametrize("spelling", ["relative", "absolute", "symlink", "linked folder"])
async def test_an_enforced_ask_runs_only_with_a_persons_answer(workspace, spelling, source):
    """`keep/*` is for a person to approve, in every spelling of its files: a call approved by
    a seed or a rule (or by nobody) is refused, whatever path names the file."""
    (workspace / "to_keep.txt").symlink_to("keep/a.txt")
    path = {
        "relative": "keep/a.txt",
        "absolute": str(workspace / "keep" / "a.txt"),
        "symlink": "to_keep.txt",
        "linked folder": "alias/a.txt",
    }[spelling]
    acts = activities(workspace, SECRET_ASK)
    with pytest.raises(ApplicationError) as handed_back:
        await execute(acts, "read_file", {"path": path}, "c1", source)
    assert handed_back.value.type == names.ERROR_NEEDS_PERSON  # back to the run, to wait
    assert handed_back.value.non_retryable
    # a person's approval runs it
    read = json.loads(await execute(acts, "read_file", {"path": path}, "c2", "person"))
    assert read == {"ok": True, "data": "keep me\n"}
    if spelling == "symlink":
        return  # deleting the link removes the link, not a file under keep/
    with pytest.raises(ApplicationError) as handed_back:
        await execute(acts, "delete_path", {"path": path}, "c3", source)
    assert handed_back.value.type == names.ERROR_NEEDS_PERSON
    assert (workspace / "keep" / "a.txt").exists()


FLIPPER = """
import os, sys
link, first, second = sys.argv[1:4]
spare = link + ".next"
turn = 0
while True:
    try:
        os.unlink(spare)
    except FileNotFoundError:
        pass
    os.symlink(first if turn % 2 == 0 else second, spare)
    os.replace(spare, link)
    turn += 1
"""
"""Swaps a link between two targets as fast as it can (each swap atomic: a rename), in a
process of its own (as another program on the worker's host would)."""


FLIP_READS = 40


def _until_flipped(link: Path) -> None:
    """Wait until the flipper runs (the link changed at least once)."""
    deadline = time.monotonic() + 10
    while os.readlink(link) == "ok.txt":
        assert time.monotonic() < deadline, "the flipper never ran"
        time.sleep(0.001)


async def test_the_worker_checks_the_file_it_opened_not_the_one_it_looked_at(workspace):
    """A link flipping between `.env` and a harmless file while `read_file` of it runs again and
    again: under an enforced deny of `*.env`, no read returns the secret."""
    (workspace / "ok.txt").write_text("harmless\n")
    link = workspace / "r.txt"
    link.symlink_to("ok.txt")
    acts = activities(
        workspace, [{"tool": "read_file", "when": {"path": "*.env"}, "decision": "deny"}]
    )
    flipper = await asyncio.create_subprocess_exec(
        sys.executable, "-c", FLIPPER, str(link), ".env", "ok.txt"
    )
    try:
        await asyncio.to_thread(_until_flipped, link)
        results = await _reads_while_flipping(acts)
    finally:
        flipper.kill()
        await flipper.wait()
    leaked = [r for r in results if SECRET in r]
    assert leaked == [], f"{len(leaked)} of {len(results)} reads returned the secret"


async def _reads_while_flipping(acts: AgentActivities) -> list[str]:
    """At least `FLIP_READS` reads of the flipping link, and on until both of its targets were
    met (a loaded machine may leave the flipper idle for a while), at most 10 times as many."""
    results: list[str] = []
    for index in range(FLIP_READS * 10):
        results.append(await execute(acts, "read_file", {"path": "r.txt"}, f"c{index}"))
        harmless = any("harmless" in r for r in results)
        refused = "Rejected: Denied by policy" in results
        if len(results) >= FLIP_READS and harmless and refused:
            return results
    raise AssertionError(f"the link never flipped in {len(results)} reads")


async def test_a_seeded_approval_cannot_run_what_the_worker_denies(client, workspace, tmp_path):
    """From the outside: a real worker whose `AGENT_POLICY_FILE` denies `run_command`, and a run
    started with an assistant call to it and an answer approving it."""
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(
        json.dumps(
            {"enforced": [{"tool": "run_command", "decision": "deny", "reason": "not here"}]}
        )
    )
    queue = f"enforce-{uuid.uuid4().hex[:10]}"
    stop = asyncio.Event()
    ready = asyncio.Event()
    worker = asyncio.create_task(
        run_worker(
            client,
            settings(workspace, policy_file=policy_file),
            queue=queue,
            stop=stop,
            ready=lambda _q: ready.set(),
        )
    )
    try:
        await asyncio.wait_for(ready.wait(), 30)
        call = ToolCall(
            id="seed_1", name="run_command", arguments='{"command": "touch PWNED && id"}'
        )
        run_input = AgentRunInput(
            messages=[ChatMessage.user("hi"), ChatMessage.assistant("", [call])],
            options=AgentRunOptions(
                max_rounds=2,
                tool_approval_responses=[
                    ToolApprovalResponse(call_id="seed_1", approved=True, approver="admin")
                ],
            ),
        )
        handle = await start_run(client, queue, run_input)
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        stop.set()
        await asyncio.wait_for(worker, 60)
    answers = [
        m.content for m in result.messages if m.role == "tool" and m.tool_call_id == "seed_1"
    ]
    assert answers == ["Rejected: not here"], answers
    assert not (workspace / "PWNED").exists()


async def test_a_run_rule_cannot_open_what_an_enforced_ask_keeps_for_a_person(
    client, workspace, tmp_path
):
    """From the outside: a real worker that sends `keep/*` reads to a person, and a run whose
    own rule allows every read, reading a link to `keep/a.txt` and its absolute path: neither is
    read without a person."""
    (workspace / "to_keep.txt").symlink_to("keep/a.txt")
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps({"enforced": SECRET_ASK}))
    queue = f"enforce-{uuid.uuid4().hex[:10]}"
    stop = asyncio.Event()
    ready = asyncio.Event()
    worker = asyncio.create_task(
        run_worker(
            client,
            settings(workspace, policy_file=policy_file),
            queue=queue,
            stop=stop,
            ready=lambda _q: ready.set(),
        )
    )
    calls = [
        ToolCall(id="link", name="read_file", arguments='{"path": "to_keep.txt"}'),
        ToolCall(
            id="absolute",
            name="read_file",
            arguments=json.dumps({"path": str(workspace.resolve() / "keep" / "a.txt")}),
        ),
    ]
    try:
        await asyncio.wait_for(ready.wait(), 30)
        run_input = AgentRunInput(
            messages=[ChatMessage.user("hi"), ChatMessage.assistant("", calls)],
            options=AgentRunOptions(
                max_rounds=2,
                approval_policy={"rules": [{"tool": "read_file", "decision": "allow"}]},
            ),
        )
        handle = await start_run(client, queue, run_input)
        st = await wait_for_phase(handle, "awaiting_approval")  # the absolute path: asked
        assert [c.id for c in st.pending_approvals] == ["absolute"]
        await handle.signal(
            "tool_approval", ToolApprovalResponse(call_id="absolute", approved=False)
        )

        # The link: the run's view saw no guarded path, the worker does: it waits for a person
        # (it is not refused), and the batch's other result waits with it.
        async def link_waits() -> bool:
            now = await wait_for_phase(handle, "awaiting_approval")
            return [c.id for c in now.pending_approvals] == ["link"]

        await wait_until(link_waits)
        assert [m for m in (await handle.query("messages")) if m["role"] == "tool"] == []
        await handle.signal(
            "tool_approval",
            ToolApprovalResponse(call_id="link", approved=False, reason="not that one"),
        )
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        stop.set()
        await asyncio.wait_for(worker, 60)
    answers = {m.tool_call_id: m.content for m in result.messages if m.role == "tool"}
    assert [m.tool_call_id for m in result.messages if m.role == "tool"] == ["link", "absolute"]
    assert answers["link"] == "Rejected: not that one"
    assert answers["absolute"] == "Rejected: User denied"
    assert "keep me" not in json.dumps(answers)
