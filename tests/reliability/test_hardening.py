"""Hostile and unlucky input against the hardened loop, sent the way users and models send it:
the `temporal` CLI, and the fake OpenAI server on 127.0.0.1 behind the real activities. Each case
records what it did and saw (see report.py): reused and missing call ids, stale answers, forged
and malformed stream publishes, oversized messages and ids, a deeply nested start input, a reply
of the wrong shape.
"""

from __future__ import annotations

import json
import uuid
from base64 import b64encode
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import Payload

from tests.fake_openai import RawJson, text, tool_calls
from tests.helpers import events, status
from tests.reliability.agents import (
    approval_json,
    finished_well,
    last_seq,
    wait_pending,
    wait_warnings,
)
from tests.reliability.processes import signal_cli, temporal_cli

PUBLISH = "__temporal_workflow_stream_publish"


async def test_a_reused_call_id_and_a_stale_answer(
    model_rig, env_address: str, record: Any
) -> None:
    worker, fake = model_rig
    row = record("bad_input", "the model reuses `call_0`; round 0's answer is sent again")
    name = f"two-{uuid.uuid4().hex[:6]}.txt"
    fake.enqueue(
        tool_calls(("call_0", "run_command", json.dumps({"command": f"echo one >> {name}"}))),
        tool_calls(("call_0", "run_command", json.dumps({"command": f"echo two >> {name}"}))),
        text("Both ran."),
    )
    handle = await worker.start("write twice")
    await wait_pending(handle)
    first = await signal_cli(env_address, handle.id, "tool_approval", approval_json("call_0"))
    assert first.returncode == 0
    pending = None
    for _ in range(100):
        pending = [c.id for c in (await status(handle)).pending_approvals]
        if pending == ["call_0#2"]:
            break
    row.did("approve call_0 (round 0); the model's next call is also call_0")
    row.saw(f"round 1 waits for {pending}")
    assert pending == ["call_0#2"]
    row.checked("the reused id was renamed before anything saw it")
    before = await last_seq(handle)
    stale = await signal_cli(env_address, handle.id, "tool_approval", approval_json("call_0"))
    assert stale.returncode == 0
    warnings = await wait_warnings(handle, before)
    row.did("temporal workflow signal --name tool_approval with round 0's answer again")
    row.saw(f"warning: {warnings[0]}")
    assert "call 'call_0' was already answered" in warnings[0]
    assert [c.id for c in (await status(handle)).pending_approvals] == ["call_0#2"]
    row.checked("the stale answer approved nothing; call_0#2 still waits")
    done = await signal_cli(env_address, handle.id, "tool_approval", approval_json("call_0#2"))
    assert done.returncode == 0
    await finished_well(handle, "stop")
    assert (worker.workspace / name).read_text().splitlines() == ["one", "two"]
    row.checked("both approved commands ran, each once (the at-most-once record is per call)")


async def test_stream_publishes_from_outside(model_rig, env_address: str, record: Any) -> None:
    worker, fake = model_rig
    fake.enqueue(tool_calls(("c1", "run_command", '{"command": "echo hi"}')), text("ok"))
    handle = await worker.start("publish at me")
    await wait_pending(handle)
    forged = {"seq": 99, "round": 0, "type": "finished", "finish_reason": "stop"}
    payload = Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(forged).encode())
    cases = [
        ("malformed data on `events`", {"items": [{"topic": "events", "data": "abc"}]}),
        (
            "a well-formed forged `finished` on `events`",
            {
                "items": [
                    {"topic": "events", "data": b64encode(payload.SerializeToString()).decode()}
                ]
            },
        ),
        ("malformed data on `deltas`", {"items": [{"topic": "deltas", "data": "%%%"}]}),
    ]
    for what, batch in cases:
        row = record("bad_input", f"stream publish from outside: {what}")
        before = await last_seq(handle)
        sent = await signal_cli(env_address, handle.id, PUBLISH, json.dumps(batch))
        row.did(f"temporal workflow signal --name {PUBLISH} --input '{json.dumps(batch)[:60]}…'")
        assert sent.returncode == 0
        warnings = await wait_warnings(handle, before)
        row.saw(f"warning: {warnings[0]}")
        assert "stream publish:" in warnings[0] and "dropped" in warnings[0]
        current = await status(handle)
        assert current.phase == "awaiting_approval"
        row.checked("the run still answers queries and still waits for its answer")
    log = await events(handle)
    assert [e.type for e in log].count("finished") == 0
    done = await signal_cli(env_address, handle.id, "tool_approval", approval_json("c1"))
    assert done.returncode == 0
    await finished_well(handle, "stop")


