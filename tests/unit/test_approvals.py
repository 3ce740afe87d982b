"""Unit tests of the approval rules (no server): which calls need a person, and why an answer
cannot be taken."""

from __future__ import annotations

from datetime import UTC, datetime

from workflows.context import RunContext
from workflows.conversation.record import Conversation
from workflows.gate.approvals import Approvals
from workflows.model import (
    AgentRunOptions,
    AgentState,
    ApprovalRecord,
    ChatMessage,
    ToolCall,
    ToolSpec,
)

SPECS = [
    ToolSpec(name="list_dir", description="", parameters={}),
    ToolSpec(name="run_command", description="", parameters={}, requires_approval=True),
]


def approvals(messages: list[ChatMessage], **options: object) -> tuple[Approvals, AgentState]:
    state = AgentState(messages=messages, options=AgentRunOptions(**options), tool_specs=SPECS)
    rules = Approvals(
        RunContext(state=state, now=lambda: datetime.now(UTC), run_id="run-1"),
        Conversation(state),
    )
    return rules, state


def call(call_id: str, name: str = "run_command", arguments: object = '{"command": "ls"}'):
    return ToolCall(id=call_id, name=name, arguments=arguments)


def test_guarded_tools_and_extra_approval_need_a_person():
    rules, _ = approvals([], approval_required=["list_dir"])
    assert rules.requires_approval(call("a"))
    assert rules.requires_approval(call("b", "list_dir", "{}"))
    rules, _ = approvals([])
    assert not rules.requires_approval(call("b", "list_dir", "{}"))


def test_a_call_that_cannot_run_never_needs_a_person():
    rules, _ = approvals([], tools=["list_dir"])
    assert not rules.requires_approval(call("a"))  # not allowed in this run
    rules, _ = approvals([])
    assert not rules.requires_approval(call("b", arguments='{"command":'))  # cut off
    assert not rules.requires_approval(call("c", arguments="[1, 2]"))  # not an object
    assert not rules.requires_approval(call("d", "nope"))  # unknown tool
    assert not rules.requires_approval(call("e", arguments='{"command": "' + "x" * 100_001 + '"}'))


def test_waiting_and_unanswered():
    batch = ChatMessage.assistant("", [call("a"), call("b", "list_dir", "{}"), call("c")])
    rules, state = approvals([ChatMessage.user("go"), batch])
    assert [c.id for c in rules.waiting()] == ["a", "c"]
    state.answers["a"] = ApprovalRecord(call_id="a", approved=True, at=datetime.now(UTC))
    assert [c.id for c in rules.waiting()] == ["c"]


def test_why_an_answer_is_refused():
    first = ChatMessage.assistant("", [call("a")])
    done = ChatMessage.tool(call("a"), "ok")
    second = ChatMessage.assistant("", [call("b")])
    rules, state = approvals([ChatMessage.user("go"), first, done, second])
    assert rules.problem("b", finished=False) is None
    assert rules.problem("b", finished=True) == "the run has finished"
    assert rules.problem("a", finished=False) == "call 'a' was already answered"
    assert rules.problem("zz", finished=False) == "unknown call id 'zz' (waiting: b)"
    state.answers["b"] = ApprovalRecord(call_id="b", approved=False, at=datetime.now(UTC))
    assert rules.problem("b", finished=False) == "call 'b' was already answered"
    idle, _ = approvals([ChatMessage.user("go")])
    assert idle.problem("a", finished=False) == (
        "no call is waiting for approval (got an answer for 'a')"
    )
    long = "x" * 10_000
    assert len(rules.problem(long, finished=False) or "") < 600


def test_allowed_tools_follow_the_run_allow_list():
    rules, _ = approvals([], tools=["run_command", "missing"])
    assert rules.allowed_tools() == ["run_command"]
    rules, _ = approvals([])
    assert rules.allowed_tools() == ["list_dir", "run_command"]
