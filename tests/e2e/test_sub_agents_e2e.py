"""Sub-agents with every piece its own process: the real `python worker.py` (its model the scripted
OpenAI-compatible server `python -m tests.fake_openai`, answering the parent and each sub-agent
by their own conversations), `python -m starter` commands, the notification receiver `python -m
tests.notify_receiver`, on the session dev server.

- A worker restarted while a sub-agent waits for a person: a new worker process takes the parent
  and the sub-agent over, the answer given on the sub-agent runs its delete, and the parent takes
  its answer; the notifications name both runs, and the new worker's metrics count the
  sub-agent that ended (`agent_sub_agents_total{finish_reason="stop"}`).
- With encryption at rest (`AGENT_ENCRYPTION_KEY` for every process): a sub-agent's approval is
  answered sealed for that sub-agent (its workflow id, the update and its first run id, inside
  the ciphertext), and the same sealed answer copied to its sibling, which waits for a call of
  the same id, is refused.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import RawValue

from runtime.codec import ENV_KEY, EncryptionCodec, parse_keys
from tests.cli.test_starter import seed
from tests.e2e.test_e2e import clean_env, fake_llm
from tests.e2e.test_encryption_e2e import Site, new_key
from tests.e2e.test_sealed_binding import keyless, update_payload
from tests.helpers import status, wait_for_phase, wait_until
from tests.notify_receiver import ReceiverProcess, receiver_process
from tests.ports import free_port
from tests.prometheus_text import scrape, total
from workflows.contract.arguments import arguments_digest
from workflows.contract.seal import Seal, read_seal, update_role
from workflows.model import AgentRunResult

__all__ = ["fake_llm"]  # the fixture: `python -m tests.fake_openai` on a free port


@pytest.fixture
async def receiver() -> AsyncIterator[ReceiverProcess]:
    async with receiver_process() as process:
        yield process


@pytest.fixture
async def site(
    client: Client, tmp_path: Path, fake_llm: str, receiver: ReceiverProcess
) -> AsyncIterator[Site]:
    workspace = seed(tmp_path / "workspace")
    base = clean_env()
    base.update(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_TASK_QUEUE=f"sub-{uuid.uuid4().hex[:8]}",
        AGENT_WORKSPACE=str(workspace),
        AGENT_STATE_DIR=str(tmp_path / "state"),
        LLM_BASE_URL=fake_llm,
        LLM_API_KEY="sk-sub-agents-e2e",
        LLM_MODEL="fake-model",
        AGENT_NOTIFY_URL=receiver.url,
    )
    s = Site(client, base, workspace, [])
    try:
        yield s
    finally:
        for process in reversed(s.started):
            await process.stop()


async def child_waiting(site: Site, child_id: str, **key: str) -> Any:
    """The sub-agent's status once it waits for approval."""
    handle = site.reader(**key).get_workflow_handle(child_id)

    async def started() -> bool:
        try:
            await handle.describe()
        except Exception:
            return False
        return True

    await wait_until(started)
    return await wait_for_phase(handle, "awaiting_approval")


async def notices(receiver: ReceiverProcess, event: str, workflow_id: str) -> list[dict[str, Any]]:
    async def found() -> list[dict[str, Any]]:
        bodies = [p["body"] for p in await receiver.received()]
        return [b for b in bodies if b["event"] == event and b["workflow_id"] == workflow_id]

    got: list[dict[str, Any]] = await wait_until(found, timeout=30, interval=0.2)
    return got


