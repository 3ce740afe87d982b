"""Record the workflow histories that `tests/test_replay.py` replays.

    python -m tests.record_histories            # all scenarios
    python -m tests.record_histories approve    # some of them

It starts its own Temporal dev server (the `temporal` binary of the virtual environment), runs
each scenario with AgentWorkflow and the fake activities of `tests/fakes.py`, and writes
`tests/histories/<release>/<scenario>.json` for the scenarios not recorded yet for this release.
Recordings are never rewritten: each release's histories stay as they are and must keep
replaying; an intended change to the workflow's commands goes behind `workflow.patched`, and new
behaviour adds new scenarios.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowHistory,
    WorkflowUpdateFailedError,
)
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.plugin import AgentPlugin, heartbeat_tuning
from runtime.connect import data_converter
from runtime.process import exit_now
from runtime.search_attributes import ensure_search_attributes
from runtime.signing_key import signed_answer
from starter import live
from tests.fakes import BigTools, FakeAgentActivities, calls, text
from tests.helpers import start_run, wait_for_phase, wait_until, worker_for
from tests.people import module_people
from workflows import names
from workflows.contract.arguments import arguments_digest
from workflows.contract.rules import ApprovalPolicy, PolicyRule, WorkerPolicy
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    AgentStatus,
    ChatMessage,
    ForkedFrom,
    LlmRequest,
    LlmResponse,
    StreamDelta,
    ToolApprovalResponse,
    ToolCall,
)

HISTORIES = Path(__file__).parent / "histories"
RELEASE = "1.0"
"""New recordings go to `histories/<RELEASE>/`. Recorded histories are never rewritten: runs
already in flight replay against them; an existing recording is kept, a new scenario adds a
file."""
FAST_HEARTBEATS: dict[str, Any] = dict(heartbeat_tuning())
RECORDING_PEOPLE = module_people({"ana": ["ops"], "ben": ["ops"], "olga": ["oncall"]})
"""The people whose keys sign the recordings' votes (the recording's worker verifies them with
their approvers file); replay never needs it (the history holds the worker's verdict)."""

Handle = WorkflowHandle[Any, Any]
Scenario = Callable[[Client, str], Awaitable[Handle]]


def _prompt(options: AgentRunOptions | None = None) -> AgentRunInput:
    return AgentRunInput.from_prompt("Please delete the logs folder", options)


async def approve(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(replies=[calls(("call_1", "delete_path", '{"path": "logs"}'))])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal("tool_approval", {"call_id": "call_1", "approved": True})
        await handle.result()
    return handle


async def reject(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "delete_path", '{"path": "logs"}')), text("ok, kept")]
    )
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal("tool_approval", {"call_id": "call_1", "approved": False})
        await handle.result()
    return handle


