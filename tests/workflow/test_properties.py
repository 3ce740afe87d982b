"""Property tests of the ordering invariant and of "never run a call twice, never run a rejected
call": a fast pure one on the reconstruction functions, and one that drives the REAL
AgentWorkflow on the dev server with random tool-call batches and random interleavings of
answers (approve, reject, duplicate, unknown ids), cancels and user messages."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.service import RPCError

from tests.fakes import FakeAgentActivities, calls, text
from tests.helpers import events, of_type, start_run, status, wait_until, worker_for
from workflows.conversation.record import invariant_violations, pending_calls
from workflows.gate.reconstruction import Execute, Respond, plan_resume
from workflows.model import AgentRunInput, ChatMessage, ToolCall

GUARDED = {"run_command", "delete_path"}
KNOWN = {"list_dir", "read_file", "run_command", "delete_path"}
NAMES = [*sorted(KNOWN), "nope"]


# ---------------------------------------------------------------- pure


class _Answer:
    def __init__(self, approved: bool, reason: str | None) -> None:
        self.approved = approved
        self.reason = reason


@st.composite
def batches_with_answers(draw: st.DrawFn) -> tuple[list[ToolCall], list[int], dict[str, Any]]:
    size = draw(st.integers(1, 6))
    batch = [
        ToolCall(
            id=f"c{i}",
            name=draw(st.sampled_from(NAMES)),
            arguments=draw(st.sampled_from(['{"path": "."}', "{}", "", "{bad", {"x": 1}])),
        )
        for i in range(size)
    ]
    # tool messages of a batch are appended together, so a partly answered batch has
    # answers for a prefix of its calls (e.g. a continue-as-new between appends never happens)
    answered = list(range(draw(st.integers(0, size))))
    answers = {
        f"c{i}": _Answer(draw(st.booleans()), draw(st.none() | st.text(max_size=5)))
        for i in draw(st.lists(st.sampled_from(range(size)), unique=True))
    }
    answers.update({"zz": _Answer(True, None)})  # an answer for an id that is not in the batch
    return batch, answered, answers


@settings(max_examples=300, deadline=None)
@given(batches_with_answers(), st.lists(st.sampled_from(NAMES), max_size=3))
def test_plan_resume_properties(case, earlier_names):
    batch, answered, answers = case
    # an earlier round that reused the same ids, fully answered
    earlier = [ToolCall(id=f"c{i}", name=n) for i, n in enumerate(earlier_names)]
    history: list[ChatMessage] = [ChatMessage.user("go")]
    if earlier:
        history.append(ChatMessage.assistant("", earlier))
        history.extend(ChatMessage.tool(c, "old") for c in earlier)
    history.append(ChatMessage.assistant("", batch))
    history.extend(ChatMessage.tool(batch[i], "done") for i in sorted(answered))

    pending = pending_calls(history)
    assert [c.id for c in pending] == [c.id for i, c in enumerate(batch) if i not in answered]

    steps = plan_resume(pending, answers, lambda c: c.name in GUARDED, lambda n: n in KNOWN)
    assert [s.call for s in steps] == pending  # one step per pending call, in call order
    for step in steps:
        call = step.call
        answer = answers.get(call.id)
        guarded = call.name in GUARDED
        allowed = not guarded or (answer is not None and answer.approved)
        if isinstance(step, Execute):
            assert allowed and call.name in KNOWN
            assert call.arguments != "{bad"
        else:
            assert isinstance(step, Respond)
            if not allowed:
                assert answer is None or not answer.approved
                assert step.content == f"Rejected: {(answer and answer.reason) or 'User denied'}"
            elif call.name not in KNOWN:
                assert step.content == f"Tool '{call.name}' not found"
            else:
                body = json.loads(step.content)
                assert body["error"].startswith("Invalid tool arguments: ")

    # applying the plan (tool messages in call order) closes the batch, keeping the invariant
    planned = {s.call.id: s.content if isinstance(s, Respond) else "ran" for s in steps}
    closed = history[: len(history) - len(answered)] + [
        ChatMessage.tool(c, "done" if i in answered else planned[c.id]) for i, c in enumerate(batch)
    ]
    assert pending_calls(closed) == []
    assert invariant_violations(closed, allow_open_tail=False) == []
    assert invariant_violations(history) == []  # a partly answered batch is an open tail


# ------------------------------------------------------------ workflow

Op = tuple[Any, ...]

op_strategy = st.one_of(
    st.tuples(st.just("approve"), st.integers(0, 5)),
    st.tuples(st.just("reject"), st.integers(0, 5), st.none() | st.sampled_from(["no", "risky"])),
    st.tuples(st.just("dup"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("unknown"), st.booleans()),
    st.tuples(st.just("message"), st.sampled_from(["also this", "and that"])),
    st.tuples(st.just("cancel"), st.booleans()),
)

batch_strategy = st.lists(
    st.tuples(st.sampled_from(NAMES), st.sampled_from(["{}", '{"path": "."}', "{bad"])),
    min_size=1,
    max_size=3,
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batches=st.lists(batch_strategy, min_size=1, max_size=3),
    waits=st.lists(st.lists(op_strategy, max_size=5), min_size=3, max_size=3),
    finals=st.lists(st.booleans(), min_size=3, max_size=3),
)
async def test_workflow_keeps_the_invariant(client, batches, waits, finals):
    queue = f"prop-{uuid.uuid4()}"
    replies = [
        calls(*((f"call_{j}", name, args) for j, (name, args) in enumerate(batch)))
        for batch in batches
    ]
    fake = FakeAgentActivities(replies=[*replies, text("done")], client=client)
    cancelled = False
    async with worker_for(client, queue, fake):
        handle = await start_run(client, queue, AgentRunInput.from_prompt("go"))
        last_round = -1
        for wait_no in range(len(batches) + 1):

            async def next_stop(after: int = last_round) -> Any:
                current = await status(handle)
                if current.phase == "finished":
                    return current
                if current.phase == "awaiting_approval" and current.round > after:
                    return current
                return None

            current = await wait_until(next_stop)
            if current.phase == "finished":
                break
            last_round = current.round
            pending = [c.id for c in current.pending_approvals]
            assert pending
            for op in waits[wait_no % len(waits)]:
                kind = op[0]
                if kind == "approve":
                    payload: Any = {"call_id": pending[op[1] % len(pending)], "approved": True}
                elif kind == "reject":
                    payload = {"call_id": pending[op[1] % len(pending)], "approved": False}
                    if op[2] is not None:
                        payload["reason"] = op[2]
                elif kind == "dup":
                    payload = {"call_id": pending[op[1] % len(pending)], "approved": op[2]}
                elif kind == "unknown":
                    payload = {"call_id": "no_such_call", "approved": op[1]}
                elif kind == "message":
                    if not cancelled:
                        await handle.signal("send_message", {"content": op[1]})
                    continue
                else:
                    if not cancelled:
                        await handle.signal("cancel", {"immediate": op[1]})
                    cancelled = True
                    continue
                try:
                    await handle.signal("tool_approval", payload)
                except RPCError:
                    if not cancelled:
                        raise  # only a cancelled run may have closed already
            if cancelled:
                break
            # answer whatever is left, so the run goes on
            for call_id in [c.id for c in (await status(handle)).pending_approvals]:
                await handle.signal(
                    "tool_approval", {"call_id": call_id, "approved": finals[wait_no % 3]}
                )
        result = await handle.result()
        evs = await events(handle)

    # how it ended
    if cancelled:
        assert result.finish_reason == "cancelled"
    else:
        assert result.finish_reason == "stop"
    assert [e.seq for e in evs] == list(range(len(evs)))

    # the ordering invariant, in the final history and in every request the model got
    assert invariant_violations(result.messages, allow_open_tail=cancelled) == []
    assert fake.llm_prefixes, "the model was called"
    for prefix in fake.llm_prefixes:
        assert invariant_violations(prefix, allow_open_tail=False) == [], prefix

    # every executed call shows up as exactly one successful tool message, and vice versa:
    # nothing ran twice, nothing ran without a tool message (ids repeat across rounds)
    ran = Counter((r.name, r.call_id) for r in fake.tool_requests)
    ok = Counter(
        (m.name, m.tool_call_id)
        for m in result.messages
        if m.role == "tool" and m.content.startswith('{"ok": true')
    )
    assert ran == ok

    # a guarded call ran only if its first answer approved it; a rejected one never ran
    first_answer: dict[tuple[int, str], bool] = {}
    for e in of_type(evs, "approval"):
        first_answer.setdefault((e.round, e.call_id), e.approved)
    results = {(e.round, e.call_id): e.content for e in of_type(evs, "tool_result")}
    for e in of_type(evs, "tool_call"):
        content = results.get((e.round, e.call_id))
        if content is None:
            assert cancelled  # only a cancelled run leaves calls unanswered
            continue
        executed = content.startswith('{"ok": true')
        if e.requires_approval:
            approved = first_answer.get((e.round, e.call_id))
            if executed:
                assert approved is True
            if approved is False:
                assert content.startswith("Rejected: ")
        if e.name == "nope":
            assert content == "Tool 'nope' not found"
