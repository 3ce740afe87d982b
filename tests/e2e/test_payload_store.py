"""Big conversations through Temporal's external payload storage, with every piece its own
process: the real `python worker.py` (scripted model, real tools), `python -m starter`, the codec
server and the `temporal` CLI, all with the same `AGENT_PAYLOAD_STORE`. The file store is a
folder of the test; the S3 store is a real S3-compatible server process (`moto_server`), started
and stopped by its process id, with a bucket the test creates. A run whose input (and so its
conversation, its `messages` query and its result) is over 256 KiB completes; history holds
references; the store holds the payloads, sealed when a key is set; a store that stops answering
leaves the run open, it goes on once the store is back, and the worker logs one line for it."""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import RawValue

from runtime.codec import ENCODING, ENV_KEY
from runtime.connect import data_converter
from runtime.payload_store import ENV_S3_ENDPOINT, ENV_STORE
from tests.cli.test_starter import Result, seed, starter
from tests.e2e.s3_server import AWS_ENV, S3Server, in_thread, s3_server
from tests.e2e.test_e2e import Process, clean_env, spawn
from tests.e2e.test_encryption_e2e import new_key, payloads, readable, temporal_cli
from tests.helpers import wait_until
from workflows.model import AgentRunInput, AgentRunResult, ChatMessage
from workflows.run.agent import AgentWorkflow

MARKER = "plaintext-marker"
PROMPT = "Please list the workspace. " + f"{MARKER} " * 20_000  # 340 KB: over 256 KiB
REFERENCE_TYPE = "temporal.api.sdk.v1.ExternalStorageReference"
BUCKET = "agent-payloads"


@dataclass
class Deployment:
    """One deployment's environment (a dev server, a task queue, a store) and its processes."""

    client: Client
    base: dict[str, str]
    started: list[Process]

    @property
    def address(self) -> str:
        return self.base["TEMPORAL_ADDRESS"]

    def env(self, **extra: str) -> dict[str, str]:
        return {**self.base, **extra}

    def reader(self, **extra: str) -> Client:
        """An in-process client with this deployment's settings."""
        return Client(
            self.client.service_client,
            namespace="default",
            data_converter=data_converter(self.env(**extra)),
        )

    async def worker(self, **extra: str) -> Process:
        process = await spawn("worker", "worker.py", env=self.env(**extra))
        self.started.append(process)
        await process.wait_for_line(r"^worker ready ")
        return process

    async def codec_server(self, **extra: str) -> str:
        process = await spawn(
            "codec-server", "-m", "starter", "codec-server", "--port", "0", env=self.env(**extra)
        )
        self.started.append(process)
        match = await process.wait_for_line(r"^codec server at (http://127\.0\.0\.1:\d+) ")
        return match.group(1)

    async def cli(self, *args: str, **extra: str) -> Result:
        return await starter(*args, env=self.env(**extra))

    async def start_big_run(self, **extra: str) -> WorkflowHandle[Any, AgentRunResult]:
        return await self.reader(**extra).start_workflow(
            AgentWorkflow.run,
            AgentRunInput(messages=[ChatMessage.user(PROMPT)]),
            id=f"store-{uuid.uuid4().hex[:8]}",
            task_queue=self.base["AGENT_TASK_QUEUE"],
        )


@pytest.fixture
async def deployment(client: Client, tmp_path: Path) -> AsyncIterator[Deployment]:
    workspace = seed(tmp_path / "workspace")
    base = clean_env()  # no AGENT_* from outside: each process gets exactly what it is given
    base.update(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_TASK_QUEUE=f"store-{uuid.uuid4().hex[:8]}",
        AGENT_WORKSPACE=str(workspace),
        AGENT_STATE_DIR=str(tmp_path / "state"),
    )
    d = Deployment(client, base, [])
    try:
        yield d
    finally:
        for process in reversed(d.started):
            await process.stop()


