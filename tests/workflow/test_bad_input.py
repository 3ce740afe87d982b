"""Bad input never fails or wedges a run: each bad signal becomes exactly one `warning`
event, changes nothing else, and the run then finishes normally."""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import (
    event_types,
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
from workflows.conversation.record import invariant_violations
from workflows.model import AgentRunInput, AgentRunOptions

BINARY = RawValue(Payload(metadata={"encoding": b"binary/plain"}, data=b"\xff"))
UNKNOWN_ENCODING = RawValue(Payload(metadata={"encoding": b"x-made-up"}, data=b"\x00"))
BROKEN_JSON = RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b"{not json"))

# (signal name, args, a fragment the warning must contain)
BAD_SIGNALS: list[tuple[str, list[object], str]] = [
    ("tool_approval", [{"call_id": "c1", "approved": "yes"}], "approved"),
    ("tool_approval", [{"call_id": "c1", "approved": 1}], "approved"),
    ("tool_approval", [{"call_id": "c1", "approved": "true"}], "approved"),
    ("tool_approval", [{"call_id": "c1", "approved": None}], "approved"),
    ("tool_approval", [{"call_id": "c1"}], "approved"),
    ("tool_approval", [{"approved": True}], "call_id"),
    ("tool_approval", [{"call_id": "", "approved": True}], "call_id"),
    ("tool_approval", [{"call_id": "c1", "approved": True, "extra": 1}], "extra"),
    ("tool_approval", [{"call_id": 7, "approved": True}], "call_id"),
    ("tool_approval", [["c1", True]], "JSON object, got list"),
    ("tool_approval", [None], "JSON object, got NoneType"),
    ("tool_approval", ["c1"], "JSON object, got str"),
    ("tool_approval", [], "no payload"),
    ("tool_approval", [{"call_id": "c1", "approved": True}, {"x": 1}], "expected one payload"),
    ("tool_approval", [BINARY], "JSON object, got bytes"),
    ("tool_approval", [UNKNOWN_ENCODING], "could not be decoded"),
    ("tool_approval", [BROKEN_JSON], "could not be decoded"),
    ("tool_approval", [{"call_id": "nope", "approved": True}], "unknown call id 'nope'"),
    ("cancel", [{"immediate": "yes"}], "immediate"),
    ("cancel", ["now"], "JSON object"),
    ("cancel", [BINARY], "JSON object, got bytes"),
    ("cancel", [UNKNOWN_ENCODING], "could not be decoded"),
    ("send_message", [{"role": "tool", "content": "x", "tool_call_id": "c1"}], "role 'tool'"),
    ("send_message", [{"content": ""}], "empty"),
    ("send_message", [{"content": "  "}], "empty"),
    ("send_message", ["just a string"], "JSON object"),
    ("send_message", [None], "JSON object"),
    ("send_message", [BINARY], "JSON object, got bytes"),
    ("send_message", [UNKNOWN_ENCODING], "could not be decoded"),
    ("no_such_signal", [{"a": 1}], "unknown signal 'no_such_signal'"),
]


async def test_bad_signals_warn_and_change_nothing(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("c1", "run_command", '{"command": "ls"}')), text("done")], client=client
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        before_status = await wait_for_phase(handle, "awaiting_approval")
        before_messages = await messages(handle)
        before_events = await events(handle)
        for name, args, _ in BAD_SIGNALS:
            await handle.signal(name, args=args)
        warnings = await wait_until(
            lambda: _warnings_after(handle, before_events[-1].seq, len(BAD_SIGNALS))
        )
        # nothing but the warnings was added, and the state is unchanged
        assert await status(handle) == before_status
        assert await messages(handle) == before_messages
        assert fake.tools_run == [] and len(fake.llm_requests) == 1
        await handle.signal("tool_approval", {"call_id": "c1", "approved": True})
        result = await handle.result()
        after = await events(handle)
    for (name, _, needle), warning in zip(BAD_SIGNALS, warnings, strict=True):
        assert warning.type == "warning"
        assert needle in warning.message, (name, needle, warning.message)
        assert len(warning.message) < 1000
    assert result.finish_reason == "stop"
    assert fake.tools_run == ["c1"]
    assert invariant_violations(result.messages, allow_open_tail=False) == []
    # the bad cancels did not cancel, the bad messages were not appended
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "assistant"]
    assert after[-1].type == "finished" and after[-1].finish_reason == "stop"


async def _warnings_after(handle: Any, seq: int, count: int) -> list[Any] | None:
    new = await events(handle, seq)
    return new if len(new) >= count else None


