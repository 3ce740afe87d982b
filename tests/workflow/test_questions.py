"""Questions to a person (`ask_user`) on the dev server with fake activities: the tool offered
only when enabled, the run waiting in `awaiting_answer`, the `submit_answer` update and its
refusals, the answer reaching the model as the tool's result, bad questions answered at once,
the timeout, the audit."""

from __future__ import annotations

import json

import pytest
from temporalio.client import WorkflowUpdateFailedError

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import events, of_type, start_run, status, wait_for_phase, worker_for
from workflows import names
from workflows.contract.arguments import arguments_digest
from workflows.model import AgentRunInput, AgentRunOptions, AuditView, PendingQuestion
from workflows.people.ask_user import ASK_USER

COLOR = json.dumps({"question": "Which color?", "options": ["red", "blue"]})


def asking(arguments: str, call_id: str = "call_1") -> FakeAgentActivities:
    return FakeAgentActivities(replies=[calls((call_id, ASK_USER, arguments)), text("ok")])


def prompt(**options: object) -> AgentRunInput:
    return AgentRunInput.from_prompt("help me", AgentRunOptions(**options))


async def refused(handle: object, payload: object) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await handle.execute_update(names.UPDATE_SUBMIT_ANSWER, payload)  # type: ignore[attr-defined]
    return str(caught.value.cause)


async def test_ask_user_is_offered_only_when_enabled(client, task_queue):
    quiet = FakeAgentActivities(replies=[text("hi")])
    async with worker_for(client, task_queue, quiet):
        await (await start_run(client, task_queue, prompt())).result()
    assert quiet.llm_requests[0].offered == []
    asked = FakeAgentActivities(replies=[text("hi")])
    async with worker_for(client, task_queue, asked):
        await (await start_run(client, task_queue, prompt(ask_user=True))).result()
    assert [s.name for s in asked.llm_requests[0].offered] == [ASK_USER]
    by_worker = FakeAgentActivities(replies=[text("hi")], ask_user=True)
    async with worker_for(client, task_queue, by_worker):
        await (await start_run(client, task_queue, prompt())).result()
        await (await start_run(client, task_queue, prompt(ask_user=False))).result()
    assert [s.name for s in by_worker.llm_requests[0].offered] == [ASK_USER]
    assert by_worker.llm_requests[1].offered == []


async def test_a_call_of_ask_user_when_not_offered_is_an_unknown_tool(client, task_queue):
    fake = asking(COLOR)
    async with worker_for(client, task_queue, fake):
        result = await (await start_run(client, task_queue, prompt())).result()
    assert result.finish_reason == "stop"
    tool = next(m for m in result.messages if m.role == "tool")
    assert tool.content == "Tool 'ask_user' not found"
    assert fake.tool_requests == []


async def test_the_answer_is_the_tool_result_and_refusals_change_nothing(client, task_queue):
    fake = asking(COLOR)
    fake.client = client
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, prompt(ask_user=True))
        st = await wait_for_phase(handle, "awaiting_answer")
        assert st.pending_questions == [
            PendingQuestion(
                call_id="call_1",
                question="Which color?",
                options=["red", "blue"],
                arguments_sha256=arguments_digest(COLOR),
            )
        ]
        assert st.pending_approvals == [] and st.awaiting_since is not None
        assert "not one of the options: red, blue" in await refused(
            handle, {"call_id": "call_1", "answer": "green"}
        )
        assert "takes one of its options as a text" in await refused(
            handle, {"call_id": "call_1", "answer": ["red"]}
        )
        assert "unknown question 'call_9' (waiting: call_1)" in await refused(
            handle, {"call_id": "call_9", "answer": "red"}
        )
        assert "invalid answer" in await refused(handle, {"call_id": "call_1"})
        assert "another run" in await refused(
            handle, {"call_id": "call_1", "answer": "red", "run_id": "someone-else"}
        )
        assert (await status(handle)).pending_questions[0].call_id == "call_1"
        left = await handle.execute_update(
            names.UPDATE_SUBMIT_ANSWER,
            {"call_id": "call_1", "answer": " blue ", "approver": "ann", "run_id": st.run_id},
        )
        assert left == []
        result = await handle.result()
        evs = await events(handle)
        audit = await handle.query(names.QUERY_AUDIT, result_type=AuditView)
    assert result.finish_reason == "stop"
    tool = next(m for m in result.messages if m.role == "tool")
    assert tool.tool_call_id == "call_1" and tool.name == ASK_USER
    assert json.loads(tool.content) == {"ok": True, "error": None, "data": {"answer": "blue"}}
    # the model's second request read the answer as the call's result
    assert fake.llm_prefixes[1][-1].content == tool.content
    assert fake.tool_requests == []  # never an execute_tool
    (question,) = of_type(evs, "question")
    assert question.question == "Which color?" and question.options == ["red", "blue"]
    (answer,) = of_type(evs, "answer")
    assert answer.answer == "blue" and answer.approver == "ann" and answer.source == "person"
    assert of_type(evs, "awaiting_approval") == []
    (entry,) = audit.decisions
    assert entry.tool == ASK_USER and entry.answer == "blue" and entry.approver == "ann"
    assert audit.counts.questions_answered == 1