@pytest.fixture
def moto(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """A fresh `moto_server` process with the bucket BUCKET; this process gets the fake AWS
    credentials too (its in-process clients read the store)."""
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    with s3_server(tmp_path / "moto.log") as server:
        server.create_bucket(BUCKET)
        yield server


async def show(d: Deployment, workflow_id: str, *args: str) -> tuple[dict[str, Any], str]:
    """`temporal workflow show -o json`: the document and its text."""
    shown = await temporal_cli(
        d.address, "workflow", "show", "-w", workflow_id, "-o", "json", *args
    )
    assert shown.code == 0, shown
    return json.loads(shown.stdout), shown.stdout


def references(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every reference to a stored payload in a history, where it sits → what it says."""
    found = {}
    for where, payload in payloads(document):
        metadata = {k: base64.b64decode(v).decode() for k, v in payload["metadata"].items()}
        if metadata.get("messageType") == REFERENCE_TYPE:
            assert metadata["encoding"] == "json/protobuf", where
            found[where] = json.loads(base64.b64decode(payload["data"]))
    return found


def stored_payload(data: bytes) -> Payload:
    payload = Payload()
    payload.ParseFromString(data)
    return payload


async def finished(handle: WorkflowHandle[Any, AgentRunResult]) -> AgentRunResult:
    result = await handle.result()
    assert result.finish_reason == "stop", result.error
    assert result.messages[0].content == PROMPT
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "assistant"]
    return result


def where_the_input_is(found: dict[str, dict[str, Any]]) -> dict[str, Any]:
    started = [v for w, v in found.items() if "workflowExecutionStartedEventAttributes" in w]
    completed = [v for w, v in found.items() if "workflowExecutionCompletedEventAttributes" in w]
    assert len(started) == 1 and len(completed) == 1, found
    return started[0]


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "encrypted"])
async def test_a_big_run_on_the_file_store(
    deployment: Deployment, tmp_path: Path, sealed: bool
) -> None:
    folder = tmp_path / "store"
    folder.mkdir()
    settings = {ENV_STORE: folder.as_uri()}
    if sealed:
        settings[ENV_KEY] = new_key()
    await deployment.worker(**settings)
    handle = await deployment.start_big_run(**settings)
    await finished(handle)

    # History holds references, never the conversation.
    document, _ = await show(deployment, handle.id)
    assert MARKER not in readable(document)
    found = references(document)
    started = where_the_input_is(found)
    assert started["driverName"] == "agent.file"
    assert started["claimData"]["path"].startswith(
        f"v0/ns/default/wt/AgentWorkflow/wi/{handle.id}/"
    )
    for reference in found.values():
        assert (folder / reference["claimData"]["path"]).is_file(), reference

    # The folder holds the payloads: sealed with a key, the prompt in plain text without one.
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert len(files) >= len(found) >= 2, files
    assert not [p for p in files if p.name.endswith(".partial")]
    for path in files:
        data = path.read_bytes()
        assert (MARKER.encode() in data) is not sealed, path
        if sealed:
            assert stored_payload(data).metadata["encoding"] == ENCODING, path

    # Every program needs the setting: the starter reads the run with it, not without it.
    history = await deployment.cli("history", handle.id, **settings)
    assert history.code == 0 and "Please list the workspace." in history.stdout, history.stderr
    keyed = {ENV_KEY: settings[ENV_KEY]} if sealed else {}
    without = await deployment.cli("history", handle.id, **keyed)
    assert without.code == 1 and without.stderr.count("\n") == 1, without
    assert "external storage is not configured" in without.stderr, without

    # The codec server with the same setting shows the UI and the CLI the payloads themselves.
    endpoint = await deployment.codec_server(**settings)
    decoded, _ = await show(deployment, handle.id, "--codec-endpoint", endpoint)
    assert PROMPT in readable(decoded)
    assert references(decoded) == {}
    # What `temporal workflow show` prints for a stored result: the reference (it is never
    # sealed, so it reads the same with a key), and through the codec server the result itself.
    plain = await temporal_cli(deployment.address, "workflow", "show", "-w", handle.id)
    assert plain.code == 0, plain
    assert f'"_protoMessageType":"{REFERENCE_TYPE}"' in plain.stdout
    assert '"driverName":"agent.file"' in plain.stdout and MARKER not in plain.stdout
    through = await temporal_cli(
        deployment.address, "workflow", "show", "-w", handle.id, "--codec-endpoint", endpoint
    )
    assert through.code == 0 and MARKER in through.stdout, through
    assert REFERENCE_TYPE not in through.stdout


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "encrypted"])
async def test_a_big_run_on_an_s3_store(
    deployment: Deployment, moto: S3Server, sealed: bool
) -> None:
    settings = {ENV_STORE: f"s3://{BUCKET}/agent/payloads", ENV_S3_ENDPOINT: moto.url, **AWS_ENV}
    if sealed:
        settings[ENV_KEY] = new_key()
    await deployment.worker(**settings)
    handle = await deployment.start_big_run(**settings)
    await finished(handle)

    document, _ = await show(deployment, handle.id)
    assert MARKER not in readable(document)
    found = references(document)
    started = where_the_input_is(found)
    assert started["driverName"] == "aws.s3driver"
    assert started["claimData"]["bucket"] == BUCKET
    objects = await in_thread(moto.objects, BUCKET)
    for reference in found.values():
        assert "agent/payloads/" + reference["claimData"]["key"] in objects, reference
    assert objects and all(k.startswith("agent/payloads/v0/ns/default/") for k in objects)
    for key, data in objects.items():
        assert (MARKER.encode() in data) is not sealed, key
        if sealed:
            assert stored_payload(data).metadata["encoding"] == ENCODING, key

    history = await deployment.cli("history", handle.id, **settings)
    assert history.code == 0 and "Please list the workspace." in history.stdout, history.stderr


async def test_a_store_that_stops_answering_leaves_the_run_open_and_one_log_line(
    deployment: Deployment, moto: S3Server
) -> None:
    # One attempt per S3 call, so each workflow task attempt fails within the read timeout.
    settings = {
        ENV_STORE: f"s3://{BUCKET}/agent",
        ENV_S3_ENDPOINT: moto.url,
        **AWS_ENV,
        "AWS_MAX_ATTEMPTS": "1",
    }
    handle = await deployment.start_big_run(**settings)  # its input is in the store now
    moto.pause()
    try:
        worker = await deployment.worker(**settings)

        async def retried() -> bool:
            described = await deployment.client.get_workflow_handle(handle.id).describe()
            return described.raw_description.pending_workflow_task.attempt >= 3

        await wait_until(retried, timeout=150, interval=1.0)
        described = await deployment.client.get_workflow_handle(handle.id).describe()
        assert described.status == WorkflowExecutionStatus.RUNNING
    finally:
        moto.resume()
    await finished(handle)  # the run goes on once the store answers again
    assert await worker.stop() == 0
    output = "\n".join([*worker.lines, await worker.rest_of_stdout()])
    # Three attempts or more failed; the worker's own line comes once. The SDK's core adds its
    # report of the first failed attempt (core reports no later attempt): nothing per retry.
    naming = [line for line in output.splitlines() if "could not give back a payload" in line]
    ours = [line for line in naming if "waits for the payload store" in line]
    assert len(ours) == 1, output
    assert ours[0].startswith(f"run {described.run_id} waits for the payload store")
    assert f"payload store s3://{BUCKET}/agent could not give back a payload" in ours[0]
    core = [line for line in naming if "Failing workflow task" in line]
    assert len(core) <= 1 and len(naming) == len(ours) + len(core), output
    assert "Traceback" not in output and MARKER not in output


async def test_a_store_setting_that_cannot_be_used_stops_every_program_with_one_line(
    deployment: Deployment, tmp_path: Path
) -> None:
    for bad, needle in (
        ("ftp://example/x", "not file:///PATH or s3://BUCKET/PREFIX"),
        (f"file://{tmp_path}/missing", "does not exist"),
        ("s3://No_Such_Bucket!/x", "bucket name"),
    ):
        worker = await spawn("worker", "worker.py", env=deployment.env(**{ENV_STORE: bad}))
        code = await worker.proc.wait()
        output = (await worker.rest_of_stdout()).strip()
        assert code == 2 and output.count("\n") == 0, output
        assert ENV_STORE in output and needle in output, output
        for args in (["pending"], ["codec-server", "--port", "0"]):
            result = await deployment.cli(*args, **{ENV_STORE: bad})
            assert result.code == 2, result
            assert result.stderr.count("\n") == 1 and ENV_STORE in result.stderr, result
    assert os.environ.get(ENV_STORE) is None  # nothing leaked into this process


async def test_a_reference_copied_into_another_workflow_is_not_loaded(
    deployment: Deployment, moto: S3Server
) -> None:
    """A client with neither the store nor a codec copies a finished run's input reference (a
    few hundred bytes of history) into a start of its own: the worker does not load another
    workflow's stored conversation for it; the start is refused as the JSON it is."""
    settings = {ENV_STORE: f"s3://{BUCKET}/agent/payloads", ENV_S3_ENDPOINT: moto.url, **AWS_ENV}
    worker = await deployment.worker(**settings)
    original = await deployment.start_big_run(**settings)
    await finished(original)

    bare = Client(deployment.client.service_client, namespace="default")  # no store, no codec
    history = await bare.get_workflow_handle(original.id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    [reference] = started.input.payloads
    assert reference.metadata["messageType"].decode() == REFERENCE_TYPE
    copied = await bare.start_workflow(
        "AgentWorkflow",
        RawValue(reference),
        id=f"store-copy-{uuid.uuid4().hex[:8]}",
        task_queue=deployment.base["AGENT_TASK_QUEUE"],
    )
    with pytest.raises(WorkflowFailureError) as refused:
        await deployment.reader(**settings).get_workflow_handle(copied.id).result()
    assert "InvalidAgentRunInput" in str(refused.value.cause)
    await worker.wait_for_line(r"names a payload stored for another workflow.*not loaded")
    # The run it was copied from still reads, with the store, for the workflow it belongs to.
    again = await deployment.reader(**settings).get_workflow_handle(original.id).result()
    assert again["messages"][0]["content"] == PROMPT
