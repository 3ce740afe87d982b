"""Expiry is not a denial: with `on_approval_timeout: expire` (the default of new runs) a call
whose approval timeout passes unanswered waits on, `expired`; nothing is rejected and the model
is not asked again until a person asks again (`reopen_approval`, a new deadline), rejects it or
cancels the run. Escalation: a call that waited `approval_escalate_after_seconds` goes to
`approval_escalate_to` too. Real dev server (short real timeouts) or the real time-skipping test
server (an hour passes in seconds), a real worker with the fake activities."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.plugin import AgentPlugin
from runtime.signing_key import SigningKey, signed_answer, signed_reopen
from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import (
    events,
    messages,
    of_type,
    start_run,
    status,
    tool_messages,
    wait_for_phase,
    wait_until,
    worker_for,
)
from tests.people import module_people
from workflows.contract.arguments import arguments_digest
from workflows.contract.rules import ApprovalPolicy, WorkerPolicy
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    AgentStatus,
    AuditView,
    ReopenRequest,
    ToolApprovalResponse,
)

HOUR = 3600
SHORT = 0.5
"""A real approval timeout short enough for a test (the dev server's clock)."""

PEOPLE = module_people(
    {"alice": ["ops"], "ann": ["ops"], "dave": ["dev"], "olga": ["oncall"], "oscar": ["oncall"]}
)
"""The worker's approvers file: each with a key of their own."""
FORGER = module_people({"alice": ["ops"]})
LOGS = arguments_digest('{"path": "logs"}')


def signed_approval(handle: WorkflowHandle[Any, Any], run_id: object, who: str) -> dict[str, Any]:
    """`who`'s approval of c1, signed with their own key."""
    return signed_answer(
        PEOPLE.key(who),
        ToolApprovalResponse(call_id="c1", approved=True),
        approver=who,
        workflow_id=handle.id,
        run_id=str(run_id),
        arguments_sha256=LOGS,
    ).model_dump(mode="json")


def delete_logs() -> FakeAgentActivities:
    return FakeAgentActivities(
        replies=[calls(("c1", "delete_path", '{"path": "logs"}')), text("all done")],
        notifies=True,
    )


async def reopen(handle: WorkflowHandle[Any, Any], call_id: str, who: str = "ann") -> AgentStatus:
    result: AgentStatus = await handle.execute_update(
        "reopen_approval", {"call_id": call_id, "approver": who}, result_type=AgentStatus
    )
    return result


def refusal(err: WorkflowUpdateFailedError) -> str:
    assert isinstance(err.cause, ApplicationError)
    return err.cause.message


async def audit(handle: WorkflowHandle[Any, Any]) -> AuditView:
    view: AuditView = await handle.query("audit", result_type=AuditView)
    return view


async def test_expire_is_the_default_nothing_is_rejected_and_cancel_ends_it(client, task_queue):
    fake = delete_logs()
    options = AgentRunOptions(approval_timeout_seconds=SHORT)  # on_approval_timeout not given
    assert options.on_approval_timeout is None
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))
        st = await wait_for_phase(handle, "approval_expired")
        assert st.expired == ["c1"]
        assert [c.id for c in st.pending_approvals] == ["c1"]  # still waiting for a person
        assert st.approval_deadline is None  # no timer: it waits until someone acts
        assert st.awaiting_since is not None
        evs = await events(handle)
        [expired] = of_type(evs, "approval_expired")
        assert expired.call_ids == ["c1"] and [c.name for c in expired.calls] == ["delete_path"]
        assert not of_type(evs, "approval") and not of_type(evs, "finished")
        assert tool_messages(await messages(handle)) == []
        assert len(fake.llm_requests) == 1 and fake.tools_run == []  # the model was not told
        await wait_until(lambda: [r for r in fake.notify_requests if r.event == "approval_expired"])
        [told] = [r for r in fake.notify_requests if r.event == "approval_expired"]
        assert (told.call_id, told.tool) == ("c1", "delete_path")
        view = await audit(handle)
        assert view.counts.expired == 1 and view.counts.by_timeout == 0
        assert [(d.call_id, d.action, d.source) for d in view.decisions] == [
            ("c1", "expired", "timeout")
        ]
        await handle.signal("cancel", {"reason": "nobody is around"})
        result = await handle.result()
    assert result.finish_reason == "cancelled"
    assert result.error == "Agent run cancelled: nobody is around"
    assert len(fake.llm_requests) == 1 and fake.tools_run == []