async def mixed(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(
        replies=[
            calls(
                ("a", "list_dir", '{"path": "."}'),
                ("b", "run_command", '{"command": "du -sh logs"}'),
                ("c", "delete_path", '{"path": "logs"}'),
            ),
            text("done"),
        ]
    )
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal("tool_approval", {"call_id": "c", "approved": False, "reason": "no"})
        await handle.execute_update("submit_approval", {"call_id": "b", "approved": True})
        await handle.result()
    return handle


async def cancel_waiting(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(replies=[calls(("call_1", "delete_path", "{}"))])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal("cancel", {"reason": "changed my mind"})
        await handle.result()
    return handle


async def cancel_with_approval(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(replies=[calls(("call_1", "run_command", "{}"))])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await wait_for_phase(handle, "awaiting_approval")
    # both signals land in one workflow task: no worker polls while they are sent
    await handle.signal("tool_approval", {"call_id": "call_1", "approved": True})
    await handle.signal("cancel")
    async with worker_for(client, queue, fake):
        await handle.result()
    return handle


async def max_rounds(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(replies=[calls((f"c{i}", "list_dir", "{}")) for i in range(5)])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt(AgentRunOptions(max_rounds=2)))
        await handle.result()
    return handle


async def seed_resume(client: Client, queue: str) -> Handle:
    assistant = ChatMessage.assistant(
        "",
        [
            ToolCall(id="s1", name="run_command", arguments='{"command": "ls"}'),
            ToolCall(id="s2", name="delete_path", arguments='{"path": "a"}'),
            ToolCall(id="s3", name="delete_path", arguments='{"path": "b"}'),
        ],
    )
    run_input = AgentRunInput(
        messages=[ChatMessage.user("do it"), assistant],
        options=AgentRunOptions(
            tool_approval_responses=[
                ToolApprovalResponse(call_id="s1", approved=True),
                ToolApprovalResponse(call_id="s2", approved=False, reason="keep a"),
                ToolApprovalResponse(call_id="unknown", approved=True),
            ]
        ),
    )
    fake = FakeAgentActivities(replies=[text("summary")])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, run_input)
        await handle.result()
    return handle


async def bad_inputs(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(replies=[calls(("call_1", "run_command", "{}")), text("done")])
    binary = RawValue(Payload(metadata={"encoding": b"binary/plain"}, data=b"\xff"))
    bad: list[tuple[str, list[Any]]] = [
        ("tool_approval", [{"call_id": "call_1", "approved": "yes"}]),
        ("tool_approval", [["call_1", True]]),
        ("tool_approval", [None]),
        ("tool_approval", [{"call_id": "call_1", "approved": True}, {"x": 1}]),
        ("tool_approval", [binary]),
        ("tool_approval", [{"call_id": "nope", "approved": True}]),
        ("cancel", [{"immediate": "yes"}]),
        ("send_message", [{"role": "tool", "content": "x"}]),
        ("send_message", [{"content": ""}]),
        ("no_such_signal", [1]),
    ]
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await wait_for_phase(handle, "awaiting_approval")
        for name, args in bad:
            await handle.signal(name, args=args)

        async def warned() -> bool:
            found = await handle.query("events", -1)
            return sum(1 for e in found if e["type"] == "warning") >= len(bad)

        await wait_until(warned)
        await handle.signal("tool_approval", {"call_id": "call_1", "approved": True})
        await handle.signal("tool_approval", {"call_id": "call_1", "approved": False})
        await handle.result()
    return handle


async def timeout_reject(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(replies=[calls(("call_1", "delete_path", "{}")), text("ok")])
    options = AgentRunOptions(approval_timeout_seconds=1, on_approval_timeout="reject")
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt(options))
        await handle.result()
    return handle


async def llm_error(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(replies=[ApplicationError("401 Unauthorized", non_retryable=True)])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await handle.result()
    return handle


async def cancel_immediate(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(replies=[text("too slow")], llm_delay=30)
    async with worker_for(client, queue, fake, **FAST_HEARTBEATS):
        handle = await start_run(client, queue, _prompt())
        await wait_until(lambda: fake.llm_requests)
        await handle.signal("cancel", {"immediate": True, "reason": "stop now"})
        await handle.result()
    return handle


async def timeout_cancel(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(replies=[calls(("call_1", "delete_path", "{}"))])
    options = AgentRunOptions(approval_timeout_seconds=1, on_approval_timeout="cancel")
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt(options))
        await handle.result()
    return handle


async def temporal_cancel(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(replies=[calls(("call_1", "delete_path", "{}"))])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await wait_for_phase(handle, "awaiting_approval")
        await handle.cancel()
        with contextlib.suppress(WorkflowFailureError):
            await handle.result()
    return handle


async def session(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(replies=[text("Hello."), text("Still here.")])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt(AgentRunOptions(keep_alive=True)))
        await wait_for_phase(handle, "waiting_for_message")
        await handle.signal("send_message", {"content": "are you there?"})
        await wait_until(lambda: len(fake.llm_requests) == 2)
        await wait_for_phase(handle, "waiting_for_message")
        await handle.signal("cancel")
        await handle.result()
    return handle


async def live_follower(client: Client, queue: str) -> Handle:
    """A run followed live: the stream's poll updates and a client-side publish of text."""
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "list_dir", "{}")), text("done")], llm_delay=0.5
    )
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        stream = WorkflowStreamClient.create(client, handle.id)
        stream.topic(names.STREAM_DELTAS, type=StreamDelta).publish(
            StreamDelta(round=0, call="recorded/1", attempt=1, index=0, text="Looking")
        )
        await stream.flush()
        await live.follow(client, handle.id, on_delta=lambda _r, _t: None, on_event=print)
        await handle.result()
    return handle


async def continue_as_new(client: Client, queue: str) -> Handle:
    """Several generations: each run of the chain is recorded (`continue_as_new.<n>.json`)."""
    replies = [calls((f"c{i}", "list_dir", "{}")) for i in range(16)] + [text("done")]
    fake = FakeAgentActivities(replies=replies)
    options = AgentRunOptions(max_rounds=20, max_history_events=100)
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt(options))
        await handle.result()
    return handle


async def reused_ids(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(
        replies=[
            calls(("call_0", "run_command", '{"command": "echo one"}')),
            calls(("call_0", "run_command", '{"command": "echo two"}')),
            text("both ran"),
        ]
    )
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal("tool_approval", {"call_id": "call_0", "approved": True})
        await wait_until(lambda: _pending_is(handle, "call_0#2"))
        await handle.signal("tool_approval", {"call_id": "call_0", "approved": True})  # stale
        await handle.signal("tool_approval", {"call_id": "call_0#2", "approved": True})
        await handle.result()
    return handle


async def _pending_is(handle: Handle, call_id: str) -> bool:
    status = await handle.query("status", result_type=AgentStatus)
    return [c.id for c in status.pending_approvals] == [call_id]


async def forged_publish(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "delete_path", '{"path": "logs"}')), text("deleted")]
    )
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await wait_for_phase(handle, "awaiting_approval")
        publish = "__temporal_workflow_stream_publish"
        await handle.signal(publish, {"items": [{"topic": "events", "data": "abc"}]})
        await handle.signal(publish, {"items": [{"topic": "deltas", "data": "abc"}]})
        await handle.signal(publish, {"items": 5})
        await handle.signal("tool_approval", {"call_id": "call_1", "approved": True})
        await handle.result()
    return handle


