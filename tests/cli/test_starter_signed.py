"""`starter approve|reject` with AGENT_APPROVER_KEY, as real processes: the answer is signed as
the operating-system user with that user's groups from the users file, and the worker verifies
it; without the key nothing is signed. `starter web add-user --group` writes the groups."""

from __future__ import annotations

import asyncio
import base64
import getpass
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client

from runtime.approver_key import ApproverKey
from runtime.settings import Settings
from tests.cli.test_starter import Agent, seed, start_waiting
from tests.helpers import events, of_type
from worker import run_worker
from workflows.contract.arguments import arguments_digest
from workflows.people.signatures import SignedFields

RAW_KEY = os.urandom(32)
KEY_TEXT = base64.b64encode(RAW_KEY).decode()


@pytest.fixture
async def keyed(client: Client, task_queue: str, tmp_path: Path) -> AsyncIterator[Agent]:
    """A worker holding the approver key."""
    workspace = seed(tmp_path / "workspace")
    settings = Settings.from_env(
        {
            "AGENT_WORKSPACE": str(workspace),
            "AGENT_STATE_DIR": str(tmp_path / "state"),
            "AGENT_APPROVER_KEY": KEY_TEXT,
        }
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        run_worker(client, settings, queue=task_queue, stop=stop, ready=lambda _q: ready.set())
    )
    await asyncio.wait_for(ready.wait(), 30)
    try:
        yield Agent(client, client.service_client.config.target_host, task_queue, workspace)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def add_user(agent: Agent, users: Path, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "starter", "web", "add-user", *args),
        env=agent.env(AGENT_WEB_USERS_FILE=str(users)),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(b"a password\n"), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_approve_signs_as_the_os_user_with_their_groups(keyed: Agent, tmp_path: Path):
    me = getpass.getuser()
    users = tmp_path / "users"
    code, out, err = await add_user(keyed, users, me, "--group", "ops", "--group", "dev")
    assert code == 0, err
    assert f"user {me} written to {users} (groups: dev, ops)" in out
    assert users.read_text().rstrip("\n").endswith(":dev,ops")
    workflow_id = await start_waiting(keyed, "Please delete the logs folder", "call_2")
    result = await keyed.cli(
        "approve", workflow_id, "call_2", "--yes",
        AGENT_APPROVER_KEY=KEY_TEXT, AGENT_WEB_USERS_FILE=str(users),
    )  # fmt: skip
    assert result.code == 0, result
    assert f"call_2 approved by {me}" in result.stdout
    handle = keyed.handle(workflow_id)
    await handle.result()
    (approval,) = [a for a in of_type(await events(handle), "approval") if a.call_id == "call_2"]
    assert approval.approver == me and approval.groups == ["dev", "ops"]
    assert approval.signature and approval.signed_at
    first_run = (await handle.describe()).raw_description.workflow_execution_info.first_run_id
    fields = SignedFields(
        approver=me,
        groups=("dev", "ops"),
        workflow_id=workflow_id,
        run_id=first_run,
        call_id="call_2",
        arguments_sha256=arguments_digest('{"path": "logs"}'),
        decision="approve",
        signed_at=approval.signed_at,
    )
    assert ApproverKey(RAW_KEY).verifies(fields, approval.signature)


async def test_reject_without_the_key_is_not_signed(keyed: Agent):
    workflow_id = await start_waiting(keyed, "Please delete the logs folder", "call_2")
    result = await keyed.cli("reject", workflow_id, "call_2", "--yes", "--reason", "no")
    assert result.code == 0, result
    handle = keyed.handle(workflow_id)
    await handle.result()
    (answer,) = [a for a in of_type(await events(handle), "approval") if a.call_id == "call_2"]
    assert answer.approver == getpass.getuser() and answer.approved is False
    assert answer.signature is None and answer.signed_at is None and answer.groups is None


async def test_with_the_key_approver_names_only_the_os_user(keyed: Agent):
    workflow_id = await start_waiting(keyed, "Please delete the logs folder", "call_2")
    result = await keyed.cli(
        "approve", workflow_id, "call_2", "--yes", "--approver", "someone-else",
        AGENT_APPROVER_KEY=KEY_TEXT,
    )  # fmt: skip
    assert result.code == 2, result
    assert result.stderr.count("\n") == 1 and "signed as the operating-system user" in result.stderr
    forged = await keyed.cli(
        "approve",
        workflow_id,
        "call_2",
        "--yes",
        AGENT_APPROVER_KEY=base64.b64encode(b"k" * 32).decode(),
    )  # another key: the worker refuses the answer
    assert forged.code != 0 and "does not verify" in forged.stderr, forged
    bad = await keyed.cli("approve", workflow_id, "call_2", "--yes", AGENT_APPROVER_KEY="nope")
    assert bad.code == 2 and bad.stderr.startswith("error: AGENT_APPROVER_KEY"), bad
    await keyed.cli("reject", workflow_id, "call_2", "--yes")


async def test_add_user_refuses_a_bad_group(keyed: Agent, tmp_path: Path):
    users = tmp_path / "users"
    code, _out, err = await add_user(keyed, users, "alice", "--group", "o p s")
    assert code == 2 and "a group name is 1-64" in err and err.count("\n") == 1
    assert not users.exists()