async def test_reject_after_expiry_is_taken_approve_is_not(client, task_queue):
    fake = delete_logs()
    options = AgentRunOptions(approval_timeout_seconds=SHORT, on_approval_timeout="expire")
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))
        await wait_for_phase(handle, "approval_expired")
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                "submit_approval", {"call_id": "c1", "approved": True, "approver": "ann"}
            )
        assert "call 'c1' has expired: ask again first" in refusal(refused.value)
        await handle.execute_update(
            "submit_approval",
            {"call_id": "c1", "approved": False, "reason": "not today", "approver": "ann"},
        )
        result = await handle.result()
    assert result.finish_reason == "stop"
    [tool] = tool_messages(result.messages)
    assert tool.content == "Rejected: not today"
    assert fake.tools_run == [] and len(fake.llm_requests) == 2


async def test_reopen_of_a_call_that_has_not_expired_is_refused_and_changes_nothing(
    client, task_queue
):
    fake = delete_logs()
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        before = await wait_for_phase(handle, "awaiting_approval")
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await reopen(handle, "c1")
        assert refusal(refused.value) == (
            "call 'c1' has not expired: it is waiting for an answer (only an expired call can"
            " be asked again)"
        )
        with pytest.raises(WorkflowUpdateFailedError) as unknown:
            await reopen(handle, "nope")
        assert refusal(unknown.value) == "unknown call id 'nope' (waiting: c1)"
        with pytest.raises(WorkflowUpdateFailedError) as bad:
            await handle.execute_update("reopen_approval", {"call": "c1"})
        assert "invalid reopen request" in refusal(bad.value)
        after = await status(handle)
        assert after == before
        assert not of_type(await events(handle), "approval_reopened")
        await handle.signal("tool_approval", ToolApprovalResponse(call_id="c1", approved=True))
        result = await handle.result()
    assert result.finish_reason == "stop" and fake.tools_run == ["c1"]


async def test_reopen_gives_a_new_deadline_and_an_answer_then_runs_the_call(
    time_skipping_env, task_queue
):
    env = time_skipping_env
    client = env.client
    fake = delete_logs()
    options = AgentRunOptions(approval_timeout_seconds=HOUR)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))
        first = await wait_for_phase(handle, "awaiting_approval")
        assert first.approval_deadline is not None
        await env.sleep(timedelta(seconds=HOUR + 60))
        await wait_for_phase(handle, "approval_expired")
        reopened = await reopen(handle, "c1")
        assert reopened.phase == "awaiting_approval" and reopened.expired == []
        assert reopened.approval_deadline is not None
        assert reopened.approval_deadline - first.approval_deadline >= timedelta(seconds=HOUR)
        [event] = of_type(await events(handle), "approval_reopened")
        assert (event.call_id, event.approver, event.deadline) == (
            "c1",
            "ann",
            reopened.approval_deadline,
        )
        # the fresh timer: unanswered again, the call expires again
        await env.sleep(timedelta(seconds=HOUR + 60))
        again = await wait_for_phase(handle, "approval_expired")
        assert again.expired == ["c1"]
        assert len(of_type(await events(handle), "approval_expired")) == 2
        await reopen(handle, "c1", who="bob")
        await handle.signal(
            "tool_approval", ToolApprovalResponse(call_id="c1", approved=True, approver="bob")
        )
        result = await handle.result()
        view = await audit(handle)
    assert result.finish_reason == "stop" and fake.tools_run == ["c1"]
    assert [(d.action, d.approver) for d in view.decisions] == [
        ("expired", None),
        ("reopened", "ann"),
        ("expired", None),
        ("reopened", "bob"),
        ("decided", "bob"),
    ]
    assert (view.counts.expired, view.counts.reopened, view.counts.approved_by_person) == (2, 2, 1)
    told = [r.event for r in fake.notify_requests]
    assert told.count("approval_expired") == 2
    assert told.count("approval_waiting") == 3  # the first wait and each time it was asked again