async def cut_off_reply(client: Client, queue: str) -> Handle:
    cut = calls(
        ("call_1", "list_dir", '{"path": "."}'), ("call_2", "run_command", '{"command": "rm')
    ).model_copy(update={"finish_reason": "length"})
    fake = FakeAgentActivities(replies=[cut, text("listed")])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await handle.result()
    return handle


async def too_many_calls(client: Client, queue: str) -> Handle:
    many = calls(*((f"c{i}", "list_dir", '{"path": "."}') for i in range(70)))
    fake = FakeAgentActivities(replies=[many, text("listed")])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await handle.result()
    return handle


async def policy_rules(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(
        replies=[
            calls(
                ("c1", "run_command", '{"command": "git status"}'),
                ("c2", "delete_path", '{"path": "logs"}'),
                ("c3", "list_dir", '{"path": "."}'),
            ),
            text("done"),
        ],
        worker_rules=WorkerPolicy(defaults=[PolicyRule(tool="list_dir", decision="ask")]),
    )
    rules = ApprovalPolicy(
        rules=[
            PolicyRule(tool="run_command", when={"command": "git *"}, decision="allow"),
            PolicyRule(tool="delete_path", decision="deny", reason="not here"),
        ]
    )
    async with worker_for(client, queue, fake):
        handle = await start_run(
            client, queue, AgentRunInput.from_prompt("go", AgentRunOptions(approval_policy=rules))
        )
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal("tool_approval", {"call_id": "c3", "approved": True})
        await handle.result()
    return handle


async def policy_remember_edit(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(
        replies=[
            calls(
                ("c1", "run_command", '{"command": "echo 1"}'),
                ("c2", "run_command", '{"command": "echo 2"}'),
            ),
            calls(("c3", "delete_path", '{"path": "logs"}')),
            text("done"),
        ]
    )
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await wait_for_phase(handle, "awaiting_approval")
        await handle.execute_update(
            "submit_approval",
            {"call_id": "c1", "approved": True, "remember": True, "arguments": {"command": "ls"}},
        )
        await wait_until(lambda: _pending_is(handle, "c3"))
        await handle.execute_update(
            "set_approval_policy", {"rules": [{"tool": "delete_path", "decision": "allow"}]}
        )
        await handle.result()
    return handle


# ---- this release: the one gate, small models' habits, the context window, notifications


async def seed_denied(client: Client, queue: str) -> Handle:
    """A run's input ends in a call and an answer approving it; the worker's enforced rule
    decides first."""
    deny = WorkerPolicy(enforced=[PolicyRule(tool="run_command", decision="deny", reason="no")])
    fake = FakeAgentActivities(replies=[text("ok")], worker_rules=deny)
    call = ToolCall(id="c1", name="run_command", arguments='{"command": "id"}')
    run_input = AgentRunInput(
        messages=[ChatMessage.user("go"), ChatMessage.assistant("", [call])],
        options=AgentRunOptions(
            tool_approval_responses=[ToolApprovalResponse(call_id="c1", approved=True)]
        ),
    )
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, run_input)
        await handle.result()
    return handle


async def edit_denied(client: Client, queue: str) -> Handle:
    """An answer edits the call into one the enforced rules deny, then a changed-call answer is
    refused, then the rules decide."""
    rules = WorkerPolicy(
        enforced=[PolicyRule(tool="run_command", when={"command": "rm *"}, decision="deny")]
    )
    fake = FakeAgentActivities(
        replies=[
            calls(("c1", "run_command", '{"command": "ls -la"}')),
            calls(("c2", "run_command", '{"command": "ls"}')),
            text("done"),
        ],
        worker_rules=rules,
    )
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await wait_for_phase(handle, "awaiting_approval")
        await handle.execute_update(
            "submit_approval",
            {"call_id": "c1", "approved": True, "arguments": {"command": "rm -rf x"}},
        )
        await wait_until(lambda: _pending_is(handle, "c2"))
        with contextlib.suppress(Exception):
            await handle.execute_update(
                "submit_approval", {"call_id": "c2", "approved": True, "run_id": "other"}
            )
        await handle.signal("tool_approval", {"call_id": "c2", "approved": True})
        await handle.result()
    return handle


async def repeats(client: Client, queue: str) -> Handle:
    """The same call five times: the last two are answered without running."""
    same = [calls((f"c{i}", "list_dir", '{"path": "."}')) for i in range(5)]
    fake = FakeAgentActivities(replies=[*same, text("done")])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await handle.result()
    return handle


async def text_call(client: Client, queue: str) -> Handle:
    """A reply whose call the worker read from its text; warnings from the worker."""
    reply = calls(("call_text_0", "list_dir", '{"path": "."}')).model_copy(
        update={"calls_from_text": True, "warnings": ["a call was written as text"]}
    )
    fake = FakeAgentActivities(replies=[reply, text("done")])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await handle.result()
    return handle


async def compaction(client: Client, queue: str) -> Handle:
    """A small window: old results dropped, old turns summarised, results cut; then a provider
    that says the request is too long."""
    reads = [calls((f"c{i}", "read_file", f'{{"path": "f{i}"}}')) for i in range(6)]
    too_long = ApplicationError(
        "LLM provider answered HTTP 400: too long",
        {"context_tokens": 3_000, "request_tokens": 5_000},
        type="LlmContextExceeded",
        non_retryable=True,
    )
    fake = BigTools(replies=[*reads, too_long, text("done")], context_tokens=6_000)
    fake.size = 3_000
    fake.client = client
    async with worker_for(client, queue, fake):
        handle = await start_run(
            client, queue, AgentRunInput.from_prompt("read", AgentRunOptions(keep_rounds=1))
        )
        await handle.result()
    return handle


async def notifications(client: Client, queue: str) -> Handle:
    """With notifications: a waiting call, its reminder at half the timeout, the run's end
    through the child workflow."""
    fake = FakeAgentActivities(
        replies=[calls(("c1", "delete_path", '{"path": "logs"}')), text("done")], notifies=True
    )
    options = AgentRunOptions(approval_timeout_seconds=4, on_approval_timeout="reject")
    async with worker_for(client, queue, fake):
        # The child's id is made of the run's: the replay test replays under `replay-<name>`.
        handle = await start_run(client, queue, _prompt(options), "replay-notifications")
        await handle.result()
    return handle


async def bad_turn(client: Client, queue: str) -> Handle:
    """A session whose first turn loops to its round limit: the turn ends with a warning, the
    session answers the next message."""
    loop = [calls((f"c{i}", "list_dir", f'{{"path": "d{i}"}}')) for i in range(2)]
    fake = FakeAgentActivities(replies=[*loop, text("Here it is.")])
    options = AgentRunOptions(keep_alive=True, max_rounds=2)
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt(options))
        await wait_for_phase(handle, "waiting_for_message")
        await handle.signal("send_message", {"content": "just answer, please"})
        await wait_until(lambda: len(fake.llm_requests) == 3)
        await wait_for_phase(handle, "waiting_for_message")
        await handle.signal("cancel")
        await handle.result()
    return handle


