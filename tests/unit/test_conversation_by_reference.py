"""`call_llm` without a query: the real activities (the scripted model, the real `list_dir`)
called as a worker calls them, for a run whose side — the conversation's owner, the request's
digest and tail, the `conversation_tail` query — is the workflow's own pure code. A worker that
returned the results the tail names rebuilds the conversation; a missing result or a digest
that differs costs a query, and the model still gets exactly the run's conversation."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.agent_activities import AgentActivities
from activities.tools import build_default_registry
from runtime.settings import Settings
from workflows import names
from workflows.conversation.record import Conversation
from workflows.conversation.tail import ConversationTails
from workflows.model import (
    AgentRunOptions,
    AgentState,
    ChatMessage,
    LlmRequest,
    LlmResponse,
    ToolRequest,
)

INFO = ActivityEnvironment.default_info()
RUN = (INFO.workflow_id or "", INFO.workflow_run_id or "")


class Run:
    """The run as `call_llm` sees it: its conversation, its queries answered as the workflow
    answers them (`ConversationTails`, shared with the request's digest), counted."""

    def __init__(self, prompt: str) -> None:
        state = AgentState(messages=[ChatMessage.user(prompt)], options=AgentRunOptions())
        self.conversation = Conversation(state)
        self.tails = ConversationTails()
        self.queries = 0
        self.round = 0

    @property
    def messages(self) -> list[ChatMessage]:
        return self.conversation.messages

    def get_workflow_handle(self, workflow_id: str, **_: Any) -> Run:
        return self

    async def query(self, name: str, *args: Any, **_: Any) -> Any:
        self.queries += 1
        if name == names.QUERY_CONVERSATION_TAIL:
            return self.tails.answer(args[0], self.messages).model_copy(deep=True)
        return [m.model_copy() for m in self.messages]

    def request(self) -> LlmRequest:
        """The next model request, as `ModelCall` builds it under `conversation_by_reference`."""
        self.round += 1
        count = len(self.messages)
        return LlmRequest(
            workflow_id=RUN[0],
            run_id=RUN[1],
            message_count=count,
            round=self.round,
            tools=["list_dir"],
            digest=self.tails.digest(self.messages),
            tail=self.conversation.sources.sent(count),
        )

    def take(self, response: LlmResponse) -> None:
        reply = self.conversation.reply(
            response.message.content, response.message.tool_calls or [], self.round
        )
        self.conversation.append_reply(reply, self.round)


class Seen(AgentActivities):
    """The real activities, keeping every conversation the model was sent."""

    sent: list[list[ChatMessage]]

    async def _conversation(self, request: LlmRequest) -> list[ChatMessage]:
        got = await super()._conversation(request)
        self.sent.append(got)
        return got


def activities(run: Run, tmp_path: Path) -> Seen:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "notes.txt").write_text("remember the milk\n")
    settings = Settings(
        llm_base_url=None,
        llm_api_key=None,
        llm_model="scripted",
        workspace=workspace,
        state_dir=tmp_path / "state",
        stream_deltas=False,
    )
    acts = Seen(cast(Client, run), settings, build_default_registry(workspace))
    acts.sent = []
    return acts


async def model_round(run: Run, acts: Seen) -> None:
    """One round as the workflow runs it: the model call, then its calls' tools."""
    env = ActivityEnvironment()
    response: LlmResponse = await env.run(acts.call_llm, run.request())
    run.take(response)
    calls = run.messages[-1].tool_calls or []
    contents: list[str] = []
    for call in calls:
        request = ToolRequest(
            workflow_id=RUN[0], call_id=call.id, name=call.name, arguments=call.arguments
        )
        contents.append(await env.run(acts.execute_tool, request))
    run.conversation.append_results(calls, contents, executed={c.id for c in calls})


async def test_a_worker_that_made_the_results_needs_no_query_after_the_first_call(tmp_path):
    run = Run("list the workspace")
    acts = activities(run, tmp_path)
    await model_round(run, acts)  # the scripted model lists the workspace
    assert run.messages[-1].role == "tool" and "notes.txt" in run.messages[-1].content
    assert run.queries == 1  # the first call of the run reads it
    await model_round(run, acts)  # its reply and the tool's result: by reference
    run.conversation.append(ChatMessage.user("thanks"))  # a person's message: inline
    await model_round(run, acts)
    assert run.queries == 1
    assert acts._conversations.unqueried == 2
    assert [len(s) for s in acts.sent] == [1, 3, 5]
    assert acts.sent[-1] == run.messages[:5]  # exactly the run's conversation
    for sent in acts.sent:
        assert sent == run.messages[: len(sent)]


async def test_a_missing_result_or_a_digest_that_differs_costs_a_query(tmp_path):
    run = Run("list the workspace")
    acts = activities(run, tmp_path)
    await model_round(run, acts)
    # The result the run took is not the one this worker returned (another worker's attempt):
    # the rebuilt conversation's digest is not the request's.
    tool = run.messages[-1]
    acts._conversations.result(RUN, tool.tool_call_id or "", "another attempt's listing")
    await model_round(run, acts)
    assert (run.queries, acts._conversations.unqueried) == (2, 0)
    assert acts.sent[-1] == run.messages[:3]
    # The model's reply was never returned here (the results are forgotten: a restart).
    run.conversation.append(ChatMessage.user("and again"))
    acts._conversations.take(RUN)
    await model_round(run, acts)
    assert (run.queries, acts._conversations.unqueried) == (3, 0)
    assert acts._conversations.reused == 2  # the query read only what followed the prefix held
    assert acts.sent[-1] == run.messages[:5]
    # Nothing held for the run (another worker process): a query, never a guess.
    run.conversation.append(ChatMessage.user("once more"))
    acts._conversations.drop((*RUN, False))
    await model_round(run, acts)
    assert (run.queries, acts._conversations.unqueried) == (4, 0)
    assert acts.sent[-1] == run.messages[:7]
    # Then by reference again.
    run.conversation.append(ChatMessage.user("last"))
    await model_round(run, acts)
    assert (run.queries, acts._conversations.unqueried) == (4, 1)
    assert acts.sent[-1] == run.messages[:9]


async def test_a_request_of_an_earlier_release_always_reads_the_conversation(tmp_path):
    run = Run("list the workspace")
    acts = activities(run, tmp_path)
    env = ActivityEnvironment()
    for round_ in (1, 2):
        request = LlmRequest(
            workflow_id=RUN[0],
            run_id=RUN[1],
            message_count=len(run.messages),
            round=round_,
            tools=["list_dir"],
        )
        assert "digest" not in request.model_dump_json()  # the old request's JSON
        assert "tail" not in request.model_dump_json()
        response: LlmResponse = await env.run(acts.call_llm, request)
        run.round = round_
        run.take(response)
    assert (run.queries, acts._conversations.unqueried) == (2, 0)


async def test_a_rebuilt_conversation_past_the_cache_bound_still_reaches_the_model(tmp_path):
    """The cache may hold the previous conversation but not the grown one (past its byte bound):
    the model still gets the conversation it rebuilt, not the empty one the cache keeps."""
    run = Run("list the workspace")
    acts = activities(run, tmp_path)
    await model_round(run, acts)
    held = acts._conversations.get((*RUN, False))
    assert len(held.messages) == 1
    acts._conversations._max_bytes = held.size + 1  # the next conversation will not fit
    await model_round(run, acts)
    assert (run.queries, acts._conversations.unqueried) == (1, 1)
    assert acts.sent[-1] == run.messages[:3]
    assert len(acts._conversations) == 0  # the grown conversation was not kept