async def test_a_remembered_rule_never_decides_an_expired_call(time_skipping_env, task_queue):
    """Two calls expire; a person asks again for one and approves it with `remember`: the rule
    that remembers it does not decide the other, which stays expired until someone asks again
    for it (or rejects it)."""
    env = time_skipping_env
    client = env.client
    both = calls(
        ("c1", "delete_path", '{"path": "logs"}'), ("c2", "delete_path", '{"path": "tmp"}')
    )
    fake = FakeAgentActivities(replies=[both, text("all done")])
    options = AgentRunOptions(approval_timeout_seconds=HOUR)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))
        await wait_for_phase(handle, "awaiting_approval")
        await env.sleep(timedelta(seconds=HOUR + 60))
        expired = await wait_for_phase(handle, "approval_expired")
        assert expired.expired == ["c1", "c2"]
        await reopen(handle, "c1")
        await handle.execute_update(
            "submit_approval",
            {"call_id": "c1", "approved": True, "approver": "ann", "remember": True},
        )
        st = await status(handle)
        assert [c.id for c in st.pending_approvals] == ["c2"] and st.expired == ["c2"]
        assert [a.call_id for a in of_type(await events(handle), "approval")] == ["c1"]
        await handle.execute_update(
            "submit_approval",
            {"call_id": "c2", "approved": False, "reason": "not that one", "approver": "ann"},
        )
        result = await handle.result()
    assert result.finish_reason == "stop" and fake.tools_run == ["c1"]


async def test_the_operators_escalation_widens_its_own_enforced_rule(time_skipping_env, task_queue):
    """The worker's own AGENT_ESCALATE_TO (its setup's, not the run's options) widens the
    worker's enforced approver rule once the call was escalated: `oncall`'s signed approval is
    refused before, taken after, and the worker is told the groups it escalated to."""
    env = time_skipping_env
    client = env.client
    rule = {"tool": "delete_path", "decision": "ask", "approvers": {"groups": ["ops"]}}
    fake = delete_logs()
    fake.worker_rules = WorkerPolicy.model_validate({"enforced": [rule]})
    fake.setup = {"escalate_after_seconds": HOUR, "escalate_to": ["oncall"]}
    plugin = AgentPlugin(activities=[*fake.activities(), PEOPLE.verifier().verify_answer])
    async with Worker(client, task_queue=task_queue, plugins=[plugin]):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        st = await wait_for_phase(handle, "awaiting_approval")
        olga = signed_approval(handle, st.run_id, "olga")
        with pytest.raises(WorkflowUpdateFailedError) as before:
            await handle.execute_update("submit_approval", olga)
        assert refusal(before.value) == "only ops may approve delete_path"
        await env.sleep(timedelta(seconds=HOUR + 60))

        async def escalated() -> bool:
            return (await status(handle)).escalations == {"c1": ["oncall"]}

        await wait_until(escalated)
        await handle.execute_update("submit_approval", signed_approval(handle, st.run_id, "olga"))
        result = await handle.result()
    assert result.finish_reason == "stop" and fake.tools_run == ["c1"]
    [request] = fake.tool_requests
    assert request.escalated_to == ["oncall"] and [v.approver for v in request.votes or []] == [
        "olga"
    ]


async def test_explicit_cancel_still_cancels_the_run_at_the_timeout(client, task_queue):
    fake = delete_logs()
    options = AgentRunOptions(approval_timeout_seconds=SHORT, on_approval_timeout="cancel")
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))
        result = await handle.result()
        evs = await events(handle)
    assert result.finish_reason == "cancelled" and result.error == "Approval timed out"
    assert not of_type(evs, "approval_expired")