async def test_a_question_that_takes_several_options_takes_a_list(client, task_queue):
    several = json.dumps({"question": "Which?", "options": ["a", "b", "c"], "multiple": True})
    fake = asking(several)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, prompt(ask_user=True))
        st = await wait_for_phase(handle, "awaiting_answer")
        assert st.pending_questions[0].multiple is True
        assert "takes a list of its options" in await refused(
            handle, {"call_id": "call_1", "answer": "a"}
        )
        assert "'d' is not one of the options" in await refused(
            handle, {"call_id": "call_1", "answer": ["a", "d"]}
        )
        await handle.execute_update(
            names.UPDATE_SUBMIT_ANSWER, {"call_id": "call_1", "answer": ["c", "a", "c"]}
        )
        result = await handle.result()
    tool = next(m for m in result.messages if m.role == "tool")
    assert json.loads(tool.content)["data"] == {"answer": ["c", "a"]}


async def test_free_text_answers_and_bad_questions_never_wait(client, task_queue):
    fake = FakeAgentActivities(
        replies=[
            calls(
                ("call_1", ASK_USER, json.dumps({"question": "Your name?"})),
                ("call_2", ASK_USER, json.dumps({"options": ["x"]})),
                ("call_3", ASK_USER, json.dumps({"question": "Q", "options": "x"})),
            ),
            text("ok"),
        ]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, prompt(ask_user=True))
        st = await wait_for_phase(handle, "awaiting_answer")
        assert [q.call_id for q in st.pending_questions] == ["call_1"]
        assert "non-empty text" in await refused(handle, {"call_id": "call_1", "answer": " "})
        await handle.execute_update(
            names.UPDATE_SUBMIT_ANSWER, {"call_id": "call_1", "answer": "Ann Smith"}
        )
        result = await handle.result()
    tools = {m.tool_call_id: json.loads(m.content) for m in result.messages if m.role == "tool"}
    assert tools["call_1"]["data"] == {"answer": "Ann Smith"}
    assert "'question' must be a non-empty string" in tools["call_2"]["error"]
    assert "'options' must be a list of strings" in tools["call_3"]["error"]


async def test_an_unanswered_question_times_out_as_an_approval_does(client, task_queue):
    fake = asking(COLOR)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(
            client,
            task_queue,
            prompt(ask_user=True, approval_timeout_seconds=1, on_approval_timeout="reject"),
        )
        result = await handle.result()
        evs = await events(handle)
    tool = next(m for m in result.messages if m.role == "tool")
    assert json.loads(tool.content)["error"] == "no answer: the question timed out"
    (answer,) = of_type(evs, "answer")
    assert answer.source == "timeout" and answer.answer is None
    assert result.finish_reason == "stop"


async def test_an_answer_when_no_question_waits_is_refused(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "delete_path", '{"path": "logs"}')), text("done")]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, prompt(ask_user=True))
        await wait_for_phase(handle, "awaiting_approval")
        why = await refused(handle, {"call_id": "call_1", "answer": "yes"})
        assert "no question is waiting for an answer (got one for 'call_1')" in why
        assert [c.id for c in (await status(handle)).pending_approvals] == ["call_1"]
        await handle.cancel()