async def rejected_again(client: Client, queue: str) -> Handle:
    """A person rejects a call; the model asks for it twice more in the turn: nobody is asked
    again."""
    same = [calls((f"c{i}", "delete_path", '{"path": "logs"}')) for i in range(3)]
    fake = FakeAgentActivities(replies=[*same, text("kept")])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt())
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal(
            "tool_approval", {"call_id": "c0", "approved": False, "reason": "keep them"}
        )
        await handle.result()
    return handle


async def empty_reply(client: Client, queue: str) -> Handle:
    """An empty reply is asked again once with a nudge; two in a row end the turn."""
    fake = FakeAgentActivities(replies=[text(""), text("Done."), text(""), text("")])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt(AgentRunOptions(keep_alive=True)))
        await wait_for_phase(handle, "waiting_for_message")
        await handle.signal("send_message", {"content": "and now?"})
        await wait_until(lambda: len(fake.llm_requests) == 4)
        await wait_for_phase(handle, "waiting_for_message")
        await handle.signal("cancel")
        await handle.result()
    return handle


async def refused_rule(client: Client, queue: str) -> Handle:
    """A run rule that names none of the worker's tools: the run says why (an `error` and a
    `finished` event) and fails."""
    fake = FakeAgentActivities(replies=[text("never asked")])
    rules = ApprovalPolicy(rules=[PolicyRule(tool="run_comand", decision="allow")])
    options = AgentRunOptions(approval_policy=rules)
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, AgentRunInput.from_prompt("go", options))
        with contextlib.suppress(WorkflowFailureError):
            await handle.result()
    return handle