async def test_a_call_that_waited_long_is_escalated(client, task_queue):
    fake = delete_logs()
    options = AgentRunOptions(
        approval_escalate_after_seconds=SHORT, approval_escalate_to=["ops", "oncall"]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))

        async def escalated() -> AgentStatus | None:
            st = await status(handle)
            return st if st.escalations else None

        st = await wait_until(escalated)
        assert st.phase == "awaiting_approval" and st.escalations == {"c1": ["ops", "oncall"]}
        [event] = of_type(await events(handle), "approval_escalated")
        assert (event.call_ids, event.groups) == (["c1"], ["ops", "oncall"])
        await wait_until(
            lambda: [r for r in fake.notify_requests if r.event == "approval_escalated"]
        )
        [told] = [r for r in fake.notify_requests if r.event == "approval_escalated"]
        assert (told.call_id, told.groups) == ("c1", ["ops", "oncall"])
        view = await audit(handle)
        assert view.counts.escalated == 1
        assert [(d.action, d.reason) for d in view.decisions] == [("escalated", "ops, oncall")]
        await handle.signal("tool_approval", ToolApprovalResponse(call_id="c1", approved=True))
        result = await handle.result()
        assert len(of_type(await events(handle), "approval_escalated")) == 1  # once per call
    assert result.finish_reason == "stop"


async def test_a_signed_reopen_is_verified_by_the_worker(client, task_queue):
    """The person asking again signs like an answer (decision `reopen`): a good signature is
    taken (the approver it names), a forged one, or one made for approving, is refused and
    changes nothing."""
    key = PEOPLE.key("alice")
    fake = delete_logs()
    plugin = AgentPlugin(activities=[*fake.activities(), PEOPLE.verifier().verify_answer])
    options = AgentRunOptions(approval_timeout_seconds=SHORT)
    async with Worker(client, task_queue=task_queue, plugins=[plugin]):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))
        st = await wait_for_phase(handle, "approval_expired")
        assert st.run_id is not None

        def reopen_signed(with_key: SigningKey) -> dict[str, Any]:
            request = signed_reopen(
                with_key,
                ReopenRequest(call_id="c1"),
                approver="alice",
                workflow_id=handle.id,
                run_id=str(st.run_id),
                arguments_sha256=LOGS,
            )
            return request.model_dump(mode="json")

        with pytest.raises(WorkflowUpdateFailedError) as forged:
            await handle.execute_update("reopen_approval", reopen_signed(FORGER.key("alice")))
        assert "asking again for call 'c1' is refused" in refusal(forged.value)
        approved = signed_approval(handle, st.run_id, "alice")
        as_reopen = {
            "call_id": "c1",
            **{k: approved[k] for k in ("approver", "signed_at", "signature")},
        }
        with pytest.raises(WorkflowUpdateFailedError) as other_decision:
            await handle.execute_update("reopen_approval", as_reopen)
        assert "does not verify" in refusal(other_decision.value)
        assert (await status(handle)).phase == "approval_expired"
        assert not of_type(await events(handle), "approval_reopened")

        reopened = await handle.execute_update(
            "reopen_approval", reopen_signed(key), result_type=AgentStatus
        )
        assert reopened.expired == []
        [event] = of_type(await events(handle), "approval_reopened")
        assert event.approver == "alice"
        await handle.execute_update(
            "submit_approval", {"call_id": "c1", "approved": False, "reason": "no"}
        )
        result = await handle.result()
    assert result.finish_reason == "stop" and fake.tools_run == []


