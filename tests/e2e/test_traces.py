"""Traces of a real run, received by a real OTLP/HTTP endpoint the test starts: the real
`python worker.py` and `python -m starter` commands with OTEL_EXPORTER_OTLP_ENDPOINT, the fake
OpenAI-compatible server over HTTP, and a run with a person's approval and a tool call.

The run is one trace: the starter's `StartWorkflow` span is its root, and every span of the
worker (the workflow's, the activities', the model calls' with their GenAI attributes, the tool
call's with its name and outcome, the answer's `HandleUpdate`) hangs under it, down to
`CompleteWorkflow`. The arguments and results appear in no span unless AGENT_TRACE_CONTENT=true.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from tests.cli.test_starter import seed, starter
from tests.e2e.test_e2e import clean_env, spawn
from tests.fake_openai import FakeOpenAI, Reply
from tests.helpers import wait_for_phase, wait_until
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan

MARKER = "zebra-archive-7f3a"
"""The folder the model asks to delete: in the arguments and the result, never in a span
unless content is asked for."""


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


def _by_name(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name]


def _one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = _by_name(spans, name)
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


@pytest.mark.parametrize("content", [False, True], ids=["no-content", "content"])
async def test_one_trace_per_run(
    client: Client, otlp: OtlpReceiver, tmp_path: Path, content: bool
) -> None:
    workspace = seed(tmp_path / "workspace")
    (workspace / MARKER).mkdir()
    (workspace / MARKER / "a.txt").write_text("old")
    env = clean_env()
    env.update(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_TASK_QUEUE=f"traces-{uuid.uuid4().hex[:8]}",
        AGENT_WORKSPACE=str(workspace),
        AGENT_STATE_DIR=str(tmp_path / "state"),
        LLM_MODEL="fake-model",
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="100",
        AGENT_TRACE_CONTENT="true" if content else "false",
    )
    workflow_id = f"traced-{uuid.uuid4().hex[:8]}"
    with FakeOpenAI() as fake:
        fake.enqueue(
            Reply(
                tool_calls=[("call_1", "delete_path", f'{{"path": "{MARKER}"}}')], usage=(90, 14)
            ),
            Reply(text="Deleted the folder.", usage=(130, 6)),
        )
        env["LLM_BASE_URL"] = fake.base_url
        worker = await spawn("worker", "worker.py", env=env)
        try:
            await worker.wait_for_line(r"^worker ready ", timeout=60)
            # `starter run` follows the run live (the stream's long polls, its queries) while
            # another `starter` command answers.
            follower = await spawn(
                "starter run",
                "-m",
                "starter",
                "run",
                "--id",
                workflow_id,
                f"Delete {MARKER}",
                env=env,
            )
            handle = client.get_workflow_handle(workflow_id)
            await wait_until(lambda: _started(client, workflow_id))
            await wait_for_phase(handle, "awaiting_approval")
            approved = await starter("approve", workflow_id, "call_1", "--yes", env=env)
            assert approved.code == 0, approved
            await handle.result()
            assert await asyncio.wait_for(follower.proc.wait(), 30) == 0
            assert "Deleted the folder." in await follower.rest_of_stdout()
        finally:
            assert await worker.stop() == 0  # SIGTERM: the worker sends its last spans
    assert not (workspace / MARKER).exists()
    await wait_until(lambda: _one_or_none(otlp.spans(), "CompleteWorkflow:AgentWorkflow"))

    spans = otlp.spans()
    root = _one(spans, "StartWorkflow:AgentWorkflow")  # `starter run`
    assert root.parent_id == "" and root.service == "durable-agent-client"
    trace = [s for s in spans if s.trace_id == root.trace_id]
    ids = {s.span_id: s for s in trace}
    # A tree: every span of the trace reaches the root through its parents.
    for span in trace:
        hops, current = 0, span
        while current.parent_id:
            assert current.parent_id in ids, f"{current.name} hangs off a span not in the trace"
            current, hops = ids[current.parent_id], hops + 1
            assert hops < 10
        assert current is root, span.name

    worker_spans = [s for s in trace if s.service == "durable-agent-worker"]
    assert {s.service for s in trace} == {"durable-agent-client", "durable-agent-worker"}
    for name in (
        "RunWorkflow:AgentWorkflow",
        "HandleUpdate:submit_approval",
        "StartActivity:execute_tool",
        "RunActivity:execute_tool",
        "CompleteWorkflow:AgentWorkflow",
    ):
        assert _one(worker_spans, name).parent_id, name
    assert len(_by_name(worker_spans, "RunActivity:call_llm")) == 2
    # The answer came from another program (`starter approve`): its span is linked.
    answer = _one(worker_spans, "HandleUpdate:submit_approval")
    assert answer.parent_id == root.span_id and answer.links

    # The model calls: GenAI attributes, the fake server's usage, inside their activity.
    chats = sorted(_by_name(trace, "chat fake-model"), key=lambda s: s.attributes["agent.round"])
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in chats] == [90, 130]
    assert [c.attributes["gen_ai.usage.output_tokens"] for c in chats] == [14, 6]
    for chat in chats:
        assert chat.attributes["gen_ai.request.model"] == "fake-model"
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert ids[chat.parent_id].name == "RunActivity:call_llm"
    assert chats[0].attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]

    # The tool call: its name and outcome, inside its activity.
    tool = _one(trace, "execute_tool delete_path")
    assert ids[tool.parent_id].name == "RunActivity:execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "delete_path"
    assert tool.attributes["gen_ai.tool.call.id"] == "call_1"
    assert tool.attributes["agent.tool.outcome"] == "ok"

    # The live stream's traffic and the follower's polls are no part of the tree.
    assert not [s for s in spans if "__temporal_" in s.name]
    # Outside the run's trace: only `starter approve`'s answer (its queries are not traced).
    assert [s.name for s in spans if s.trace_id != root.trace_id] == [
        "StartWorkflowUpdate:submit_approval"
    ]

    everything = repr([(s.name, s.attributes) for s in spans])
    if content:
        assert MARKER in str(tool.attributes["gen_ai.tool.call.arguments"])
        assert '"ok": true' in str(tool.attributes["gen_ai.tool.call.result"])
        assert MARKER in str(chats[0].attributes["gen_ai.input.messages"])
        assert "Deleted the folder." in str(chats[1].attributes["gen_ai.output.messages"])
    else:
        assert MARKER not in everything, "an argument or a message reached a span"
        assert "Deleted the folder." not in everything


async def _started(client: Client, workflow_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return False
    return True


def _one_or_none(spans: list[ReceivedSpan], name: str) -> bool:
    return len(_by_name(spans, name)) == 1