def _signed_vote(
    handle: Handle, run_id: str, who: str, call_id: str, arguments: str, group: str = "ops"
) -> dict[str, Any]:
    """A vote signed with `who`'s own key (the recording keeps only the worker's verdict; their
    groups are RECORDING_PEOPLE's, `group` is only what the vote claims)."""
    response = ToolApprovalResponse(call_id=call_id, approved=True, groups=[group])
    answer = signed_answer(
        RECORDING_PEOPLE.key(who), response, approver=who, workflow_id=handle.id, run_id=run_id,
        arguments_sha256=arguments_digest(arguments),
    )  # fmt: skip
    return answer.model_dump(mode="json")


async def quorum(client: Client, queue: str) -> Handle:
    arguments = '{"path": "logs"}'
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "delete_path", arguments)), text("deleted")]
    )
    rule = {"tool": "delete_path", "decision": "ask", "approvers": {"groups": ["ops"], "count": 2}}
    run_input = _prompt(
        AgentRunOptions(approval_policy=ApprovalPolicy.model_validate({"rules": [rule]}))
    )
    plugin = AgentPlugin(activities=[*fake.activities(), RECORDING_PEOPLE.verifier().verify_answer])
    async with Worker(client, task_queue=queue, plugins=[plugin]):
        handle = await start_run(client, queue, run_input)
        st = await wait_for_phase(handle, "awaiting_approval")
        assert st.run_id is not None
        # unsigned: refused with the reason
        with contextlib.suppress(WorkflowUpdateFailedError):
            await handle.execute_update("submit_approval", {"call_id": "call_1", "approved": True})
        await handle.execute_update(
            "submit_approval", _signed_vote(handle, st.run_id, "ana", "call_1", arguments)
        )
        await handle.execute_update(
            "submit_approval", _signed_vote(handle, st.run_id, "ben", "call_1", arguments)
        )
        await handle.result()
    return handle


