"""The benchmark's fair floor (`bench/floor.py`) is plain: its activities import nothing of the
project, and per round they send the model server the agent's own request (the same head and
body bytes) and return the agent's `list_dir` envelope."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from bench.agent_activities import API_KEY, agent_activities, bench_workspace
from bench.bare_workflow import StepInput
from bench.fake_llm import FakeLlmServer
from bench.floor import FairFloor, check_same_requests, listing, load_record, save_record
from workflows import names
from workflows.conversation.tail import ConversationTails
from workflows.model import ChatMessage, LlmRequest, LlmResponse, ToolRequest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = {"activities", "workflows", "runtime", "starter", "worker"}
"""The project's own top-level packages and modules (`pyproject.toml`)."""
ROUNDS = 3


def imported(path: Path) -> set[str]:
    """The modules a file imports, at any depth of its code."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import"
            found.add(node.module or "")
    return found


def test_the_floor_imports_nothing_of_the_project() -> None:
    """`bench/floor.py` and the bench modules it imports (transitively) import none of
    `activities`, `workflows`, `runtime`, `starter` or `worker`."""
    seen: set[str] = set()
    todo = ["bench.floor"]
    while todo:
        module = todo.pop()
        seen.add(module)
        for name in imported(ROOT / (module.replace(".", "/") + ".py")):
            top = name.split(".")[0]
            assert top not in PROJECT, f"{module} imports {name}"
            if top == "bench" and name not in seen and name != "bench":
                todo.append(name)
    assert "bench.bare_workflow" in seen


class LocalConversation:
    """Answers `call_llm`'s conversation query from a local list, as the workflow would."""

    def __init__(self, messages: list[ChatMessage]) -> None:
        self.messages = messages
        self._tails = ConversationTails()

    def get_workflow_handle(self, workflow_id: str, **_: Any) -> LocalConversation:
        return self

    async def query(self, name: str, *args: Any, **__: Any) -> Any:
        assert name == names.QUERY_CONVERSATION_TAIL
        return self._tails.answer(args[0], self.messages)


async def test_the_floors_requests_are_the_agents_round_by_round(tmp_path: Path) -> None:
    """The agent's real `call_llm` and `execute_tool` for three rounds (outside Temporal), then
    the floor's two steps for the same rounds: the server gets the same requests, head and body
    bytes, round by round; the floor's listing is the agent's tool result."""
    conversation = LocalConversation([ChatMessage.user("liste l’espace de travail ✓")])
    env = ActivityEnvironment()
    record = tmp_path / "record.json"
    with FakeLlmServer(mode="instant", content_size=50, tool="list_dir") as server:
        async with agent_activities(
            conversation,  # type: ignore[arg-type]
            server.base_url,
            tmp_path,
            live_text=False,
        ) as (_, __, real):
            (bench_workspace(tmp_path) / "sub").mkdir()
            tool_results: list[str] = []
            for round_ in range(ROUNDS):
                request = LlmRequest(
                    workflow_id="local",
                    run_id="local",
                    message_count=len(conversation.messages),
                    round=round_,
                    tools=["list_dir"],
                )
                reply: LlmResponse = await env.run(real.call_llm, request)
                conversation.messages.append(reply.message)
                for call in reply.message.tool_calls or []:
                    content: str = await env.run(
                        real.execute_tool,
                        ToolRequest(
                            workflow_id="local",
                            call_id=call.id,
                            name=call.name,
                            arguments=call.arguments,
                        ),
                    )
                    tool_results.append(content)
                    conversation.messages.append(ChatMessage.tool(call, content))
        agent = server.recent(ROUNDS)
        assert server.requests == ROUNDS
        save_record(record, [r["body"] for r in agent])

        workspace = bench_workspace(tmp_path)
        async with FairFloor(server.base_url, API_KEY, workspace, record) as floor:
            model_call, list_dir = floor.activities()
            replies = [
                await model_call(StepInput(workflow_id="local", round=r)) for r in range(ROUNDS)
            ]
            listed = await list_dir(StepInput(workflow_id="local", round=0))
        floor_requests = server.recent(ROUNDS)

    check_same_requests(agent, floor_requests)
    for a, f in zip(agent, floor_requests, strict=True):
        assert a["body"] == f["body"]
    bodies = [json.loads(r["body"]) for r in agent]
    assert [len(b["messages"]) for b in bodies] == [1, 3, 5]
    assert "✓" in agent[0]["body"]  # the bytes are UTF-8, not \\u escapes, on both sides
    assert bodies[0]["stream"] is True and bodies[0]["tools"][0]["function"]["name"] == "list_dir"

    assert set(tool_results) == {listed}
    assert json.loads(listed) == {
        "ok": True,
        "data": [
            {"name": "notes.txt", "kind": "file", "size": 6},
            {"name": "sub", "kind": "dir", "size": None},
        ],
    }
    for answer in replies:
        assert answer["finish_reason"] == "tool_calls"
        assert answer["message"]["content"] == "x" * 50
        assert answer["message"]["tool_calls"][0]["function"]["name"] == "list_dir"


def test_the_listing_is_the_agents_envelope_with_links_not_followed(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_text("bee")
    (tmp_path / "a").mkdir()
    (tmp_path / "c").symlink_to(tmp_path / "a", target_is_directory=True)
    assert json.loads(listing(tmp_path))["data"] == [
        {"name": "a", "kind": "dir", "size": None},
        {"name": "b.txt", "kind": "file", "size": 3},
        {"name": "c", "kind": "symlink", "size": None},
    ]


def test_a_record_whose_bytes_the_floor_would_not_send_again_is_refused(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    save_record(record, ['{"model": "m", "stream": true}'])
    assert load_record(record) == [{"model": "m", "stream": True}]
    save_record(record, ['{"model":"m"}'])  # json.dumps would add a space: not the same bytes
    with pytest.raises(ValueError, match="round 0"):
        load_record(record)


def test_requests_that_diverge_fail_the_check() -> None:
    agent = [{"head": "POST /v1/chat/completions HTTP/1.1\r\n", "body": '{"a": 1}'}]
    check_same_requests(agent, [dict(agent[0])])
    with pytest.raises(RuntimeError, match="body at round 0"):
        check_same_requests(agent, [{**agent[0], "body": '{"a": 2}'}])
    with pytest.raises(RuntimeError, match="head at round 0"):
        check_same_requests(agent, [{**agent[0], "head": "POST /v2 HTTP/1.1\r\n"}])
    with pytest.raises(RuntimeError, match="made 0 model requests"):
        check_same_requests(agent, [])