async def test_escalation_makes_its_groups_eligible_under_an_approver_rule(
    time_skipping_env, task_queue
):
    """A call only `ops` may approve: `dev`'s signed approval is refused until the call was
    escalated to `dev` (after an hour, on the time-skipping server); then it is taken and the
    call runs."""
    env = time_skipping_env
    client = env.client
    fake = delete_logs()
    plugin = AgentPlugin(activities=[*fake.activities(), PEOPLE.verifier().verify_answer])
    rule = {"tool": "delete_path", "decision": "ask", "approvers": {"groups": ["ops"]}}
    options = AgentRunOptions(
        approval_policy=ApprovalPolicy.model_validate({"rules": [rule]}),
        approval_escalate_after_seconds=HOUR,
        approval_escalate_to=["dev"],
    )
    async with Worker(client, task_queue=task_queue, plugins=[plugin]):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))
        st = await wait_for_phase(handle, "awaiting_approval")
        assert st.run_id is not None
        dev_approves = signed_approval(handle, st.run_id, "dave")
        with pytest.raises(WorkflowUpdateFailedError) as before:
            await handle.execute_update("submit_approval", dev_approves)
        assert "only ops may approve delete_path" in refusal(before.value)
        await env.sleep(timedelta(seconds=HOUR + 60))

        async def escalated() -> bool:
            return (await status(handle)).escalations == {"c1": ["dev"]}

        await wait_until(escalated)
        await handle.execute_update("submit_approval", dev_approves)
        result = await handle.result()
        [approval] = of_type(await events(handle), "approval")
    assert result.finish_reason == "stop" and fake.tools_run == ["c1"]
    assert approval.approved and approval.approver == "dave"


async def test_escalation_does_not_widen_the_workers_enforced_approver_rule(
    time_skipping_env, task_queue
):
    """A call the worker's enforced rule leaves to `ops`, escalated to `oncall` after an hour:
    the event and notification say only `ops` may answer it, and `oncall`'s signed approval is
    refused at once (the update with the reason, the signal with a warning), counts nothing,
    and the call waits on; `ops`' approval then runs it (the worker counts `ops` alone)."""
    env = time_skipping_env
    client = env.client
    rule = {"tool": "delete_path", "decision": "ask", "approvers": {"groups": ["ops"]}}
    fake = delete_logs()
    fake.worker_rules = WorkerPolicy.model_validate({"enforced": [rule]})
    plugin = AgentPlugin(activities=[*fake.activities(), PEOPLE.verifier().verify_answer])
    options = AgentRunOptions(approval_escalate_after_seconds=HOUR, approval_escalate_to=["oncall"])
    async with Worker(client, task_queue=task_queue, plugins=[plugin]):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))
        st = await wait_for_phase(handle, "awaiting_approval")
        assert st.run_id is not None

        run_id = st.run_id

        await env.sleep(timedelta(seconds=HOUR + 60))

        async def escalated() -> AgentStatus | None:
            found = await status(handle)
            return found if found.escalations else None

        st = await wait_until(escalated)
        assert st.escalations == {"c1": ["oncall"]}
        assert [(q.call_id, q.groups) for q in st.quorums] == [("c1", ["ops"])]
        [event] = of_type(await events(handle), "approval_escalated")
        assert (event.groups, event.rule_groups) == (["oncall"], {"c1": ["ops"]})
        told = await wait_until(
            lambda: [r for r in fake.notify_requests if r.event == "approval_escalated"]
        )
        assert [(r.groups, r.rule_groups) for r in told] == [(["oncall"], ["ops"])]

        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await handle.execute_update("submit_approval", signed_approval(handle, run_id, "olga"))
        assert refusal(caught.value) == (
            "only ops may approve delete_path (the worker's enforced rule: the escalation to"
            " oncall does not widen it)"
        )
        await handle.signal("tool_approval", signed_approval(handle, run_id, "oscar"))

        async def warned() -> list[str] | None:
            found = [e.message for e in of_type(await events(handle), "warning")]
            return found or None

        [warning] = await wait_until(warned)
        assert "the escalation to oncall does not widen it" in warning
        st = await status(handle)
        assert st.phase == "awaiting_approval" and [c.id for c in st.pending_approvals] == ["c1"]
        assert of_type(await events(handle), "approval_vote") == []
        assert (await audit(handle)).counts.votes == 0

        await handle.execute_update("submit_approval", signed_approval(handle, run_id, "ann"))
        result = await handle.result()
        [approval] = of_type(await events(handle), "approval")
    assert result.finish_reason == "stop" and fake.tools_run == ["c1"]
    assert approval.approved and approval.approver == "ann"