async def test_a_worker_restarted_while_a_sub_agent_waits(
    site: Site, receiver: ReceiverProcess
) -> None:
    first = await site.worker()
    workflow_id = f"sub-{uuid.uuid4().hex[:8]}"
    prompt = "delegate: delete the logs folder"
    started = await site.cli("run", "--sub-agents", "--no-follow", "--id", workflow_id, prompt)
    assert started.code == 0, started
    child_id = f"{workflow_id}.call_1"
    waiting = await child_waiting(site, child_id)
    [call] = waiting.pending_approvals
    [told] = await notices(receiver, "approval_waiting", child_id)
    assert (told["parent_workflow_id"], told["parent_call_id"]) == (workflow_id, "call_1")
    assert (told["call_id"], told["tool"]) == (call.id, "delete_path")

    # The worker goes away while the sub-agent waits; a new worker process takes over.
    assert await first.stop() == 0
    site.started.remove(first)
    metrics = f"127.0.0.1:{free_port()}"
    await site.worker(AGENT_METRICS_ADDRESS=metrics)
    parent = site.client.get_workflow_handle(workflow_id, result_type=AgentRunResult)
    shown = await status(parent)  # the new worker answers for the parent: it still waits on it
    assert shown.phase == "waiting_for_sub_agents"
    assert shown.sub_agents[0].pending_approvals[0].id == call.id
    pending = await site.cli("pending", "--json")
    entries = [json.loads(line) for line in pending.stdout.splitlines()]
    [entry] = [e for e in entries if e["workflow_id"] == child_id]
    assert entry["parent"]["workflow_id"] == workflow_id
    approved = await site.cli(
        "approve", child_id, call.id, "--run-id", str(waiting.run_id),
        "--sha256", arguments_digest(call.arguments), "--approver", "ann",
    )  # fmt: skip
    assert approved.code == 0, approved

    watched = await site.cli("watch", workflow_id)
    assert watched.code == 0, watched
    assert f"Sub-agent {child_id} answered: Deleted logs." in watched.stdout
    assert watched.stdout.splitlines()[-1] == "finished: stop"
    assert not (site.workspace / "logs").exists()
    [ended] = await notices(receiver, "run_finished", child_id)
    assert (ended["finish_reason"], ended["parent_workflow_id"]) == ("stop", workflow_id)
    samples = await scrape(f"http://{metrics}/metrics")  # the worker that saw it end counts it
    assert total(samples, "agent_sub_agents_total", finish_reason="stop") == 1


async def test_a_sub_agents_approval_is_sealed_for_that_sub_agent(site: Site) -> None:
    key = {ENV_KEY: new_key()}
    await site.worker(**key)
    workflow_id = f"sub-{uuid.uuid4().hex[:8]}"
    prompt = "delegate: delete the logs folder; delegate: delete notes.txt"
    started = await site.cli(
        "run", "--sub-agents", "--no-follow", "--id", workflow_id, prompt, **key
    )
    assert started.code == 0, started
    one, two = f"{workflow_id}.call_1", f"{workflow_id}.call_2"
    waiting = await child_waiting(site, one, **key)
    await child_waiting(site, two, **key)
    [call] = waiting.pending_approvals
    approved = await site.cli(
        "approve", one, call.id, "--run-id", str(waiting.run_id),
        "--sha256", arguments_digest(call.arguments), "--approver", "ann", **key,
    )  # fmt: skip
    assert approved.code == 0, approved
    reader = site.reader(**key)
    await wait_until(lambda: not (site.workspace / "logs").exists())

    # The answer as sealed in the first sub-agent's history, sent to its sibling by a client
    # without the key: the sibling waits for a call of the same id, and refuses it.
    attacker = keyless(site)
    sealed = await update_payload(attacker, one, "submit_approval")
    keyring = parse_keys(key)
    opened = EncryptionCodec(keyring, mark_plaintext=True).decrypt(sealed)
    assert read_seal(opened.metadata) == Seal(
        workflow_id=one, role=update_role("submit_approval"), first_run_id=str(waiting.run_id)
    )
    with pytest.raises(WorkflowUpdateFailedError):
        await attacker.get_workflow_handle(two).execute_update("submit_approval", RawValue(sealed))
    still = await status(reader.get_workflow_handle(two))
    assert still.phase == "awaiting_approval" and [c.id for c in still.pending_approvals] == [
        call.id
    ]
    assert (site.workspace / "notes.txt").exists()

    cancelled = await site.cli("cancel", workflow_id, "--reason", "enough", **key)
    assert cancelled.code == 0, cancelled
    result = await reader.get_workflow_handle(workflow_id, result_type=AgentRunResult).result()
    assert result.finish_reason == "cancelled"
    first_result = await reader.get_workflow_handle(one, result_type=AgentRunResult).result()
    assert first_result.finish_reason == "stop"
    second = await reader.get_workflow_handle(two, result_type=AgentRunResult).result()
    assert second.finish_reason == "cancelled" and "enough" in (second.error or "")
