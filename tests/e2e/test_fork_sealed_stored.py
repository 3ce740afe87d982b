"""Fork and what-if with every piece its own process: the real `python worker.py` (the scripted
model, the real tools), `python -m starter fork` and `python -m starter what-if`. With a key,
the original is read with the key (what-if too) and the fork is sealed for its own run (its
start input sealed, the seal naming the fork's workflow id), and a program without the key
cannot read the original; with a payload store, the original's conversation is read back from
the store and the fork's own input goes there, stored for the fork. The original's history is
never touched."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from runtime.codec import ENCODING, ENV_KEY, EncryptionCodec, parse_keys
from runtime.connect import binding_interceptors, data_converter
from runtime.payload_store import ENV_STORE
from starter.handle import AgentHandle
from tests.cli.test_starter import Result, seed, starter
from tests.e2e.test_e2e import Process, clean_env, spawn
from tests.e2e.test_encryption_e2e import new_key
from tests.helpers import history_length, wait_for_phase
from workflows.contract.seal import read_seal
from workflows.model import AgentRunInput, AgentRunResult, ToolApprovalResponse

BIG_PROMPT = "Please list the workspace. " + "padding " * 40_000  # 320 KB: over 256 KiB


@dataclass
class Deployment:
    client: Client
    env: dict[str, str]
    started: list[Process]

    def reader(self) -> Client:
        """An in-process client with this deployment's settings (key, store)."""
        return Client(
            self.client.service_client,
            namespace="default",
            data_converter=data_converter(self.env),
            interceptors=binding_interceptors(self.env),
        )

    async def cli(self, *args: str, **extra: str) -> Result:
        env = {**self.env, **extra}
        return await starter(*args, env={k: v for k, v in env.items() if v})

    async def worker(self) -> None:
        process = await spawn("worker", "worker.py", env=self.env)
        self.started.append(process)
        await process.wait_for_line(r"^worker ready ")


@pytest.fixture
async def deployment(client: Client, tmp_path: Path) -> AsyncIterator[Deployment]:
    env = clean_env()  # each process gets exactly what it is given
    env.update(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_TASK_QUEUE=f"fork-{uuid.uuid4().hex[:8]}",
        AGENT_WORKSPACE=str(seed(tmp_path / "workspace")),
        AGENT_STATE_DIR=str(tmp_path / "state"),
    )
    d = Deployment(client, env, [])
    try:
        yield d
    finally:
        for process in reversed(d.started):
            await process.stop()


async def start_input(client: Client, workflow_id: str) -> Payload:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    return started.input.payloads[0]


async def test_a_fork_of_a_sealed_run_is_sealed_for_its_own_run(
    deployment: Deployment, tmp_path: Path
) -> None:
    key = new_key()
    deployment.env[ENV_KEY] = key
    await deployment.worker()
    reader = deployment.reader()
    original = f"sealed-{uuid.uuid4().hex[:8]}"
    started = await deployment.cli(
        "run", "--no-follow", "--id", original, "Please delete the logs folder"
    )
    assert started.code == 0, started
    handle = reader.get_workflow_handle(original, result_type=AgentRunResult)
    await wait_for_phase(handle, "awaiting_approval")
    await AgentHandle(reader, original).answer(
        ToolApprovalResponse(call_id="call_2", approved=True, approver="ann", remember=True)
    )
    assert (await handle.result()).finish_reason == "stop"
    before = await history_length(reader, original)

    unkeyed = await deployment.cli("fork", original, "--round", "0", **{ENV_KEY: ""})
    assert unkeyed.code == 1, unkeyed
    assert "key" in unkeyed.stderr.lower()

    fork_id = f"sealed-fork-{uuid.uuid4().hex[:8]}"
    result = await deployment.cli("fork", original, "--round", "0", "--id", fork_id, "--json")
    assert result.code == 0, result
    assert json.loads(result.stdout.splitlines()[-1])["forked_from"]["round"] == 0
    fork = reader.get_workflow_handle(fork_id)
    waiting = await wait_for_phase(fork, "awaiting_approval")  # the worker took its input
    assert [c.name for c in waiting.pending_approvals] == ["delete_path"]
    sealed = await start_input(reader, fork_id)
    assert sealed.metadata["encoding"] == ENCODING
    codec = EncryptionCodec(parse_keys({ENV_KEY: key}), mark_plaintext=True)
    [opened] = await codec.decode([sealed])
    seal = read_seal(opened.metadata)
    assert seal is not None and seal.workflow_id == fork_id and seal.role == "start"
    assert b"Please delete the logs folder" not in sealed.data
    policy = tmp_path / "policy.json"
    policy.write_text('{"enforced": [{"tool": "delete_path", "decision": "deny"}]}')
    judged = await deployment.cli("what-if", "--policy", str(policy), original)
    assert judged.code == 0, judged
    assert (
        "then: approved by ann; now: deny by rule 0 (enforced): Denied by policy" in judged.stdout
    )
    assert judged.stdout.splitlines()[-1] == (
        "2 calls: 1 would be denied (approved by a person then), 1 unchanged"
    )
    blind = await deployment.cli("what-if", "--policy", str(policy), original, **{ENV_KEY: ""})
    assert blind.code == 1 and "key" in blind.stderr.lower(), blind
    assert await history_length(reader, original) == before
    await fork.terminate("test over")


async def test_a_fork_reads_a_conversation_kept_in_the_payload_store(
    deployment: Deployment, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    deployment.env[ENV_STORE] = f"file://{store}"
    await deployment.worker()
    reader = deployment.reader()
    original = f"stored-{uuid.uuid4().hex[:8]}"
    started = await reader.start_workflow(  # too long for a command line
        "AgentWorkflow",
        AgentRunInput.from_prompt(BIG_PROMPT),
        id=original,
        task_queue=deployment.env["AGENT_TASK_QUEUE"],
        result_type=AgentRunResult,
    )
    done = await started.result()
    assert done.finish_reason == "stop" and done.messages[0].content == BIG_PROMPT
    reference = await start_input(reader, original)
    assert reference.metadata["encoding"] == b"json/protobuf"  # history holds a reference
    before = await history_length(reader, original)

    fork_id = f"stored-fork-{uuid.uuid4().hex[:8]}"
    result = await deployment.cli("fork", original, "--round", "0", "--id", fork_id)
    assert result.code == 0, result
    fork = reader.get_workflow_handle(fork_id, result_type=AgentRunResult)
    forked = await fork.result()
    assert forked.finish_reason == "stop"
    assert forked.messages[0].content == BIG_PROMPT
    assert [m.role for m in forked.messages] == ["user", "assistant", "tool", "assistant"]
    assert (await start_input(reader, fork_id)).metadata["encoding"] == b"json/protobuf"
    assert [p for p in store.rglob("*") if p.is_file() and f"/wi/{fork_id}/" in str(p)]
    assert await history_length(reader, original) == before