async def test_first_answer_wins(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("c1", "run_command", "{}"), ("c2", "delete_path", "{}")), text("done")]
    )
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal("tool_approval", {"call_id": "c1", "approved": False, "reason": "r1"})
        await handle.signal("tool_approval", {"call_id": "c1", "approved": True})
        st = await status(handle)
        assert [c.id for c in st.pending_approvals] == ["c2"]
        await handle.signal("tool_approval", {"call_id": "c2", "approved": True})
        result = await handle.result()
        evs = await events(handle)
    assert fake.tools_run == ["c2"]
    assert tool_messages(result.messages)[0].content == "Rejected: r1"
    (warning,) = of_type(evs, "warning")
    assert "already answered" in warning.message and "c1" in warning.message
    assert [(e.call_id, e.approved) for e in of_type(evs, "approval")] == [
        ("c1", False),
        ("c2", True),
    ]


async def test_stale_answer_after_the_batch_ran_never_reexecutes(client, task_queue):
    fake = FakeAgentActivities(
        replies=[calls(("c1", "run_command", "{}")), text("first done")],
    )
    options = AgentRunOptions(keep_alive=True)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x", options))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal("tool_approval", {"call_id": "c1", "approved": True})
        await wait_for_phase(handle, "waiting_for_message")
        # a stale (or repeated) answer for the executed call, while nothing is pending
        await handle.signal("tool_approval", {"call_id": "c1", "approved": True})
        await handle.signal("tool_approval", {"call_id": "other", "approved": False})
        evs = await wait_until(lambda: _warnings_after(handle, -1, 0))
        warnings = await wait_until(lambda: _n_warnings(handle, 2))
        # The executed call is known to be answered; the other id is simply unknown.
        assert "call 'c1' was already answered" in warnings[0].message, warnings
        assert "no call is waiting" in warnings[1].message, warnings
        assert (await status(handle)).phase == "waiting_for_message"
        await handle.signal("cancel")
        result = await handle.result()
    assert evs
    assert fake.tools_run == ["c1"]
    assert result.finish_reason == "cancelled"
    assert len(tool_messages(result.messages)) == 1


async def _n_warnings(handle: Any, n: int) -> list[Any] | None:
    found = of_type(await events(handle), "warning")
    return found if len(found) >= n else None


async def test_answer_while_the_model_is_thinking_warns(client, task_queue):
    fake = FakeAgentActivities(replies=[text("hello")], llm_delay=1.0)
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_until(lambda: fake.llm_requests)
        await handle.signal("tool_approval", {"call_id": "c1", "approved": True})
        result = await handle.result()
        evs = await events(handle)
    assert result.finish_reason == "stop"
    assert event_types(evs) == ["warning", "text_delta", "finished"]
    assert "no call is waiting" in of_type(evs, "warning")[0].message


async def test_huge_reason_is_cut_with_a_warning(client, task_queue):
    fake = FakeAgentActivities(replies=[calls(("c1", "run_command", "{}")), text("done")])
    async with worker_for(client, task_queue, fake):
        handle = await start_run(client, task_queue, AgentRunInput.from_prompt("x"))
        await wait_for_phase(handle, "awaiting_approval")
        await handle.signal(
            "tool_approval", {"call_id": "c1", "approved": False, "reason": "x" * 50_000}
        )
        result = await handle.result()
        evs = await events(handle)
    (warning,) = of_type(evs, "warning")
    assert "cut to" in warning.message
    content = tool_messages(result.messages)[0].content
    assert content.startswith("Rejected: xxx") and len(content) < 3000


async def test_unknown_options_warn(client, task_queue):
    fake = FakeAgentActivities(replies=[text("hi")])
    async with worker_for(client, task_queue, fake):
        raw = {"messages": [{"role": "user", "content": "x"}], "options": {"colour": "blue"}}
        handle = await client.start_workflow(
            "AgentWorkflow", raw, id=f"agent-opts-{task_queue}", task_queue=task_queue
        )
        await handle.result()
        evs = await events(handle)
    assert event_types(evs) == ["warning", "text_delta", "finished"]
    assert "colour" in of_type(evs, "warning")[0].message


async def test_plain_prompt_string_input(client, task_queue):
    fake = FakeAgentActivities(replies=[text("hi")])
    async with worker_for(client, task_queue, fake):
        handle = await client.start_workflow(
            "AgentWorkflow", "hello there", id=f"agent-str-{task_queue}", task_queue=task_queue
        )
        result = await handle.result()
    assert result["finish_reason"] == "stop"
    assert result["messages"][0] == {
        "role": "user",
        "content": "hello there",
        "name": None,
        "tool_calls": None,
        "tool_call_id": None,
    }
    json.dumps(result)
