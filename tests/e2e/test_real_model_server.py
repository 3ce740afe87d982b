"""The end-to-end story against a real OpenAI-compatible server (llama.cpp's `llama-server`,
vLLM, a hosted API): a real worker with the real activities on the dev server, a model asked to
list the workspace, to run a command that needs approval and to delete a file; a person (this
test) approves the command and rejects the deletion with a reason; the run finishes.

The two tests that need a server are skipped unless `AGENT_E2E_LLM_BASE_URL` is set (docs/real-model-servers.md
has an offline recipe: a small model on llama.cpp that makes real tool calls):

    AGENT_E2E_LLM_BASE_URL=http://127.0.0.1:8181/v1 \
        .venv/bin/pytest -s -p no:cacheprovider tests/e2e/test_real_model_server.py

Optional: `AGENT_E2E_LLM_MODEL` (default `local`: llama-server serves the model it loaded, whatever
the name), `AGENT_E2E_LLM_API_KEY`, `AGENT_E2E_LLM_MAX_TOKENS` (default 512, so a model that does
not stop cannot run a round to its context limit), `AGENT_E2E_LLM_TIMEOUT_SECONDS` (default 900,
the whole story).

The person here answers through the product's own approval rules (`workflows.gate.policy.evaluate`
over `APPROVER_RULES`), not a pattern of its own: read-only commands are approved, anything else
(a deletion, a command with a shell operator or a newline) is rejected with a reason.

A small model is not reliable, so beyond what must hold whatever it says (the run closes `stop`
or `max_rounds` with no `error` event, every request the server got was accepted, approvals are
asked only for tools that need them, the ordering invariant holds), the story fails when the
model makes no tool call at all (the message says what it answered instead), or when the run
holds no approved call or no rejected one. What happened, round by round (latency, tokens and,
from llama.cpp, the server's own prompt and generation speed), is printed: run with `-s`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.llm import OpenAIChatClient
from activities.tools import build_default_registry
from runtime.settings import Settings
from tests.helpers import events, status
from workflows import names
from workflows.contract.rules import PolicyRule
from workflows.contract.tool_results import invalid_arguments_message, rejection_message
from workflows.conversation.record import invariant_violations
from workflows.gate.policy import evaluate
from workflows.model import (
    AgentEvent,
    AgentRunInput,
    AgentRunOptions,
    AgentRunResult,
    ChatMessage,
    ErrorEvent,
    LlmResponse,
    ToolApprovalResponse,
    ToolCall,
    ToolCallEvent,
)
from workflows.run.agent import AgentWorkflow

BASE_URL = (os.environ.get("AGENT_E2E_LLM_BASE_URL") or "").strip()
MODEL = (os.environ.get("AGENT_E2E_LLM_MODEL") or "").strip() or "local"
API_KEY = (os.environ.get("AGENT_E2E_LLM_API_KEY") or "").strip() or None
MAX_TOKENS = int(os.environ.get("AGENT_E2E_LLM_MAX_TOKENS") or 512)
TIMEOUT = float(os.environ.get("AGENT_E2E_LLM_TIMEOUT_SECONDS") or 900)

needs_server = pytest.mark.skipif(
    not BASE_URL,
    reason=(
        "needs a real OpenAI-compatible server: set AGENT_E2E_LLM_BASE_URL (e.g."
        " http://127.0.0.1:8080/v1 for `llama-server --jinja`; optional AGENT_E2E_LLM_MODEL,"
        " AGENT_E2E_LLM_API_KEY); see docs/real-model-servers.md"
    ),
)

SYSTEM = (
    "You are a file manager assistant working in a workspace folder. You act only through the"
    " tools you are given: list_dir, read_file, run_command (needs a person's approval) and"
    " delete_path (needs approval). Call one tool at a time. When a tool is rejected, do not"
    " call it again: tell the user why. Answer in one short sentence when you are done."
)
PROMPT = (
    "First list the files in the workspace with list_dir. Then use run_command to run `ls -la`."
    " Then delete notes.txt with delete_path. Tell me what happened."
)

KEEP_REASON = "notes.txt must stay: it is the user's only copy, so do not delete it"
"""Why the person here rejects every deletion: the model is told it (`Rejected: …`)."""
NOT_READ_ONLY_REASON = "only read-only commands without shell operators are approved here"
"""Why the person here rejects a call no rule of theirs allows."""
READ_ONLY_COMMANDS = ("ls", "ls *", "pwd", "cat *", "head *", "wc *", "echo *", "date", "whoami")
APPROVER_RULES = [
    *(
        PolicyRule(tool="run_command", when={"command": c}, decision="allow")
        for c in READ_ONLY_COMMANDS
    ),
    PolicyRule(tool="delete_path", decision="deny", reason=KEEP_REASON),
]
"""What the person here approves, in the product's own rule language (docs/approval-policy.md):
an `allow` pattern never matches a command holding a newline, `;`, `&`, `|`, `` ` ``, `$(`, `>`
or `<`, so `ls\\nrm -rf x` is not `ls *`. A call no rule allows is rejected."""


def decide(call: ToolCall) -> tuple[bool, str | None]:
    """The person's answer to one call: approved, or rejected with the reason the model reads."""
    verdict = evaluate(APPROVER_RULES, call.name, call.arguments, requires_approval=True)
    if verdict.decision == "allow":
        return True, None
    return False, verdict.reason or NOT_READ_ONLY_REASON


# ---- what went over the wire ----


@dataclass
class Request:
    """One request to the server: what it asked, its status, how long until its body ended, and
    the `timings` llama.cpp's server puts in its last chunk (None from other servers)."""

    what: str
    """Method and path, e.g. `POST /v1/chat/completions`."""
    status: int
    seconds: float = 0.0
    timings: dict[str, Any] | None = None

    @property
    def is_chat(self) -> bool:
        return self.what.startswith("POST ") and self.what.endswith("/chat/completions")


@dataclass
class Exchange:
    requests: list[Request] = field(default_factory=list)

    @property
    def chat_statuses(self) -> list[int]:
        """The statuses of the chat completion requests (a client may also ask the server other
        things, e.g. llama.cpp's `GET /props`, which another server may not have)."""
        return [r.status for r in self.requests if r.is_chat]


def server_timings(body: bytes) -> dict[str, Any] | None:
    """The last `timings` object in a reply's body (a stream's `data:` lines or one JSON)."""
    for line in reversed(body.decode("utf-8", errors="replace").splitlines()):
        text = line.removeprefix("data:").strip()
        if '"timings"' not in text:
            continue
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("timings"), dict):
            return cast(dict[str, Any], value["timings"])
    return None


class _Tee(httpx.AsyncByteStream):
    """A response body passed through unchanged, kept to be read once it is closed."""

    def __init__(self, inner: httpx.AsyncByteStream, done: Callable[[bytes], None]) -> None:
        self._inner = inner
        self._done = done
        self._body = bytearray()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._body.extend(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
        self._done(bytes(self._body))


class TappedTransport(httpx.AsyncBaseTransport):
    """The real HTTP transport, recording each request's status, duration and server timings."""

    def __init__(self, exchange: Exchange) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._exchange = exchange

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        started = time.monotonic()
        response = await self._inner.handle_async_request(request)
        record = Request(f"{request.method} {request.url.path}", response.status_code)
        self._exchange.requests.append(record)

        def done(body: bytes) -> None:
            record.seconds = time.monotonic() - started
            record.timings = server_timings(body)

        stream = _Tee(cast(httpx.AsyncByteStream, response.stream), done)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=stream,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.fixture
async def watched_http() -> AsyncIterator[tuple[httpx.AsyncClient, Exchange]]:
    exchange = Exchange()
    async with httpx.AsyncClient(transport=TappedTransport(exchange)) as http:
        yield http, exchange


async def server_identity() -> str:
    """What the server says it serves (llama.cpp: the model file and its build), for the log."""
    root = BASE_URL.rstrip("/").removesuffix("/v1")
    parts: list[str] = []
    headers = {"Authorization": f"Bearer {API_KEY}"} if API_KEY else {}
    async with httpx.AsyncClient(timeout=10.0, headers=headers) as http:
        for url, keys in (
            (f"{root}/props", ("model_path", "build_info")),
            (f"{BASE_URL}/models", ()),
        ):
            try:
                response = await http.get(url)
                value = response.json() if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                value = None
            if not isinstance(value, dict):
                continue
            if keys:
                parts += [f"{k}={value[k]}" for k in keys if k in value]
                ctx = value.get("default_generation_settings", {}).get("n_ctx")
                if ctx is not None:
                    parts.append(f"n_ctx={ctx}")
            else:
                parts += [
                    f"model={m.get('id')}" for m in value.get("data", []) if isinstance(m, dict)
                ]
    return " ".join(parts) or "(the server did not say)"


# ---- the run ----


def seeded_workspace(root: Path) -> Path:
    workspace = root / "workspace"
    (workspace / "logs").mkdir(parents=True)
    (workspace / "logs" / "app.log").write_text("started\nstopped\n")
    (workspace / "notes.txt").write_text("remember the milk\n")
    return workspace


def real_settings(workspace: Path) -> Settings:
    return Settings(
        llm_base_url=BASE_URL,
        llm_api_key=API_KEY,
        llm_model=MODEL,
        workspace=workspace,
        state_dir=workspace.parent / "state",
        llm_timeout_seconds=300.0,
        llm_max_tokens=MAX_TOKENS,
    )


def story_input() -> AgentRunInput:
    """The prompt, after an earlier turn whose reply was cut off mid-arguments: the first request
    already carries a call whose arguments (`{"path":`) a strict server cannot parse."""
    cut = ToolCall(id="earlier_1", name="list_dir", arguments='{"path":')
    return AgentRunInput(
        messages=[
            ChatMessage.system(SYSTEM),
            ChatMessage.user("What is in the workspace?"),
            ChatMessage.assistant("", [cut]),
            ChatMessage.tool(cut, invalid_arguments_message("Expecting value at position 8")),
            ChatMessage.assistant("That call was cut off; ask me again."),
            ChatMessage.user(PROMPT),
        ],
        options=AgentRunOptions(max_rounds=8, temperature=0.0),
    )


@dataclass
class Answer:
    call: ToolCall
    approved: bool
    reason: str | None


async def drive(
    handle: WorkflowHandle[Any, Any], guarded: set[str], answers: list[Answer]
) -> AgentRunResult:
    """Answer every approval the run asks for, as a person would, by `decide`, until it ends."""
    answered: set[str] = set()
    deadline = time.monotonic() + TIMEOUT
    result_task = asyncio.ensure_future(handle.result())
    try:
        while not result_task.done():
            if time.monotonic() > deadline:
                raise AssertionError(f"the run did not finish in {TIMEOUT:.0f} s")
            current = await status(handle)
            for call in current.pending_approvals:
                if call.id in answered:
                    continue
                answered.add(call.id)
                assert call.name in guarded, f"approval asked for {call.name}, which needs none"
                approved, reason = decide(call)
                answers.append(Answer(call, approved, reason))
                await handle.signal(
                    names.SIGNAL_TOOL_APPROVAL,
                    ToolApprovalResponse(
                        call_id=call.id,
                        approved=approved,
                        reason=reason,
                        approver="real-model-test",
                    ),
                )
            await asyncio.wait({result_task}, timeout=0.5)
        result: AgentRunResult = result_task.result()
        return result
    finally:
        result_task.cancel()


@dataclass
class Round:
    """One `call_llm` activity as the run's history recorded it."""

    seconds: float
    reply: LlmResponse


async def llm_rounds(client: Client, handle: WorkflowHandle[Any, Any]) -> list[Round]:
    """Each model call of the run: scheduled to completed, and the reply it returned."""
    scheduled: dict[int, float] = {}
    rounds: list[Round] = []
    async for event in handle.fetch_history_events():
        at = event.event_time.ToDatetime().timestamp()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            if attributes.activity_type.name == names.ACTIVITY_CALL_LLM:
                scheduled[event.event_id] = at
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed = event.activity_task_completed_event_attributes
            if completed.scheduled_event_id in scheduled:
                [reply] = await client.data_converter.decode(
                    list(completed.result.payloads), [LlmResponse]
                )
                rounds.append(Round(at - scheduled[completed.scheduled_event_id], reply))
    return rounds


def report(
    identity: str,
    result: AgentRunResult,
    log: list[AgentEvent],
    answers: list[Answer],
    rounds: list[Round],
    exchange: Exchange,
) -> None:
    print(f"\n--- real model server {BASE_URL} (model {MODEL}): {identity} ---")
    print(f"finish_reason={result.finish_reason} rounds={result.rounds} usage={result.usage}")
    print(f"chat requests={len(exchange.chat_statuses)} statuses={exchange.chat_statuses}")
    for index, item in enumerate(rounds):
        calls = ", ".join(f"{c.name} {c.arguments}" for c in item.reply.message.tool_calls or [])
        usage = item.reply.usage
        print(
            f"round {index}: {item.seconds:.2f} s, prompt {usage.prompt_tokens} +"
            f" completion {usage.completion_tokens} tokens, finish {item.reply.finish_reason},"
            f" {'calls ' + calls if calls else 'text ' + repr(item.reply.message.content[:200])}"
        )
    for index, request in enumerate(exchange.requests):
        t = request.timings
        speed = (
            f"prompt {t.get('prompt_n')} tokens at {t.get('prompt_per_second', 0):.1f} tokens/s,"
            f" generated {t.get('predicted_n')} at {t.get('predicted_per_second', 0):.1f} tokens/s"
            if t
            else "no server timings"
        )
        if not request.is_chat:
            print(f"request {index}: {request.what}: HTTP {request.status}")
            continue
        print(f"request {index}: HTTP {request.status} in {request.seconds:.2f} s, {speed}")
    for answer in answers:
        verdict = "approved" if answer.approved else f"rejected ({answer.reason})"
        print(f"approval {answer.call.id} {answer.call.name} {answer.call.arguments}: {verdict}")
    for event in log:
        if event.type in ("warning", "error", "finished"):
            print(f"event {event.model_dump(mode='json')}")
    print(f"last message: {result.messages[-1].content[:300]!r}")


def what_the_model_answered(result: AgentRunResult, first: int) -> str:
    """The run's assistant texts (the messages from index `first` on), for a failure message."""
    texts = [m.content for m in result.messages[first:] if m.role == "assistant"]
    return " | ".join(repr(t[:300]) for t in texts) or "(no assistant message)"


def tool_message(result: AgentRunResult, call_id: str) -> str | None:
    found = [m.content for m in result.messages if m.role == "tool" and m.tool_call_id == call_id]
    return found[-1] if found else None


@needs_server
async def test_the_story_against_a_real_model_server(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    watched_http: tuple[httpx.AsyncClient, Exchange],
) -> None:
    http, exchange = watched_http
    workspace = seeded_workspace(tmp_path)
    settings = real_settings(workspace)
    registry = build_default_registry(workspace)
    guarded = {spec.name for spec in registry.specs() if spec.requires_approval}
    acts = AgentActivities(client, settings, registry, http)
    answers: list[Answer] = []
    run_input = story_input()
    async with Worker(
        client, task_queue=task_queue, workflows=[AgentWorkflow], activities=acts.all()
    ):
        handle = await client.start_workflow(
            AgentWorkflow.run, run_input, id=f"real-{uuid.uuid4()}", task_queue=task_queue
        )
        result = await drive(handle, guarded, answers)
        log = await events(handle)
        rounds = await llm_rounds(client, handle)
    report(await server_identity(), result, log, answers, rounds, exchange)

    made = [e for e in log if isinstance(e, ToolCallEvent)]
    assert made, (
        f"the model made no tool call (finish_reason {result.finish_reason}); it answered:"
        f" {what_the_model_answered(result, len(run_input.messages))}. If that holds a call"
        " written as text, check the server's chat template (its call markers) and `--jinja`"
    )
    assert result.finish_reason in ("stop", "max_rounds"), result.error
    assert [e.message for e in log if isinstance(e, ErrorEvent)] == []
    chat = exchange.chat_statuses
    assert chat and all(s < 400 for s in chat), chat
    assert invariant_violations(result.messages, allow_open_tail=False) == []
    approved = [a for a in answers if a.approved]
    rejected = [a for a in answers if not a.approved]
    asked = [f"{a.call.name} {a.call.arguments}" for a in answers]
    assert approved, f"no call was approved; the person was asked about: {asked}"
    assert rejected, f"no call was rejected; the person was asked about: {asked}"
    for answer in approved:  # it ran: its result is the tool's, not a refusal
        told = tool_message(result, answer.call.id)
        assert told is not None and not told.startswith("Rejected:"), told
    for answer in rejected:  # the model was told why
        assert tool_message(result, answer.call.id) == rejection_message(answer.reason)
    assert (workspace / "notes.txt").exists()  # nothing the person rejected happened


@needs_server
async def test_max_tokens_bounds_a_real_reply(watched_http: tuple[httpx.AsyncClient, Exchange]):
    http, exchange = watched_http
    llm = OpenAIChatClient(http, BASE_URL, API_KEY, MODEL, timeout=httpx.Timeout(300.0))
    reply = await llm.complete(
        [ChatMessage.user("Count from one to two hundred, one number per line.")], max_tokens=8
    )
    print(f"\nmax_tokens=8: finish_reason={reply.finish_reason} usage={reply.usage}")
    assert exchange.chat_statuses == [200]
    assert reply.finish_reason in ("length", "stop")
    assert reply.usage.completion_tokens <= 8


@pytest.mark.parametrize(
    ("name", "arguments", "approved"),
    [
        pytest.param("run_command", {"command": "ls -la"}, True, id="ls -la"),
        pytest.param("run_command", {"command": "ls"}, True, id="ls"),
        pytest.param("run_command", '{"command": "cat notes.txt"}', True, id="cat, as JSON text"),
        pytest.param("run_command", {"command": "ls\nrm -rf x"}, False, id="newline"),
        pytest.param("run_command", {"command": "ls -la; rm -rf ."}, False, id="semicolon"),
        pytest.param("run_command", {"command": "echo $(rm -rf .)"}, False, id="substitution"),
        pytest.param("run_command", {"command": "ls > listing"}, False, id="redirection"),
        pytest.param("run_command", {"command": "rm -rf logs"}, False, id="rm"),
        pytest.param("run_command", "ls -la", False, id="arguments not JSON"),
        pytest.param("delete_path", {"path": "notes.txt"}, False, id="delete"),
    ],
)
def test_the_person_here_approves_read_only_commands_only(
    name: str, arguments: Any, approved: bool
) -> None:
    """The story's approver, with no server: what it approves is decided by the product's rules,
    and a rejection always carries a reason for the model."""
    verdict, reason = decide(ToolCall(id="c", name=name, arguments=arguments))
    assert (verdict, reason is None) == (approved, approved)
    if name == "delete_path":
        assert reason == KEEP_REASON
