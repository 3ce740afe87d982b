"""Sealed bytes copied between runs, tried from outside: the real `python worker.py` with a key,
the real `python -m starter` as the key holder, and a client WITHOUT the key (no codec at all)
that reads the raw history and sends the sealed bytes it found to another run, another handler,
or a new start. Every copy is refused as an unsealed payload is; the key holder's own commands
keep working."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.common import RawValue

from runtime.codec import ENV_KEY
from tests.e2e import test_encryption_e2e as encryption
from tests.e2e.test_encryption_e2e import Site, new_key, start_waiting
from tests.helpers import events, status, wait_until

site = encryption.site  # the same deployment fixture: a dev server, a queue, a workspace
NOT_FOR_THIS_RUN = "not sealed for this run"
UNSEALED = "not encrypted with the worker's key"


def keyless(site: Site) -> Client:
    """A namespace client without the key and without the project's codec: it sends payloads
    exactly as it read them."""
    return Client(site.client.service_client, namespace="default")


async def raw_history(client: Client, workflow_id: str) -> list[object]:
    return list((await client.get_workflow_handle(workflow_id).fetch_history()).events)


async def start_payload(client: Client, workflow_id: str) -> Payload:
    first = (await raw_history(client, workflow_id))[0]
    [payload] = first.workflow_execution_started_event_attributes.input.payloads  # type: ignore[attr-defined]
    return payload


async def signal_payload(client: Client, workflow_id: str, name: str) -> Payload:
    for event in await raw_history(client, workflow_id):
        attributes = event.workflow_execution_signaled_event_attributes  # type: ignore[attr-defined]
        if attributes.signal_name == name:
            [payload] = attributes.input.payloads
            return payload
    raise AssertionError(f"no {name} signal in {workflow_id}'s history")


async def update_payload(client: Client, workflow_id: str, name: str) -> Payload:
    for event in await raw_history(client, workflow_id):
        request = event.workflow_execution_update_accepted_event_attributes.accepted_request  # type: ignore[attr-defined]
        if request.input.name == name:
            [payload] = request.input.args.payloads
            return payload
    raise AssertionError(f"no {name} update in {workflow_id}'s history")


async def warnings_of(site: Site, workflow_id: str, key: dict[str, str]) -> list[str]:
    handle = site.reader(**key).get_workflow_handle(workflow_id)
    return [e.message for e in await events(handle) if e.type == "warning"]


async def warned(site: Site, workflow_id: str, key: dict[str, str], needle: str) -> str:
    async def found() -> str | None:
        hits = [w for w in await warnings_of(site, workflow_id, key) if needle in w]
        return hits[0] if hits else None

    result: str = await wait_until(found, 20)
    return result


async def test_a_loosening_policy_and_a_message_copied_into_another_run(
    site: Site, tmp_path: Path
) -> None:
    key = {ENV_KEY: new_key()}
    await site.worker(**key)
    first, second = (f"bind-{uuid.uuid4().hex[:8]}" for _ in range(2))
    await start_waiting(site, first, **key)
    await start_waiting(site, second, **key)

    # The key holder loosens the first run's rules and writes to it: both accepted there.
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"rules": [{"tool": "delete_path", "decision": "allow"}]}))
    said = await site.cli("say", first, "also list the notes", **key)
    assert said.code == 0, said
    loosened = await site.cli("policy", first, "--set", str(rules), **key)
    assert loosened.code == 0, loosened
    assert not [w for w in await warnings_of(site, first, key) if NOT_FOR_THIS_RUN in w]

    # Without the key, the same sealed bytes sent to the second run are refused.
    attacker = keyless(site)
    target = attacker.get_workflow_handle(second)
    policy = await update_payload(attacker, first, "set_approval_policy")
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await target.execute_update("set_approval_policy", RawValue(policy))
    # (the reason is sealed in the failure: only its type reads without the key)
    assert "InvalidApprovalPolicy" in str(refused.value.cause)
    message = await signal_payload(attacker, first, "send_message")
    await target.signal("send_message", RawValue(message))
    assert "send_message" in await warned(site, second, key, NOT_FOR_THIS_RUN)

    waiting = await status(site.reader(**key).get_workflow_handle(second))
    assert waiting.phase == "awaiting_approval"
    assert [c.id for c in waiting.pending_approvals] == ["call_2"]
    cancelled = await site.cli("cancel", second, **key)
    assert cancelled.code == 0, cancelled


async def test_a_start_copied_into_a_new_workflow(site: Site) -> None:
    key = {ENV_KEY: new_key()}
    await site.worker(**key)
    original, copy = (f"bind-{uuid.uuid4().hex[:8]}" for _ in range(2))
    await start_waiting(site, original, **key)
    attacker = keyless(site)

    # The original run's sealed input, started again under a new workflow id, without the key.
    sealed_input = await start_payload(attacker, original)
    replayed = await attacker.start_workflow(
        "AgentWorkflow",
        RawValue(sealed_input),
        id=copy,
        task_queue=site.base["AGENT_TASK_QUEUE"],
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await site.reader(**key).get_workflow_handle(replayed.id).result()
    assert NOT_FOR_THIS_RUN in str(failed.value.cause)
    assert (await site.cli("cancel", original, **key)).code == 0


async def test_an_empty_cancel_without_the_key(site: Site) -> None:
    key = {ENV_KEY: new_key()}
    await site.worker(**key)
    workflow_id = f"bind-{uuid.uuid4().hex[:8]}"
    await start_waiting(site, workflow_id, **key)

    # A cancel with no payload at all, from the client without the key: refused, not a cancel.
    await keyless(site).get_workflow_handle(workflow_id).signal("cancel")
    assert "cancel" in await warned(site, workflow_id, key, UNSEALED)
    still = await status(site.reader(**key).get_workflow_handle(workflow_id))
    assert still.phase == "awaiting_approval" and not still.cancel_requested

    # The key holder's own cancel (the terminal's) still cancels.
    cancelled = await site.cli("cancel", workflow_id, **key)
    assert cancelled.code == 0, cancelled
    result = await site.reader(**key).get_workflow_handle(workflow_id).result()
    assert result["finish_reason"] == "cancelled"


async def test_a_policy_copied_into_a_later_run_of_the_same_workflow_id(
    site: Site, tmp_path: Path
) -> None:
    """The same workflow id, started again once the first run ended: a new chain, with its own
    first run id. What was sealed for the first chain is not the second's."""
    key = {ENV_KEY: new_key()}
    await site.worker(**key)
    workflow_id = f"bind-{uuid.uuid4().hex[:8]}"
    await start_waiting(site, workflow_id, **key)
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"rules": [{"tool": "list_dir", "decision": "allow"}]}))
    assert (await site.cli("policy", workflow_id, "--set", str(rules), **key)).code == 0
    attacker = keyless(site)
    policy = await update_payload(attacker, workflow_id, "set_approval_policy")
    assert (await site.cli("cancel", workflow_id, **key)).code == 0
    await site.reader(**key).get_workflow_handle(workflow_id).result()

    await start_waiting(site, workflow_id, **key)  # the id again: a new first run
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await attacker.get_workflow_handle(workflow_id).execute_update(
            "set_approval_policy", RawValue(policy)
        )
    assert "InvalidApprovalPolicy" in str(refused.value.cause)
    shown = await site.cli("policy", workflow_id, **key)
    assert shown.code == 0 and "list_dir" not in shown.stdout, shown
    assert (await site.cli("cancel", workflow_id, **key)).code == 0
