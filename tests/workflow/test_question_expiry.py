"""A question (`ask_user`) under the approval timeout, as a call waiting for approval: with
`on_approval_timeout: expire` (the default of new runs) it expires at the deadline (in the
`approval_expired` event and notification, phase `approval_expired`, `status.expired`), an answer
to it is refused until someone asks again (`reopen_approval`: a fresh deadline, `question_waiting`
again), and then the answer reaches the model; cancel still ends the run, `"cancel"` and
`"reject"` do what they did. The real time-skipping test server (an hour passes in seconds) or the
dev server (short real timeouts), a real worker with the fake activities."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import events, of_type, start_run, status, wait_for_phase, wait_until, worker_for
from workflows import names
from workflows.model import AgentRunInput, AgentRunOptions, AgentStatus, AuditView
from workflows.people.ask_user import ASK_USER

HOUR = 3600
SHORT = 0.5
COLOR = json.dumps({"question": "Which color?", "options": ["red", "blue"]})


def asking() -> FakeAgentActivities:
    return FakeAgentActivities(
        replies=[calls(("call_1", ASK_USER, COLOR)), text("ok")], notifies=True
    )


def prompt(**options: Any) -> AgentRunInput:
    return AgentRunInput.from_prompt("help me", AgentRunOptions(ask_user=True, **options))


async def refused(handle: WorkflowHandle[Any, Any], name: str, payload: object) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await handle.execute_update(name, payload)
    return str(caught.value.cause)


async def test_a_question_expires_is_asked_again_and_then_answered(time_skipping_env, task_queue):
    env = time_skipping_env
    client = env.client
    fake = asking()
    fake.client = client  # the model's second call reads the history it was sent
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, prompt(approval_timeout_seconds=HOUR))
        await wait_for_phase(handle, "awaiting_answer")
        await env.sleep(timedelta(seconds=HOUR + 60))
        st = await wait_for_phase(handle, "approval_expired")
        assert st.expired == ["call_1"] and st.approval_deadline is None
        assert [q.call_id for q in st.pending_questions] == ["call_1"]  # still waiting
        [expired] = of_type(await events(handle), "approval_expired")
        assert expired.call_ids == ["call_1"] and [c.name for c in expired.calls] == [ASK_USER]
        await wait_until(lambda: [r for r in fake.notify_requests if r.event == "approval_expired"])

        why = await refused(
            handle, names.UPDATE_SUBMIT_ANSWER, {"call_id": "call_1", "answer": "red"}
        )
        assert "question 'call_1' has expired: ask again first" in why
        assert of_type(await events(handle), "answer") == []  # nothing recorded
        assert (await status(handle)).phase == "approval_expired"

        reopened: AgentStatus = await handle.execute_update(
            names.UPDATE_REOPEN_APPROVAL,
            {"call_id": "call_1", "approver": "ann"},
            result_type=AgentStatus,
        )
        assert reopened.phase == "awaiting_answer" and reopened.expired == []
        assert reopened.approval_deadline is not None  # a fresh deadline
        [event] = of_type(await events(handle), "approval_reopened")
        assert (event.call_id, event.approver) == ("call_1", "ann")

        def asked() -> list[str | None]:
            return [r.call_id for r in fake.notify_requests if r.event == "question_waiting"]

        await wait_until(lambda: len(asked()) == 2)  # asked again: told again, as a question
        assert not [r for r in fake.notify_requests if r.event == "approval_waiting"]
        again = await refused(handle, names.UPDATE_REOPEN_APPROVAL, {"call_id": "call_1"})
        assert "has not expired" in again

        await handle.execute_update(
            names.UPDATE_SUBMIT_ANSWER, {"call_id": "call_1", "answer": "blue", "approver": "bo"}
        )
        result = await handle.result()
        view: AuditView = await handle.query("audit", result_type=AuditView)
    tool = next(m for m in result.messages if m.role == "tool")
    assert json.loads(tool.content)["data"] == {"answer": "blue"}
    assert fake.llm_prefixes[1][-1] == tool  # the model read the answer
    assert result.finish_reason == "stop"
    assert [d.action for d in view.decisions][:2] == ["expired", "reopened"]
    assert view.counts.expired == 1 and view.counts.reopened == 1


async def test_an_expired_question_can_be_cancelled(client, task_queue):
    fake = asking()
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, prompt(approval_timeout_seconds=SHORT))
        st = await wait_for_phase(handle, "approval_expired")
        assert st.expired == ["call_1"]
        await handle.signal("cancel", {"reason": "nobody is around"})
        result = await handle.result()
    assert result.finish_reason == "cancelled"
    assert result.error == "Agent run cancelled: nobody is around"
    assert len(fake.llm_requests) == 1  # the model was not told


async def test_with_cancel_the_timeout_still_ends_a_run_that_waits_for_an_answer(
    client, task_queue
):
    fake = asking()
    options = {"approval_timeout_seconds": SHORT, "on_approval_timeout": "cancel"}
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, prompt(**options))
        result = await handle.result()
        evs = await events(handle)
    assert result.finish_reason == "cancelled" and result.error == "Approval timed out"
    assert not of_type(evs, "approval_expired")


async def test_a_question_and_a_call_expire_in_one_event(client, task_queue):
    fake = FakeAgentActivities(
        replies=[
            calls(("call_1", ASK_USER, COLOR), ("call_2", "delete_path", '{"path": "logs"}')),
            text("done"),
        ]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, prompt(approval_timeout_seconds=SHORT))
        st = await wait_for_phase(handle, "approval_expired")
        assert sorted(st.expired) == ["call_1", "call_2"]
        [expired] = of_type(await events(handle), "approval_expired")
        assert sorted(expired.call_ids) == ["call_1", "call_2"]
        assert sorted(c.name for c in expired.calls) == [ASK_USER, "delete_path"]
        await handle.signal("cancel", {"reason": "later"})
        result = await handle.result()
    assert result.finish_reason == "cancelled"


async def test_asking_again_for_a_question_is_signed_and_verified(client, task_queue):
    """`starter reask` and the web app sign asking again for a question as for a call (the
    question's `arguments_sha256`); the worker verifies it, and a forged one changes nothing."""
    from runtime.signing_key import SigningKey
    from starter.handle import AgentHandle
    from starter.signed_answer import reopen_as_sent
    from tests.workflow.test_signed_answers import FORGER, KEY, signed_worker

    fake = asking()
    async with signed_worker(client, task_queue, fake):
        handle = await start_run(client, task_queue, prompt(approval_timeout_seconds=SHORT))
        await wait_for_phase(handle, "approval_expired")
        agent = AgentHandle(client, handle.id)

        async def sent(key: SigningKey) -> dict[str, object]:
            request = await reopen_as_sent(agent, "call_1", key=key, approver="alice")
            assert request.signature is not None
            return request.model_dump(mode="json")

        forged = await refused(
            handle, names.UPDATE_REOPEN_APPROVAL, await sent(FORGER.key("alice"))
        )
        assert "asking again for call 'call_1' is refused" in forged
        assert not of_type(await events(handle), "approval_reopened")
        await handle.execute_update(names.UPDATE_REOPEN_APPROVAL, await sent(KEY))
        [reopened] = of_type(await events(handle), "approval_reopened")
        assert reopened.approver == "alice"
        await handle.signal("cancel", {"reason": "done here"})
        await handle.result()
