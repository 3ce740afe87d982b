"""`starter reask W CALL` through the real CLI (a subprocess) against a real worker: an expired
call is asked again (a new deadline, `approval_reopened` naming who asked), `pending` says how to
ask again, the audit lists the expiry and the asking again; a call that has not expired, or an
unknown one, is refused with the workflow's reason in one line (exit 1)."""

from __future__ import annotations

from typing import Any

from temporalio.client import WorkflowHandle

from tests.cli import test_starter, test_starter_signed
from tests.cli.test_starter import Agent, new_id
from tests.cli.test_starter_signed import Keyed
from tests.helpers import events, of_type, wait_for_phase, wait_until

agent = test_starter.agent  # the fixture: a worker with the real activities, the scripted model
keyed = test_starter_signed.keyed  # a worker with an approvers file

PROMPT = "Please delete the logs folder"  # list_dir runs, then delete_path (call_2) waits


async def test_reask_an_expired_call_through_the_cli(agent: Agent) -> None:
    workflow_id = new_id()
    started = await agent.cli(
        "run", "--no-follow", "--id", workflow_id, "--approval-timeout", "0.5", PROMPT
    )
    assert started.code == 0, started
    handle = agent.handle(workflow_id)
    st = await wait_for_phase(handle, "approval_expired")
    assert st.expired == ["call_2"]

    pending = await agent.cli("pending")
    assert pending.code == 0, pending
    assert f"reask {workflow_id} call_2 (or reject " in pending.stdout

    asked = await agent.cli("reask", workflow_id, "call_2", "--approver", "ann")
    assert asked.code == 0, asked
    assert "call_2 asked again by ann: waiting until " in asked.stdout
    [reopened] = of_type(await events(handle), "approval_reopened")
    assert (reopened.call_id, reopened.approver) == ("call_2", "ann")
    assert reopened.deadline is not None

    # it expires again (a fresh timer of 0.5 s), and is rejected then
    await wait_until(lambda: _expired_twice(handle))
    rejected = await agent.cli("reject", workflow_id, "call_2", "--reason", "not now", "--yes")
    assert rejected.code == 0, rejected
    assert (await handle.result()).finish_reason == "stop"
    assert (agent.workspace / "logs").exists()

    audit = await agent.cli("audit", workflow_id)
    assert audit.code == 0, audit
    assert "expired 2, asked again 1, escalated 0" in audit.stdout
    assert "asked again  person ann" in audit.stdout


async def _expired_twice(handle: WorkflowHandle[Any, Any]) -> bool:
    return len(of_type(await events(handle), "approval_expired")) == 2


async def test_reask_of_a_waiting_or_unknown_call_is_refused(agent: Agent) -> None:
    workflow_id = new_id()
    started = await agent.cli("run", "--no-follow", "--id", workflow_id, PROMPT)
    assert started.code == 0, started
    handle = agent.handle(workflow_id)
    await wait_for_phase(handle, "awaiting_approval")

    waiting = await agent.cli("reask", workflow_id, "call_2")
    assert waiting.code == 1, waiting
    assert waiting.stderr.strip().splitlines() == [
        "error: call_2 not asked again: call 'call_2' has not expired: it is waiting for an"
        " answer (only an expired call can be asked again)"
    ]
    unknown = await agent.cli("reask", workflow_id, "call_9")
    assert unknown.code == 1, unknown
    assert "unknown call id 'call_9' (waiting: call_2)" in unknown.stderr
    assert not of_type(await events(handle), "approval_reopened")
    await agent.cli("cancel", workflow_id)
    assert (await handle.result()).finish_reason == "cancelled"


async def test_reask_is_signed_with_the_persons_key_and_verified(keyed: Keyed) -> None:
    """`reask` is signed with the person's own key, like an answer, and the worker (reading the
    same approvers file) verifies it before the call waits again."""
    workflow_id = new_id()
    started = await keyed.cli(
        "run", "--no-follow", "--id", workflow_id, "--approval-timeout", "0.5", PROMPT
    )
    assert started.code == 0, started
    handle = keyed.agent.handle(workflow_id)
    await wait_for_phase(handle, "approval_expired")
    ann = str(keyed.people.key_files["ann"])
    other = await keyed.cli("reask", workflow_id, "call_2", "--approver", "mallory", "--key", ann)
    assert other.code == 2, other  # a signed request names the key's person only
    asked = await keyed.cli("reask", workflow_id, "call_2", "--key", ann, USER="mallory")
    assert asked.code == 0, asked
    assert "call_2 asked again by ann" in asked.stdout
    [reopened] = of_type(await events(handle), "approval_reopened")
    assert reopened.approver == "ann"
    [sent] = await reopens_sent(keyed.agent, workflow_id)
    assert sent["approver"] == "ann" and sent["signature"] and sent["signed_at"]
    await keyed.cli("cancel", workflow_id)
    assert (await handle.result()).finish_reason == "cancelled"


async def reopens_sent(agent: Agent, workflow_id: str) -> list[dict[str, Any]]:
    """The `reopen_approval` requests the run accepted, as its history holds them."""
    history = await agent.handle(workflow_id).fetch_history()
    sent: list[dict[str, Any]] = []
    for event in history.events:
        if event.HasField("workflow_execution_update_accepted_event_attributes"):
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name == "reopen_approval":
                sent += await agent.client.data_converter.decode(request.input.args.payloads)
    return sent
