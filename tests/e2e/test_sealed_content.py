"""With encryption on and no AGENT_TRACE_CONTENT, run content stays sealed even when it is in a
failure: the real `python worker.py` with a key and OTEL_EXPORTER_OTLP_ENDPOINT, a real OTLP
receiver, and the fake OpenAI-compatible server answering HTTP 400 with an error body that
quotes the prompt (as providers do). The prompt is in no span and nowhere in the worker's
output; a key holder still reads the provider's whole error in the run's result."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from runtime.codec import ENV_KEY
from runtime.connect import data_converter
from tests.cli.test_starter import seed
from tests.e2e.test_e2e import clean_env, spawn
from tests.fake_openai import FakeOpenAI, HttpError, Slow
from tests.helpers import events, wait_until
from tests.otlp_receiver import OtlpReceiver
from workflows.model import AgentRunInput, ChatMessage

SECRET = f"the-launch-code-is-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


async def test_a_provider_error_quoting_the_prompt_stays_sealed(
    client: Client, otlp: OtlpReceiver, tmp_path: Path
) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    env = clean_env()
    env.update(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_TASK_QUEUE=f"sealed-content-{uuid.uuid4().hex[:8]}",
        AGENT_WORKSPACE=str(seed(tmp_path / "workspace")),
        AGENT_STATE_DIR=str(tmp_path / "state"),
        AGENT_ENCRYPTION_KEY=key,
        LLM_MODEL="fake-model",
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    quoted = {"error": {"message": f"Invalid prompt: '{SECRET}' is not allowed", "type": "bad"}}
    keyed = Client(
        client.service_client,
        namespace="default",
        data_converter=data_converter({ENV_KEY: key}),
    )
    with FakeOpenAI() as fake:
        fake.enqueue(HttpError(400, quoted))
        env["LLM_BASE_URL"] = fake.base_url
        worker = await spawn("worker", "worker.py", env=env)
        try:
            await worker.wait_for_line(r"^worker ready ", timeout=60)
            handle = await keyed.start_workflow(
                "AgentWorkflow",
                AgentRunInput(messages=[ChatMessage.user(f"Say {SECRET}")]),
                id=f"sealed-content-{uuid.uuid4().hex[:8]}",
                task_queue=env["AGENT_TASK_QUEUE"],
            )
            result = await handle.result()
        finally:
            assert await worker.stop() == 0  # SIGTERM: the worker sends its last spans
        output = "\n".join(worker.lines) + await worker.rest_of_stdout()

    # The key holder reads the provider's whole answer in the run's result.
    assert result["finish_reason"] == "error"
    assert SECRET in result["error"], result["error"]
    # Nothing else does: not the trace collector, not the worker's log.
    await wait_until(lambda: any(s.name == "RunActivity:call_llm" for s in otlp.spans()))
    spans = otlp.spans()
    failed = [s for s in spans if s.name == "RunActivity:call_llm"]
    assert failed and all(s.status == 2 for s in failed)  # the failure is traced, as a failure
    assert [s.name for s in spans if SECRET in s.text] == []
    assert SECRET not in output, output


async def test_live_text_reaches_a_sealed_run(client: Client, tmp_path: Path) -> None:
    """The worker's own publishes of live model text are sealed for the run and the stream's
    signal, so a sealed run takes them (none is refused as bound elsewhere)."""
    key = base64.b64encode(os.urandom(32)).decode()
    env = clean_env()
    env.update(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_TASK_QUEUE=f"sealed-live-{uuid.uuid4().hex[:8]}",
        AGENT_WORKSPACE=str(seed(tmp_path / "workspace")),
        AGENT_STATE_DIR=str(tmp_path / "state"),
        AGENT_ENCRYPTION_KEY=key,
        LLM_MODEL="fake-model",
    )
    keyed = Client(
        client.service_client, namespace="default", data_converter=data_converter({ENV_KEY: key})
    )
    with FakeOpenAI() as fake:
        fake.enqueue(Slow(chunks=30, delay=0.1))  # 3 s of text: published while it comes
        env["LLM_BASE_URL"] = fake.base_url
        worker = await spawn("worker", "worker.py", env=env)
        try:
            await worker.wait_for_line(r"^worker ready ", timeout=60)
            handle = await keyed.start_workflow(
                "AgentWorkflow",
                "Tell me a long story",
                id=f"sealed-live-{uuid.uuid4().hex[:8]}",
                task_queue=env["AGENT_TASK_QUEUE"],
            )
            result = await handle.result()
            warnings = [e.message for e in await events(handle) if e.type == "warning"]
        finally:
            await worker.stop()
    assert result["finish_reason"] == "stop"
    history = await handle.fetch_history()
    published = [
        e
        for e in history.events
        if e.workflow_execution_signaled_event_attributes.signal_name.startswith("__temporal_")
    ]
    assert published, "the worker published live text"
    assert warnings == []
