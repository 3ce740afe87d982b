"""`starter approve|reject` with people's own keys (made by `ssh-keygen -t ed25519`), as real
processes against a real worker whose AGENT_APPROVERS_FILE lists them and whose enforced rule
asks two people of ops to approve a delete: one OS account holding one key cannot meet the rule
alone, whatever USER, LOGNAME or --approver say; two people's keys can. Without a key the answer
goes unsigned and the command says so; every refusal exits 1, a bad command line 2.
`starter approvers` lists the people and checks every key."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.client import Client

from runtime.approvers import load_approvers
from runtime.settings import Settings
from tests.cli.test_starter import Agent, Result, seed, start_waiting, starter
from tests.helpers import events, of_type, status
from tests.people import People, make_people
from worker import run_worker

TWO_OF_OPS = {
    "tool": "delete_path",
    "decision": "ask",
    "approvers": {"groups": ["ops"], "count": 2},
}


@dataclass
class Keyed:
    agent: Agent
    people: People
    home: Path
    """A HOME with no key in it: nothing is signed unless a key is named."""

    async def cli(self, *args: str, **env: str) -> Result:
        given = {"AGENT_APPROVERS_FILE": str(self.people.path), "HOME": str(self.home), **env}
        return await starter(*args, env=self.agent.env(**given))


@pytest.fixture
async def keyed(client: Client, task_queue: str, tmp_path: Path) -> AsyncIterator[Keyed]:
    """A worker with the approvers file (ann and ben of ops, dave of dev, carol through the web
    app's service) and the enforced two-of-ops rule for deletes."""
    people = make_people(
        tmp_path / "people",
        {"ann": ["ops"], "ben": ["ops"], "dave": ["dev"]},
        via={"web": ["ann"]},
        keygen=True,
    )
    (tmp_path / "policy.json").write_text(json.dumps({"enforced": [TWO_OF_OPS]}))
    workspace = seed(tmp_path / "workspace")
    settings = Settings.from_env(
        {
            "AGENT_WORKSPACE": str(workspace),
            "AGENT_STATE_DIR": str(tmp_path / "state"),
            "AGENT_APPROVERS_FILE": str(people.path),
            "AGENT_POLICY_FILE": str(tmp_path / "policy.json"),
        }
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        run_worker(client, settings, queue=task_queue, stop=stop, ready=lambda _q: ready.set())
    )
    await asyncio.wait_for(ready.wait(), 30)
    home = tmp_path / "home"
    home.mkdir()
    try:
        agent = Agent(client, client.service_client.config.target_host, task_queue, workspace)
        yield Keyed(agent, people, home)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_one_os_account_cannot_meet_two_of_ops_alone_and_two_people_can(keyed: Keyed):
    workflow_id = await start_waiting(keyed.agent, "Please delete the logs folder", "call_2")
    ann_key = str(keyed.people.key_files["ann"])
    first = await keyed.cli("approve", workflow_id, "call_2", "--yes", "--key", ann_key)
    assert first.code == 0, first
    assert "call_2 approved by ann; still pending: call_2" in first.stdout
    again = await keyed.cli(
        "approve", workflow_id, "call_2", "--yes", USER="ben", LOGNAME="ben",
        AGENT_SIGNING_KEY=ann_key,
    )  # fmt: skip
    assert again.code == 1, again
    assert "ann has already answered call 'call_2'" in again.stderr
    named = await keyed.cli(
        "approve", workflow_id, "call_2", "--yes", "--approver", "ben", "--key", ann_key
    )
    assert named.code == 2, named
    assert named.stderr.count("\n") == 1 and "which is ann's key" in named.stderr
    handle = keyed.agent.handle(workflow_id)
    st = await status(handle)
    assert st.quorums[0].approvers == ["ann"] and (keyed.agent.workspace / "logs").exists()
    ben_key = str(keyed.people.key_files["ben"])
    second = await keyed.cli(
        "approve", workflow_id, "call_2", "--yes", USER="ann", LOGNAME="ann",
        AGENT_SIGNING_KEY=ben_key,
    )  # fmt: skip
    assert second.code == 0, second
    assert "call_2 approved by ben; still pending: none" in second.stdout
    result = await handle.result()
    assert result.finish_reason == "stop"
    assert not (keyed.agent.workspace / "logs").exists()  # the worker counted two people
    votes = of_type(await events(handle), "approval_vote")
    assert [(v.approver, v.votes, v.signed_by) for v in votes] == [
        ("ann", 1, None),
        ("ben", 2, None),
    ]
    [approval] = of_type(await events(handle), "approval")
    assert approval.approvers == ["ann", "ben"]


async def test_the_home_key_signs_when_the_file_lists_it(keyed: Keyed, tmp_path: Path):
    home = tmp_path / "dave-home"
    (home / ".ssh").mkdir(parents=True)
    dave = keyed.people.key_files["dave"]
    shutil.copy(dave, home / ".ssh" / "id_ed25519")
    shutil.copy(f"{dave}.pub", home / ".ssh" / "id_ed25519.pub")
    workflow_id = await start_waiting(keyed.agent, "Please delete the logs folder", "call_2")
    refused = await keyed.cli("approve", workflow_id, "call_2", "--yes", HOME=str(home))
    assert refused.code == 1, refused
    assert "only ops may approve delete_path" in refused.stderr
    rejected = await keyed.cli(
        "reject", workflow_id, "call_2", "--yes", "--reason", "no", HOME=str(home),
        AGENT_SIGNING_KEY=str(keyed.people.key_files["ben"]),
    )  # fmt: skip
    assert rejected.code == 0, rejected
    assert "rejected (no) by ben" in rejected.stdout
    await keyed.agent.handle(workflow_id).result()


async def test_without_a_key_the_answer_goes_unsigned_and_the_command_says_so(keyed: Keyed):
    workflow_id = await start_waiting(keyed.agent, "Please delete the logs folder", "call_2")
    unsigned = await keyed.cli("approve", workflow_id, "call_2", "--yes", "--approver", "ann")
    assert unsigned.code == 1, unsigned
    assert (
        "the answer goes unsigned (taken only where no approver rule applies): no key (--key,"
        " AGENT_SIGNING_KEY or ~/.ssh/id_ed25519)"
    ) in unsigned.stdout
    assert "each with a signed answer (this one is not signed)" in unsigned.stderr
    retired = await keyed.cli(
        "approve", workflow_id, "call_2", "--yes", AGENT_APPROVER_KEY="c2VjcmV0"
    )
    assert retired.code == 2 and retired.stderr == (
        "error: AGENT_APPROVER_KEY is retired: each person signs with their own key; list people"
        " and their keys in AGENT_APPROVERS_FILE (docs/approvers.md)\n"
    )
    service = await keyed.cli(
        "approve", workflow_id, "call_2", "--yes", "--key", str(keyed.people.key_files["web"])
    )
    assert service.code == 2 and "is the signing service web's key" in service.stderr
    not_a_question = await keyed.cli("answer", workflow_id, "call_2", "blue")
    assert not_a_question.code == 1, not_a_question
    not_expired = await keyed.cli("reask", workflow_id, "call_2")
    assert not_expired.code == 1 and "not asked again" in not_expired.stderr
    no_budget = await keyed.cli("grant", workflow_id, "50")
    assert no_budget.code == 1 and "refused the grant" in no_budget.stderr
    negative = await keyed.cli("grant", workflow_id, "-5")
    assert negative.code == 2, negative
    assert "tokens must be a whole number from 1, got -5" in negative.stderr
    await keyed.cli(
        "reject", workflow_id, "call_2", "--yes", "--key", str(keyed.people.key_files["ben"])
    )


async def test_a_terminal_without_the_approvers_file_says_so_in_the_refusal(
    keyed: Keyed, tmp_path: Path
):
    """ann's key is at ~/.ssh/id_ed25519, but AGENT_APPROVERS_FILE is not set where she runs the
    command: the answer goes unsigned, and the refusal says, in its one line, what was missing
    (not only `only ops may approve`, which ann is)."""
    home = tmp_path / "ann-home"
    (home / ".ssh").mkdir(parents=True)
    ann = keyed.people.key_files["ann"]
    shutil.copy(ann, home / ".ssh" / "id_ed25519")
    shutil.copy(f"{ann}.pub", home / ".ssh" / "id_ed25519.pub")
    workflow_id = await start_waiting(keyed.agent, "Please delete the logs folder", "call_2")
    refused = await keyed.cli(
        "approve", workflow_id, "call_2", "--yes", HOME=str(home), AGENT_APPROVERS_FILE=""
    )
    assert refused.code == 1, refused
    assert refused.stderr == (
        "error: the workflow rejected the answer: only ops may approve delete_path, each with a"
        " signed answer (this one is not signed): this terminal signed nothing:"
        " AGENT_APPROVERS_FILE is not set, so ~/.ssh/id_ed25519 cannot be known as yours\n"
    )
    keyless = await keyed.cli("approve", workflow_id, "call_2", "--yes", AGENT_APPROVERS_FILE="")
    assert keyless.code == 1, keyless
    assert keyless.stderr.count("\n") == 1 and keyless.stderr.endswith(
        ": this terminal signed nothing: no key (--key, AGENT_SIGNING_KEY or ~/.ssh/id_ed25519)"
        " and AGENT_APPROVERS_FILE is not set\n"
    ), keyless
    assert (keyed.agent.workspace / "logs").exists()
    await keyed.agent.handle(workflow_id).terminate("test over")


async def test_starter_approvers_lists_people_and_checks_every_key(keyed: Keyed, tmp_path: Path):
    listed = await keyed.cli("approvers")
    assert listed.code == 0, listed
    approvers = load_approvers(keyed.people.path)
    lines = listed.stdout.splitlines()
    assert lines[0] == f"{keyed.people.path}: 3 people, 1 signing service(s); every key loads"
    assert lines[1].split() == ["NAME", "GROUPS", "SIGNS", "WITH"]
    fingerprint = {p.name: p.keys[0].fingerprint for p in approvers.people()}
    assert lines[2].split() == ["ann", "ops", "own", "key", f"{fingerprint['ann']},", "via", "web"]
    assert lines[3].split() == ["ben", "ops", "own", "key", fingerprint["ben"]]
    assert lines[4].split() == ["dave", "dev", "own", "key", fingerprint["dave"]]
    web = approvers.services()[0].keys[0].fingerprint
    assert lines[5] == f"service web: key {web}; signs for ann"
    assert (
        lines[6]
        == "this terminal signs nothing: no key (--key, AGENT_SIGNING_KEY or ~/.ssh/id_ed25519)"
    )
    as_json = await keyed.cli("approvers", "--json")
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert rows[0] == {
        "name": "ann",
        "groups": ["ops"],
        "keys": [fingerprint["ann"]],
        "via": ["web"],
    }
    assert rows[-1] == {"service": "web", "keys": [web], "signs_for": ["ann"]}
    bad = tmp_path / "bad-approvers"
    bad.write_text(keyed.people.path.read_text() + "eve ops ssh-rsa AAAAB3NzaC1yc2E eve\n")
    refused = await keyed.cli("approvers", AGENT_APPROVERS_FILE=str(bad))
    assert refused.code == 2 and refused.stderr == (
        "error: AGENT_APPROVERS_FILE line 7: only ssh-ed25519 keys are taken, not 'ssh-rsa'\n"
    )


async def test_help_names_the_key(keyed: Keyed):
    shown = await keyed.cli("approve", "--help")
    assert "--key FILE" in shown.stdout and "AGENT_SIGNING_KEY" in shown.stdout