async def question(client: Client, queue: str) -> Handle:
    asked = '{"question": "Which folder?", "options": ["logs", "tmp"]}'
    fake = FakeAgentActivities(replies=[calls(("call_1", "ask_user", asked)), text("tmp it is")])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt(AgentRunOptions(ask_user=True)))
        st = await wait_for_phase(handle, "awaiting_answer")
        with contextlib.suppress(WorkflowUpdateFailedError):
            await handle.execute_update("submit_answer", {"call_id": "call_1", "answer": "var"})
        await handle.execute_update(
            "submit_answer",
            {"call_id": "call_1", "answer": "tmp", "approver": "ann", "run_id": st.run_id},
        )
        await handle.result()
    return handle


async def budget(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "list_dir", '{"path": "."}')), text("done")]
    )
    options = AgentRunOptions(max_run_tokens=10)  # the first reply reports 15 tokens
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, AgentRunInput.from_prompt("list", options))
        await wait_for_phase(handle, "budget_exhausted")
        await handle.execute_update("grant_budget", {"tokens": 100, "approver": "ann"})
        await handle.result()
    return handle


async def budget_stop(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "list_dir", '{"path": "."}')), text("done")]
    )
    options = AgentRunOptions(max_run_tokens=10)
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, AgentRunInput.from_prompt("list", options))
        await wait_for_phase(handle, "budget_exhausted")
        await handle.execute_update("grant_budget", {"stop": True, "approver": "ann"})
        await handle.result()
    return handle


async def expire_reask(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(replies=[calls(("call_1", "delete_path", "{}")), text("ok")])
    options = AgentRunOptions(approval_timeout_seconds=2)  # expires: this release's default
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt(options))
        await wait_for_phase(handle, "approval_expired")
        await handle.execute_update("reopen_approval", {"call_id": "call_1"})
        await handle.signal("tool_approval", {"call_id": "call_1", "approved": True})
        await handle.result()
    return handle


async def escalation(client: Client, queue: str) -> Handle:
    fake = FakeAgentActivities(replies=[calls(("call_1", "delete_path", "{}")), text("ok")])
    options = AgentRunOptions(approval_escalate_after_seconds=1, approval_escalate_to=["oncall"])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _prompt(options))

        async def escalated() -> bool:
            found = await handle.query("events", -1)
            return any(e["type"] == "approval_escalated" for e in found)

        await wait_until(escalated)
        await handle.signal("tool_approval", {"call_id": "call_1", "approved": True})
        await handle.result()
    return handle


async def escalation_enforced(client: Client, queue: str) -> Handle:
    """The worker's enforced rule leaves the call to `ops`; escalated to `oncall`, whose signed
    vote is refused (0.6: the escalation does not widen the worker's rule); `ops` approves."""
    arguments = '{"path": "logs"}'
    fake = FakeAgentActivities(
        replies=[calls(("call_1", "delete_path", arguments)), text("deleted")]
    )
    rule = {"tool": "delete_path", "decision": "ask", "approvers": {"groups": ["ops"]}}
    fake.worker_rules = WorkerPolicy.model_validate({"enforced": [rule]})
    options = AgentRunOptions(approval_escalate_after_seconds=1, approval_escalate_to=["oncall"])
    plugin = AgentPlugin(activities=[*fake.activities(), RECORDING_PEOPLE.verifier().verify_answer])
    async with Worker(client, task_queue=queue, plugins=[plugin]):
        handle = await start_run(client, queue, _prompt(options))
        st = await wait_for_phase(handle, "awaiting_approval")
        assert st.run_id is not None

        async def escalated() -> bool:
            found = await handle.query("events", -1)
            return any(e["type"] == "approval_escalated" for e in found)

        await wait_until(escalated)
        with contextlib.suppress(WorkflowUpdateFailedError):
            await handle.execute_update(
                "submit_approval",
                _signed_vote(handle, st.run_id, "olga", "call_1", arguments, group="oncall"),
            )
        await handle.execute_update(
            "submit_approval", _signed_vote(handle, st.run_id, "ana", "call_1", arguments)
        )
        await handle.result()
    return handle