async def test_a_signed_answer_is_checked_by_the_worker_and_a_forged_one_refused(
    client, task_queue
):
    from runtime.signing_key import SigningKey
    from starter.handle import AgentHandle
    from starter.signed_question import question_as_sent
    from tests.workflow.test_signed_answers import FORGER, KEY, signed_worker
    from workflows.model import QuestionAnswer

    fake = asking(COLOR)
    async with signed_worker(client, task_queue, fake):
        handle = await start_run(client, task_queue, prompt(ask_user=True))
        await wait_for_phase(handle, "awaiting_answer")
        agent = AgentHandle(client, handle.id)
        blue = QuestionAnswer(call_id="call_1", answer="blue")

        async def sent(key: SigningKey, answer: QuestionAnswer = blue) -> dict[str, object]:
            signed = await question_as_sent(agent, answer, key=key, approver="alice")
            assert signed.signature is not None
            return signed.model_dump(mode="json")

        forged = await refused(handle, await sent(FORGER.key("alice")))
        assert "the answer for question 'call_1' is refused: its signature does not verify" in (
            forged
        )
        other = await sent(KEY)
        other["answer"] = "red"  # a signature copied to another answer
        assert "does not verify" in await refused(handle, other)
        assert of_type(await events(handle), "answer") == []
        await handle.execute_update(names.UPDATE_SUBMIT_ANSWER, await sent(KEY))
        result = await handle.result()
        evs = await events(handle)
    (answer,) = of_type(evs, "answer")
    assert (
        answer.approver == "alice" and answer.groups == ["dev", "ops"] and answer.answer == "blue"
    )
    tool = next(m for m in result.messages if m.role == "tool")
    assert json.loads(tool.content)["data"] == {"answer": "blue"}


async def test_a_question_and_a_call_waiting_together(client, task_queue):
    from workflows.metrics import waiting_here

    fake = FakeAgentActivities(
        replies=[
            calls(("call_1", ASK_USER, COLOR), ("call_2", "delete_path", '{"path": "logs"}')),
            text("done"),
        ]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, prompt(ask_user=True))
        st = await wait_for_phase(handle, "awaiting_answer")
        assert [c.id for c in st.pending_approvals] == ["call_2"]
        assert [q.call_id for q in st.pending_questions] == ["call_1"]
        assert waiting_here(client.namespace, task_queue) == 1  # a person is waited for
        await handle.execute_update(
            names.UPDATE_SUBMIT_ANSWER, {"call_id": "call_1", "answer": "red"}
        )
        st = await wait_for_phase(handle, "awaiting_approval")
        assert st.pending_questions == [] and [c.id for c in st.pending_approvals] == ["call_2"]
        await handle.execute_update(
            names.UPDATE_SUBMIT_APPROVAL, {"call_id": "call_2", "approved": True}
        )
        result = await handle.result()
        evs = await events(handle)
    assert fake.tools_run == ["call_2"]
    tools = [m.tool_call_id for m in result.messages if m.role == "tool"]
    assert tools == ["call_1", "call_2"]  # in call order
    (awaiting,) = of_type(evs, "awaiting_approval")
    assert [c.id for c in awaiting.pending] == ["call_2"]


async def test_an_unanswered_question_expires_and_is_asked_again_as_a_call_is(client, task_queue):
    fake = asking(COLOR)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(
            client, task_queue, prompt(ask_user=True, approval_timeout_seconds=2)
        )
        st = await wait_for_phase(handle, "approval_expired")  # expire: this release's default
        assert [q.call_id for q in st.pending_questions] == ["call_1"]
        (expired,) = of_type(await events(handle), "approval_expired")
        assert expired.call_ids == ["call_1"]
        assert "question 'call_1' has expired: ask again first" in await refused(
            handle, {"call_id": "call_1", "answer": "red"}
        )
        await handle.execute_update(
            names.UPDATE_REOPEN_APPROVAL, {"call_id": "call_1", "approver": "ann"}
        )
        assert (await status(handle)).phase == "awaiting_answer"
        await handle.execute_update(
            names.UPDATE_SUBMIT_ANSWER, {"call_id": "call_1", "answer": "red"}
        )
        result = await handle.result()
        evs = await events(handle)
    tool = next(m for m in result.messages if m.role == "tool")
    assert json.loads(tool.content)["data"] == {"answer": "red"}
    assert of_type(evs, "approval_reopened")[0].call_id == "call_1"