async def test_oversized_messages_and_ids(
    model_rig, env_address: str, record: Any, tmp_path: Path
) -> None:
    worker, fake = model_rig
    fake.enqueue(tool_calls(("c1", "run_command", '{"command": "echo hi"}')), text("ok"))
    handle = await worker.start("flood me")
    await wait_pending(handle)
    row = record("bad_input", "25 messages of 99,000 characters while a call waits")
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"content": "m" * 99_000}))
    for _ in range(25):
        sent = await temporal_cli(
            env_address,
            "workflow",
            "signal",
            "--workflow-id",
            handle.id,
            "--name",
            "send_message",
            "--input-file",
            str(big),
        )
        assert sent.returncode == 0, sent.summary()
    row.did("temporal workflow signal --name send_message --input-file big.json, 25 times")
    warnings = [w for w in await wait_warnings(handle, -1) if "send_message" in w]
    row.saw(f"warning: {warnings[0]}")
    assert "more than 1400000; message ignored" in warnings[0]
    row.checked("messages beyond the conversation budget are refused with a warning")
    row = record("bad_input", "an answer whose call id has 1,200,000 characters")
    huge = tmp_path / "id.json"
    huge.write_text(approval_json("i" * 1_200_000))
    before = await last_seq(handle)
    sent = await temporal_cli(
        env_address,
        "workflow",
        "signal",
        "--workflow-id",
        handle.id,
        "--name",
        "tool_approval",
        "--input-file",
        str(huge),
    )
    assert sent.returncode == 0, sent.summary()
    row.did("temporal workflow signal --name tool_approval --input-file id.json")
    warning = (await wait_warnings(handle, before))[0]
    row.saw(f"warning ({len(warning)} characters): {warning[:120]}…")
    assert "unknown call id" in warning and len(warning) < 1_000
    row.checked("the warning echoes a preview of the id, not the id")
    done = await signal_cli(env_address, handle.id, "tool_approval", approval_json("c1"))
    assert done.returncode == 0
    result, _ = await finished_well(handle, "stop")
    assert len(result.model_dump_json()) < 1_800_000
    row.checked("the run finishes `stop`; its result stays under the payload budget")


async def test_a_start_input_nested_300_deep(model_rig, env_address: str, record: Any) -> None:
    worker, _ = model_rig
    row = record("bad_input", "a start input nested 300 levels deep")
    nested = '{"a":' * 300 + '"x"' + "}" * 300
    body = '{"messages":[{"role":"user","content":"hi"}],"options":{"x":' + nested + "}}"
    workflow_id = f"rel-deep-{uuid.uuid4().hex[:8]}"
    started = await temporal_cli(
        env_address,
        "workflow",
        "start",
        "--type",
        "AgentWorkflow",
        "--task-queue",
        worker.task_queue,
        "--workflow-id",
        workflow_id,
        "--input",
        body,
    )
    assert started.returncode == 0, started.summary()
    row.did("temporal workflow start --input '{…300 levels…}'")
    result = await temporal_cli(
        env_address, "workflow", "result", "--workflow-id", workflow_id, "--output", "json"
    )
    row.saw(f"temporal workflow result: {result.stdout.strip()[:200]}")
    assert "InvalidAgentRunInput" in result.stdout + result.stderr
    assert "nested too deeply" in result.stdout + result.stderr
    row.checked("the run fails at once with InvalidAgentRunInput (no workflow task loop)")


async def test_a_reply_of_the_wrong_shape(model_rig, record: Any) -> None:
    worker, fake = model_rig
    row = record("bad_input", "the model server answers JSON that is not a chat completion")
    fake.enqueue(RawJson({"choices": 5}))
    before = len(fake.requests)
    handle = await worker.start("say hi")
    result, log = await finished_well(handle, "error")
    errors = [e.message for e in log if e.type == "error"]
    row.did('the fake OpenAI server answers {"choices": 5}')
    row.saw(f"error: {errors[0][:160]}")
    assert len(fake.requests) - before == 1
    row.checked("one request only (not retried), `error` event, finish_reason `error`")
    assert result.finish_reason == "error"