async def forked(client: Client, queue: str) -> Handle:
    """A fork (`starter fork`): the original's record up to a reply whose call has no result,
    its provenance in the options; the call waits for a person again and is approved."""
    listing = ToolCall(id="call_1", name="list_dir", arguments='{"path": "."}')
    deleting = ToolCall(id="call_2", name="delete_path", arguments='{"path": "logs"}')
    run_input = AgentRunInput(
        messages=[
            ChatMessage.user("Please delete the logs folder"),
            ChatMessage.assistant("", [listing]),
            ChatMessage.tool(listing, "logs"),
            ChatMessage.assistant("", [deleting]),
        ],
        options=AgentRunOptions(
            forked_from=ForkedFrom(workflow_id="original", run_id="first-run", round=1)
        ),
    )
    fake = FakeAgentActivities(replies=[text("deleted")])
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, run_input)
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal("tool_approval", {"call_id": "call_2", "approved": True})
        await handle.result()
    return handle


def _per_run(parent: list[LlmResponse], **children: list[LlmResponse]) -> FakeAgentActivities:
    """The model's replies scripted per run: the parent's, and each sub-agent's by the id of the
    `delegate` call that started it (the last part of its workflow id)."""
    scripts: dict[str, list[LlmResponse]] = {"": parent, **children}
    asked: dict[str, int] = {}

    def reply(request: LlmRequest) -> LlmResponse:
        key = request.workflow_id.rsplit(".", 1)[1] if "." in request.workflow_id else ""
        index = asked[key] = asked.get(key, -1) + 1
        script = scripts.get(key, [])
        return script[index] if index < len(script) else text("(nothing more)")

    return FakeAgentActivities(replies=[reply] * 50)


def _delegate(call_id: str, task: str, **more: Any) -> tuple[str, str, str]:
    return (call_id, "delegate", json.dumps({"task": task, **more}))


def _delegating(prompt: str) -> AgentRunInput:
    return AgentRunInput.from_prompt(prompt, AgentRunOptions(sub_agents=True))


async def _sub_agent(client: Client, parent: Handle, call_id: str) -> Handle:
    """The handle of the parent's sub-agent for `call_id`, once Temporal has it."""
    handle = client.get_workflow_handle(f"{parent.id}.{call_id}")

    async def started() -> bool:
        with contextlib.suppress(RPCError):
            await handle.describe()
            return True
        return False

    await wait_until(started)
    return handle


async def delegation(client: Client, queue: str) -> Handle:
    """Two sub-agents of one reply at once: one answers, one ends at its round limit (a failed
    call); the parent reads both and answers. Its sub-agents are recorded too."""
    fake = _per_run(
        [calls(_delegate("a", "list"), _delegate("b", "read", max_rounds=1)), text("both read")],
        a=[calls(("x", "list_dir", '{"path": "."}')), text("it holds logs")],
        b=[calls(("y", "read_file", '{"path": "notes.txt"}')), text("never reached")],
    )
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _delegating("look around"))
        await handle.result()
    return handle


async def sub_agent_approval(client: Client, queue: str) -> Handle:
    """A sub-agent's delete waits for a person (the parent shows it), who answers it on the
    sub-agent; the parent takes its answer and keeps its decision in its audit."""
    fake = _per_run(
        [calls(_delegate("call_1", "Delete the logs folder")), text("Done.")],
        call_1=[calls(("c1", "delete_path", '{"path": "logs"}')), text("Deleted.")],
    )
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _delegating("Please delete the logs folder"))
        child = await _sub_agent(client, handle, "call_1")
        await wait_for_phase(child, "awaiting_approval")

        async def parent_shows_it() -> bool:
            now = await handle.query("status", result_type=AgentStatus)
            return bool(now.sub_agents and now.sub_agents[0].pending_approvals)

        await wait_until(parent_shows_it)
        await child.execute_update(
            "submit_approval", {"call_id": "c1", "approved": True, "approver": "ann"}
        )
        await handle.result()
    return handle


async def sub_agent_cancel(client: Client, queue: str) -> Handle:
    """Two sub-agents wait for people; the parent is cancelled with a reason, and each of them
    ends cancelled with it."""
    fake = _per_run(
        [calls(_delegate("a", "Delete logs"), _delegate("b", "Delete tmp"))],
        a=[calls(("c1", "delete_path", '{"path": "logs"}'))],
        b=[calls(("c1", "delete_path", '{"path": "tmp"}'))],
    )
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, _delegating("Please clean up"))
        children = [await _sub_agent(client, handle, c) for c in ("a", "b")]
        for child in children:
            await wait_for_phase(child, "awaiting_approval")
        await handle.signal("cancel", {"reason": "wrong folder", "requested_by": "ann"})
        await handle.result()
        for child in children:
            await child.result()
    return handle


