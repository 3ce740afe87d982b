"""Bad input, sent the way users send it: the `temporal` CLI (`temporal workflow signal ...`) and
the starter (`python -m starter approve|reject|cancel|say ...`), and from the model (the fake
OpenAI server). Each case asserts the exact observable outcome (the warning text, the CLI's own
answer, the tool message, the finish reason) and that the run afterwards still answers queries
and finishes normally. Each test records what it did and saw in results.json (see report.py).
"""

from __future__ import annotations

import asyncio
import getpass
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from tests.fake_openai import HttpError, Malformed, tool_calls, unauthorized
from tests.helpers import events, messages, status
from tests.reliability.agents import (
    InProcessWorker,
    approval_json,
    finished_well,
    in_process_worker,
    last_seq,
    openai_to_chat,
    pending_ids,
    wait_pending,
    wait_warnings,
    warnings_after,
)
from tests.reliability.processes import signal_cli, starter, temporal_cli
from workflows.conversation.record import invariant_violations
from workflows.model import AgentRunResult
from workflows.run.agent import AgentWorkflow


@pytest.fixture(scope="module")
async def scripted(
    client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[InProcessWorker]:
    """The real activities with the offline scripted model, in this process."""
    base = tmp_path_factory.mktemp("bad-input")
    (base / "ws").mkdir()
    async with in_process_worker(client, base / "ws", base / "state") as worker:
        yield worker


async def approval_wait(
    worker: InProcessWorker, tag: str
) -> tuple[WorkflowHandle[AgentWorkflow, AgentRunResult], str, Path]:
    """A run waiting for approval of `echo <tag> >> <file>`; returns (handle, call id, file)."""
    name = f"out-{tag}-{uuid.uuid4().hex[:6]}.txt"
    handle = await worker.start(f"run: echo {tag} >> {name}")
    pending = await wait_pending(handle)
    return handle, pending[0].id, worker.workspace / name


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def approve_and_finish(
    row: Any, address: str, handle: WorkflowHandle[AgentWorkflow, AgentRunResult], call_id: str
) -> AgentRunResult:
    done = await signal_cli(address, handle.id, "tool_approval", approval_json(call_id))
    assert done.returncode == 0, done.summary()
    result, log = await finished_well(handle, "stop")
    row.saw(f"then a valid approval: finish_reason={result.finish_reason}, {len(log)} events")
    row.checked("afterwards: queries answer, the valid approval applies, run finishes `stop`")
    return result


# ---------------------------------------------------------------- tool_approval via the CLI

# (id, what, --input text with CALL for the pending call id, expected: ("warning" | "cli", text))
CLI_APPROVALS: list[tuple[str, str, list[str], tuple[str, str]]] = [
    (
        "malformed-json",
        "malformed JSON",
        ['{"call_id": "CALL", "approved": tru'],
        ("cli", "input #1 is not valid JSON"),
    ),
    ("empty-input", "an empty --input", [""], ("cli", "input #1 is not valid JSON")),
    (
        "approved-yes",
        '"approved": "yes"',
        ['{"call_id": "CALL", "approved": "yes"}'],
        ("warning", "approved: Input should be a valid boolean (got 'yes')"),
    ),
    (
        "approved-1",
        '"approved": 1',
        ['{"call_id": "CALL", "approved": 1}'],
        ("warning", "approved: Input should be a valid boolean (got 1)"),
    ),
    (
        "approved-true-string",
        '"approved": "true"',
        ['{"call_id": "CALL", "approved": "true"}'],
        ("warning", "approved: Input should be a valid boolean (got 'true')"),
    ),
    (
        "approved-null",
        '"approved": null',
        ['{"call_id": "CALL", "approved": null}'],
        ("warning", "approved: Input should be a valid boolean"),
    ),
    (
        "approved-missing",
        "no `approved` field",
        ['{"call_id": "CALL"}'],
        ("warning", "approved: Field required"),
    ),
    (
        "call-id-number",
        '"call_id": 7',
        ['{"call_id": 7, "approved": true}'],
        ("warning", "call_id: Input should be a valid string"),
    ),
    (
        "array",
        "an array",
        ['["CALL", true]'],
        ("warning", "tool approval must be a JSON object, got list"),
    ),
    ("null", "null", ["null"], ("warning", "tool approval must be a JSON object, got NoneType")),
    (
        "string",
        "a bare string",
        ['"CALL"'],
        ("warning", "tool approval must be a JSON object, got str"),
    ),
    (
        "extra-field",
        "an unknown field",
        ['{"call_id": "CALL", "approved": true, "force": true}'],
        ("warning", "force: Extra inputs are not permitted"),
    ),
    (
        "unknown-call-id",
        "an unknown call id",
        ['{"call_id": "call_999", "approved": true}'],
        ("warning", "unknown call id 'call_999'"),
    ),
    (
        "two-payloads",
        "two --input values",
        ['{"call_id": "CALL", "approved": true}', '{"call_id": "CALL", "approved": true}'],
        ("warning", "expected one payload, got 2"),
    ),
]


@pytest.mark.parametrize(
    ("case", "what", "inputs", "expected"), CLI_APPROVALS, ids=[c[0] for c in CLI_APPROVALS]
)
async def test_cli_bad_tool_approval(
    scripted: InProcessWorker,
    env_address: str,
    record: Any,
    case: str,
    what: str,
    inputs: list[str],
    expected: tuple[str, str],
) -> None:
    row = record("bad_input", f"tool_approval via `temporal workflow signal`: {what}")
    handle, call_id, out = await approval_wait(scripted, case)
    before = await last_seq(handle)
    args = ["workflow", "signal", "--workflow-id", handle.id, "--name", "tool_approval"]
    for text in inputs:
        args += ["--input", text.replace("CALL", call_id)]
    row.did("temporal " + " ".join(args[:6]) + " " + " ".join(f"--input '{t}'" for t in inputs))
    result = await temporal_cli(env_address, *args)
    kind, fragment = expected
    if kind == "cli":
        assert result.returncode != 0 and fragment in result.output, result.summary()
        row.saw(f"the CLI refused it, nothing was sent ({result.summary()})")
        await asyncio.sleep(0.5)
        assert await warnings_after(handle, before) == []
        row.checked("CLI exits non-zero; no signal reached the run")
    else:
        assert result.returncode == 0, result.summary()
        warnings = await wait_warnings(handle, before)
        assert len(warnings) == 1 and fragment in warnings[0], warnings
        row.saw(f"warning: {warnings[0]}")
        row.checked(f"one `warning` event containing {fragment!r}")
    assert await pending_ids(handle) == [call_id]
    assert lines(out) == []
    row.checked("the call is still pending and nothing ran")
    await approve_and_finish(row, env_address, handle, call_id)
    assert lines(out) == [case]


async def test_cli_binary_payload(scripted: InProcessWorker, env_address: str, record: Any) -> None:
    row = record("bad_input", "tool_approval via the CLI with --input-meta encoding=binary/plain")
    handle, call_id, _ = await approval_wait(scripted, "binary")
    before = await last_seq(handle)
    row.did("temporal workflow signal ... --input 'approve!' --input-meta encoding=binary/plain")
    result = await temporal_cli(
        env_address,
        "workflow",
        "signal",
        "--workflow-id",
        handle.id,
        "--name",
        "tool_approval",
        "--input",
        "approve!",
        "--input-meta",
        "encoding=binary/plain",
    )
    row.saw(f"CLI: {result.summary()}")
    if result.returncode == 0:
        warnings = await wait_warnings(handle, before)
        row.saw(f"warning: {warnings[0]}")
        assert "got bytes" in warnings[0] or "could not be decoded" in warnings[0]
        row.checked("one `warning` event saying the payload is not a JSON object")
    assert await pending_ids(handle) == [call_id]
    await approve_and_finish(row, env_address, handle, call_id)


async def test_cli_huge_reason(scripted: InProcessWorker, env_address: str, record: Any) -> None:
    row = record("bad_input", "a rejection with a 1 MiB reason (--input-file)")
    handle, call_id, out = await approval_wait(scripted, "huge")
    before = await last_seq(handle)
    reason = "r" * (1024 * 1024)
    # A 1 MiB argv string exceeds Linux's MAX_ARG_STRLEN (128 KiB): users pass a file.
    path = scripted.workspace.parent / f"reason-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps({"call_id": call_id, "approved": False, "reason": reason}))
    row.did("temporal workflow signal --name tool_approval --input-file <1 MiB JSON>")
    result = await temporal_cli(
        env_address,
        "workflow",
        "signal",
        "--workflow-id",
        handle.id,
        "--name",
        "tool_approval",
        "--input-file",
        str(path),
    )
    assert result.returncode == 0, result.summary()
    warnings = await wait_warnings(handle, before)
    row.saw(f"warning: {warnings[0]}")
    assert "cut to 2000 characters" in warnings[0]
    outcome, _log = await finished_well(handle, "stop")
    tool = next(m for m in outcome.messages if m.role == "tool")
    assert tool.content == "Rejected: " + "r" * 2000
    assert lines(out) == []
    row.saw(f"tool message: 'Rejected: ' + {len(tool.content) - 10} characters; run ended stop")
    row.checked("`warning` says the reason was cut; the rejection applied; nothing ran")
    row.checked("afterwards: queries answer, run finishes `stop`")


ODD_REASONS = [
    ("rtl-emoji", "RTL marks and emoji", "\u202enot really\u200f \U0001f680\u200d\U0001f525"),
    ("nul", "a NUL character", "before\x00after"),
    ("lone-surrogate", "a lone surrogate (\\ud800 in the JSON)", None),
]


@pytest.mark.parametrize(("case", "what", "reason"), ODD_REASONS, ids=[c[0] for c in ODD_REASONS])
async def test_cli_odd_unicode_reason(
    scripted: InProcessWorker,
    env_address: str,
    record: Any,
    case: str,
    what: str,
    reason: str | None,
) -> None:
    row = record("bad_input", f"a rejection whose reason holds {what}")
    handle, call_id, out = await approval_wait(scripted, case)
    before = await last_seq(handle)
    if reason is None:
        text = f'{{"call_id": "{call_id}", "approved": false, "reason": "x\\ud800y"}}'
    else:
        text = json.dumps({"call_id": call_id, "approved": False, "reason": reason})
    row.did(f"temporal workflow signal --name tool_approval --input {text!r}")
    result = await signal_cli(env_address, handle.id, "tool_approval", text)
    row.saw(f"CLI: {result.summary()}")
    assert result.returncode == 0
    if reason is None:
        # The CLI passes the JSON text on as it is; the workflow cannot decode it: a warning.
        warnings = await wait_warnings(handle, before)
        row.saw(f"warning: {warnings[0][:160]}")
        assert "tool_approval: payload could not be decoded" in warnings[0]
        assert await pending_ids(handle) == [call_id]
        row.checked("one `warning` (payload could not be decoded); the call is still pending")
        await approve_and_finish(row, env_address, handle, call_id)
        assert lines(out) == [case]
        return
    outcome, _ = await finished_well(handle, "stop")
    tool = next(m for m in outcome.messages if m.role == "tool")
    row.saw(f"tool message: {tool.content!r}; warnings: {await warnings_after(handle, before)}")
    assert tool.content == f"Rejected: {reason}"
    row.checked("the reason reached the model unchanged")
    assert lines(out) == []
    row.checked("afterwards: queries answer, run finishes `stop`, nothing ran")


async def test_duplicate_answers(scripted: InProcessWorker, env_address: str, record: Any) -> None:
    row = record("bad_input", "two answers for one call (approve, then reject)")
    name = f"dup-{uuid.uuid4().hex[:6]}.txt"
    handle = await scripted.start(f"run: sleep 2; echo dup >> {name}")
    call_id = (await wait_pending(handle))[0].id
    before = await last_seq(handle)
    first = await signal_cli(env_address, handle.id, "tool_approval", approval_json(call_id))
    second = await signal_cli(
        env_address, handle.id, "tool_approval", approval_json(call_id, False, reason="no")
    )
    row.did("temporal workflow signal approve, then at once a rejection of the same call")
    assert first.returncode == 0 and second.returncode == 0
    warnings = await wait_warnings(handle, before)
    row.saw(f"warning: {warnings[0]}")
    assert (
        f"call '{call_id}' was already answered" in warnings[0]
        or "no call is waiting for approval" in warnings[0]
    )
    await finished_well(handle, "stop")
    assert lines(scripted.workspace / name) == ["dup"]
    row.checked("the first answer wins: the command ran once; the second is a `warning`")


async def test_answers_when_nothing_pending(
    scripted: InProcessWorker, env_address: str, record: Any
) -> None:
    row = record("bad_input", "an approval when nothing is pending (a session between turns)")
    handle = await scripted.start("hello", keep_alive=True, idle_timeout_seconds=4)
    await wait_phase(handle, "waiting_for_message")
    before = await last_seq(handle)
    result = await signal_cli(env_address, handle.id, "tool_approval", approval_json("call_1"))
    row.did("temporal workflow signal --name tool_approval while the session waits for a message")
    assert result.returncode == 0
    warnings = await wait_warnings(handle, before)
    row.saw(f"warning: {warnings[0]}")
    assert "no call is waiting for approval (got an answer for 'call_1')" in warnings[0]
    await finished_well(handle, "stop")
    row.checked("one `warning`; the session then ends `stop` at its idle timeout")


async def wait_phase(handle: WorkflowHandle[Any, Any], phase: str) -> None:
    for _ in range(300):
        if (await status(handle)).phase == phase:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(phase)


async def test_answers_after_the_end(
    scripted: InProcessWorker, env_address: str, record: Any
) -> None:
    row = record("bad_input", "approval and cancel after the run finished (CLI and starter)")
    handle = await scripted.start("hello")
    await finished_well(handle, "stop")
    cli = await signal_cli(env_address, handle.id, "tool_approval", approval_json("call_1"))
    cli_cancel = await signal_cli(env_address, handle.id, "cancel", None)
    approve = await starter(
        env_address, scripted.task_queue, "approve", handle.id, "call_1", "--yes"
    )
    cancel = await starter(env_address, scripted.task_queue, "cancel", handle.id)
    row.did("temporal workflow signal tool_approval / cancel; python -m starter approve / cancel")
    for name, item in [("CLI approval", cli), ("CLI cancel", cli_cancel)]:
        row.saw(f"{name}: {item.summary()}")
        assert item.returncode != 0 and "workflow execution already completed" in item.output
    for name, item in [("starter approve", approve), ("starter cancel", cancel)]:
        row.saw(f"{name}: {item.summary()}")
        assert item.returncode == 1 and "has already finished" in item.output
    current = await status(handle)
    assert current.phase == "finished" and current.finish_reason == "stop"
    row.checked("each is refused with a clear one-line error; the finished run is unchanged")


async def test_cancel_twice(scripted: InProcessWorker, env_address: str, record: Any) -> None:
    row = record("bad_input", "cancel twice during an approval wait")
    handle, _call_id, out = await approval_wait(scripted, "cancel2")
    first = await starter(env_address, scripted.task_queue, "cancel", handle.id, "--reason", "stop")
    second = await signal_cli(env_address, handle.id, "cancel", '{"reason": "again"}')
    row.did("python -m starter cancel W --reason stop; then temporal workflow signal --name cancel")
    row.saw(f"starter: {first.summary()}; CLI: {second.summary()}")
    assert first.returncode == 0
    result, log = await finished_well(handle, "cancelled")
    errors = [e.message for e in log if e.type == "error"]
    row.saw(f"error events: {errors}; finish_reason={result.finish_reason}")
    assert errors == [f"Agent run cancelled by {getpass.getuser()}: stop"]  # the starter's user
    assert lines(out) == []
    assert [m.role for m in result.messages] == ["user", "assistant"]
    row.checked("one `error` event, finished `cancelled`, nothing ran; second cancel harmless")


# (id, what, signal name, --input or None, warning fragment)
CLI_OTHER: list[tuple[str, str, str, str | None, str]] = [
    (
        "cancel-bad-type",
        'cancel with "immediate": "yes"',
        "cancel",
        '{"immediate": "yes"}',
        "immediate: Input should be a valid boolean",
    ),
    (
        "cancel-unknown-field",
        "cancel with an unknown field",
        "cancel",
        '{"why": "x"}',
        "why: Extra inputs are not permitted",
    ),
    (
        "message-number",
        'send_message with "content": 5',
        "send_message",
        '{"content": 5}',
        "content: Input should be a valid string",
    ),
    (
        "message-empty",
        "send_message with empty content",
        "send_message",
        '{"content": "   "}',
        "message content is empty",
    ),
    (
        "message-tool-role",
        "send_message with role tool",
        "send_message",
        '{"role": "tool", "content": "x", "tool_call_id": "call_1"}',
        "send_message takes user messages only, got role 'tool'",
    ),
    (
        "unknown-signal",
        "an unknown signal name (approve)",
        "approve",
        '{"call_id": "call_1"}',
        "unknown signal 'approve' ignored",
    ),
]


@pytest.mark.parametrize(
    ("case", "what", "name", "payload", "fragment"), CLI_OTHER, ids=[c[0] for c in CLI_OTHER]
)
async def test_cli_bad_other_signals(
    scripted: InProcessWorker,
    env_address: str,
    record: Any,
    case: str,
    what: str,
    name: str,
    payload: str | None,
    fragment: str,
) -> None:
    row = record("bad_input", f"{what} via `temporal workflow signal`")
    handle, call_id, out = await approval_wait(scripted, case)
    before = await last_seq(handle)
    row.did(f"temporal workflow signal --name {name} --input '{payload}'")
    result = await signal_cli(env_address, handle.id, name, payload)
    assert result.returncode == 0, result.summary()
    warnings = await wait_warnings(handle, before)
    row.saw(f"warning: {warnings[0]}")
    assert len(warnings) == 1 and fragment in warnings[0]
    current = await status(handle)
    assert not current.cancel_requested and [c.id for c in current.pending_approvals] == [call_id]
    assert len(await messages(handle)) == 2
    row.checked(f"one `warning` containing {fragment!r}; not cancelled; history unchanged")
    await approve_and_finish(row, env_address, handle, call_id)
    assert lines(out) == [case]


async def test_starter_unknown_call_id(
    scripted: InProcessWorker, env_address: str, record: Any
) -> None:
    row = record("bad_input", "starter approve with an unknown call id (the update path)")
    handle, call_id, out = await approval_wait(scripted, "starter-unknown")
    before = await last_seq(handle)
    result = await starter(
        env_address, scripted.task_queue, "approve", handle.id, "call_404", "--yes"
    )
    row.did(f"python -m starter approve W call_404 (pending: {call_id})")
    row.saw(f"starter: {result.summary()}")
    assert result.returncode == 1
    assert "the workflow rejected the answer: unknown call id 'call_404'" in result.output
    assert await events(handle, before) == []
    assert await pending_ids(handle) == [call_id]
    row.checked("refused to the caller by the update validator; no event; call still pending")
    ok = await starter(env_address, scripted.task_queue, "approve", handle.id, call_id, "--yes")
    assert ok.returncode == 0, ok.summary()
    await finished_well(handle, "stop")
    row.saw(f"then `starter approve W {call_id}`: {ok.summary(120)}")
    assert lines(out) == ["starter-unknown"]
    row.checked("afterwards: the valid approval applies; run finishes `stop`")


async def test_message_during_approval_wait(
    scripted: InProcessWorker, env_address: str, record: Any
) -> None:
    row = record("bad_input", "a user message (starter say) while a call awaits approval")
    handle, call_id, out = await approval_wait(scripted, "say")
    said = await starter(env_address, scripted.task_queue, "say", handle.id, "hurry up 🙂")
    row.did("python -m starter say W 'hurry up 🙂' during the approval wait, then approve")
    assert said.returncode == 0, said.summary()
    await asyncio.sleep(0.5)
    assert len(await messages(handle)) == 2
    row.saw("the message is held: history unchanged while the call is pending")
    result = await approve_and_finish(row, env_address, handle, call_id)
    roles = [m.role for m in result.messages]
    row.saw(f"roles afterwards: {roles}")
    assert roles[:4] == ["user", "assistant", "tool", "user"]
    assert result.messages[3].content == "hurry up 🙂"
    assert lines(out) == ["say"]
    row.checked("the message is appended after the tool message (the invariant holds)")


# ---------------------------------------------------------------- from the model


async def model_run(
    rig: tuple[InProcessWorker, Any], behaviour: Any, expected: str
) -> tuple[AgentRunResult, list[Any], list[Any]]:
    worker, fake = rig
    first = len(fake.requests)
    fake.enqueue(behaviour)
    handle = await worker.start("list")
    result, log = await finished_well(handle, expected)
    bodies = fake.requests[first:]
    for body in bodies:
        assert invariant_violations(openai_to_chat(body["messages"]), allow_open_tail=False) == []
    return result, log, bodies


MODEL_ERRORS = [
    ("malformed-body", "a malformed streamed body", Malformed(), "unparseable stream chunk"),
    (
        "empty-choices",
        'a JSON reply with "choices": []',
        HttpError(200, {"choices": []}),
        "unparseable reply (no choices[0].message)",
    ),
    ("http-401", "HTTP 401 (not retried)", unauthorized(), "HTTP 401: Incorrect API key"),
]


@pytest.mark.parametrize(
    ("case", "what", "behaviour", "fragment"), MODEL_ERRORS, ids=[c[0] for c in MODEL_ERRORS]
)
async def test_model_errors(
    model_rig: Any, record: Any, case: str, what: str, behaviour: Any, fragment: str
) -> None:
    row = record("bad_input", f"the model answers {what}")
    row.did(f"the fake OpenAI server answers {what}")
    result, log, bodies = await model_run(model_rig, behaviour, "error")
    errors = [e.message for e in log if e.type == "error"]
    row.saw(f"error event: {errors}; finish_reason={result.finish_reason}; {len(bodies)} request")
    assert len(errors) == 1 and fragment in errors[0] and result.error == errors[0]
    assert len(bodies) == 1
    row.checked("not retried; one `error` event; run finishes `error` (the workflow does not fail)")


MODEL_CALLS: list[tuple[str, str, Any, list[str]]] = [
    (
        "unknown-tool",
        "an unknown tool",
        tool_calls(("call_1", "format_disk", '{"drive": "C"}')),
        ["Tool 'format_disk' not found"],
    ),
    (
        "invalid-arguments",
        "tool arguments that are not JSON",
        tool_calls(("call_1", "read_file", '{"path": "notes.txt"')),
        ["\"Invalid tool arguments: Expecting ',' delimiter"],
    ),
    (
        "arguments-not-object",
        "tool arguments that are a JSON array",
        tool_calls(("call_1", "list_dir", '["."]')),
        ["Invalid tool arguments: expected a JSON object, got list"],
    ),
    (
        "path-escapes",
        "path escapes (../../etc/passwd, /etc/passwd, a symlink out)",
        tool_calls(
            ("call_1", "read_file", '{"path": "../../etc/passwd"}'),
            ("call_2", "read_file", '{"path": "/etc/passwd"}'),
            ("call_3", "read_file", '{"path": "escape/passwd"}'),
            ("call_4", "list_dir", '{"path": "escape"}'),
        ),
        [
            "path '../../etc/passwd' is outside the workspace; refused",
            "path '/etc/passwd' is outside the workspace; refused",
            "path 'escape/passwd' is outside the workspace; refused",
            "path 'escape' is outside the workspace; refused",
        ],
    ),
    (
        "duplicate-call-ids",
        "two tool calls with the same id",
        tool_calls(("dup", "list_dir", '{"path": "."}'), ("dup", "list_dir", '{"path": "."}')),
        ['"ok": true', '"ok": true'],
    ),
]


@pytest.mark.parametrize(
    ("case", "what", "behaviour", "fragments"), MODEL_CALLS, ids=[c[0] for c in MODEL_CALLS]
)
async def test_model_bad_tool_calls(
    model_rig: Any, record: Any, case: str, what: str, behaviour: Any, fragments: list[str]
) -> None:
    row = record("bad_input", f"the model sends {what}")
    worker, _ = model_rig
    link = worker.workspace / "escape"
    if case == "path-escapes" and not link.is_symlink():
        link.symlink_to("/etc")
    row.did(f"the fake OpenAI server answers with {what}; then the scripted default")
    result, _log, bodies = await model_run(model_rig, behaviour, "stop")
    tool = [m for m in result.messages if m.role == "tool"]
    assert len(tool) == len(fragments)
    for message, fragment in zip(tool, fragments, strict=True):
        assert fragment in message.content, (fragment, message.content)
        if case != "duplicate-call-ids":
            assert '"ok": false' in message.content or "not found" in message.content
    row.saw("tool messages: " + " | ".join(m.content[:110] for m in tool))
    if case == "duplicate-call-ids":
        ids = [m.tool_call_id for m in tool]
        row.saw(f"tool_call_ids: {ids}")
        assert ids == ["dup", "dup#2"]
    row.checked("each call got exactly one tool message telling the model what went wrong")
    row.checked(f"the loop went on: {len(bodies)} requests, invariant held, run finished `stop`")


async def test_model_fifty_tool_calls(model_rig: Any, record: Any) -> None:
    row = record("bad_input", "the model sends fifty tool calls in one message")
    calls = [(f"call_{i}", "list_dir", '{"path": "."}') for i in range(50)]
    row.did("the fake OpenAI server answers with 50 list_dir calls in one message")
    result, log, bodies = await model_run(model_rig, tool_calls(*calls), "stop")
    tool = [m for m in result.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool] == [c[0] for c in calls]
    assert all('"ok": true' in m.content for m in tool)
    assert len(bodies) == 2 and len(bodies[1]["messages"]) == 52
    row.saw(f"50 tool messages in call order; 2 requests; {len(log)} events")
    row.checked("all fifty ran (in parallel) and were answered in call order; run finished `stop`")