SCENARIOS: dict[str, Scenario] = {
    "approve": approve,
    "reject": reject,
    "mixed": mixed,
    "cancel_waiting": cancel_waiting,
    "cancel_with_approval": cancel_with_approval,
    "max_rounds": max_rounds,
    "seed_resume": seed_resume,
    "bad_inputs": bad_inputs,
    "timeout_reject": timeout_reject,
    "llm_error": llm_error,
    "cancel_immediate": cancel_immediate,
    "timeout_cancel": timeout_cancel,
    "temporal_cancel": temporal_cancel,
    "session": session,
    "live_follower": live_follower,
    "continue_as_new": continue_as_new,
    "reused_ids": reused_ids,
    "forged_publish": forged_publish,
    "cut_off_reply": cut_off_reply,
    "too_many_calls": too_many_calls,
    "policy_rules": policy_rules,
    "policy_remember_edit": policy_remember_edit,
    "seed_denied": seed_denied,
    "edit_denied": edit_denied,
    "repeats": repeats,
    "text_call": text_call,
    "compaction": compaction,
    "notifications": notifications,
    "bad_turn": bad_turn,
    "rejected_again": rejected_again,
    "empty_reply": empty_reply,
    "refused_rule": refused_rule,
    "quorum": quorum,
    "question": question,
    "budget": budget,
    "budget_stop": budget_stop,
    "expire_reask": expire_reask,
    "escalation": escalation,
    "escalation_enforced": escalation_enforced,
    "forked": forked,
    "delegation": delegation,
    "sub_agent_approval": sub_agent_approval,
    "sub_agent_cancel": sub_agent_cancel,
}


async def record(selected: list[str]) -> None:
    temporal = Path(sys.executable).parent / "temporal"
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal),
        # Never with a key: the recorded histories must replay anywhere, without one.
        data_converter=data_converter({}),
        dev_server_extra_args=["--log-level", "error"],
    )
    try:
        await ensure_search_attributes(env.client)
        folder = HISTORIES / RELEASE
        folder.mkdir(parents=True, exist_ok=True)
        for name in selected:
            if any(folder.glob(f"{name}.json")) or any(folder.glob(f"{name}.*.json")):
                print(f"{folder / name}: already recorded for {RELEASE}; kept as it is")
                continue
            handle = await SCENARIOS[name](env.client, f"record-{name}-{uuid.uuid4()}")
            runs = [w.run_id async for w in env.client.list_workflows(f'WorkflowId="{handle.id}"')]
            for generation, run_id in enumerate(reversed(runs)):
                history = await env.client.get_workflow_handle(
                    handle.id, run_id=run_id
                ).fetch_history()
                suffix = f".{generation}" if len(runs) > 1 else ""
                path = folder / f"{name}{suffix}.json"
                path.write_text(history.to_json())
                print(f"{path}: {len(history.events)} events")
            for sub_agent, history in await sub_agent_histories(env.client, handle.id):
                path = folder / f"{name}.sub-agent.{sub_agent}.json"
                path.write_text(history.to_json())
                print(f"{path}: {len(history.events)} events")
    finally:
        await env.shutdown()


async def sub_agent_histories(
    client: Client, workflow_id: str
) -> list[tuple[str, WorkflowHistory]]:
    """The histories of the run's sub-agents (and theirs), each named by its id after the
    parent's (`call_1`, `call_1.call_2`): a sub-agent is a run of its own, replayed alone."""
    query = f'RootWorkflowId="{workflow_id}" AND ParentWorkflowId IS NOT NULL'
    query += f' AND WorkflowType="{names.WORKFLOW_TYPE}"'
    found = []
    async for execution in client.list_workflows(query):
        history = await client.get_workflow_handle(
            execution.id, run_id=execution.run_id
        ).fetch_history()
        found.append((execution.id.removeprefix(f"{workflow_id}."), history))
    return sorted(found, key=lambda pair: pair[0])


def main() -> None:
    selected = sys.argv[1:] or list(SCENARIOS)
    unknown = [name for name in selected if name not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    asyncio.run(record(selected))


if __name__ == "__main__":
    main()
    exit_now(0)
