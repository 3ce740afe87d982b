"""Encryption at rest with every piece its own process: the real `python worker.py` (the scripted
model, the real tools in a seeded workspace), `python -m starter` commands, the codec server
`python -m starter codec-server` and the real `temporal` CLI reading the history with and without
`--codec-endpoint`. Then key rotation across a worker restart, a worker with the wrong key, and a
key that cannot be used."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from runtime.codec import ENCODING, ENV_KEY, ENV_KEYS, KEY_ID_METADATA, EncryptionCodec, parse_keys
from runtime.connect import data_converter
from tests.cli.test_starter import Result, seed, starter
from tests.e2e.test_e2e import Process, clean_env, spawn
from tests.helpers import status, wait_for_phase, wait_until
from workflows.versions import PATCHES

TEMPORAL = str(Path(sys.executable).parent / "temporal")
PROMPT = "Please delete the logs folder"
SECRETS = [
    PROMPT,  # the prompt
    '{"path": "logs"}',  # the tool call's arguments (as the model wrote them)
    "notes.txt",  # the tools' output: list_dir names the workspace's files
    '"kind": "dir"',  # and delete_path says what it deleted
    "Deleted logs. It was a folder",  # the model's text
    "delete_path",  # the tool's name, in the activity summaries and the current details
]


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings(v)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def readable(document: Any, depth: int = 0) -> str:
    """Every string of a JSON document, every base64 string decoded, every JSON text parsed (to
    a few levels: a tool's output is JSON inside a message inside a payload): all a reader sees."""
    out: list[str] = []
    for s in strings(document):
        out.append(s)
        texts = [s]
        try:
            texts.append(base64.b64decode(s, validate=True).decode("utf-8", "replace"))
            out.append(texts[-1])
        except (binascii.Error, ValueError):
            pass
        for text_ in texts:
            if depth < 3 and text_[:1] in ("{", "[", '"'):
                try:
                    out.append(readable(json.loads(text_), depth + 1))
                except ValueError:
                    pass
    return "\n".join(out)


def payloads(value: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every proto-JSON payload (an object with `metadata` and `data`) with where it sits."""
    if isinstance(value, dict):
        if isinstance(value.get("metadata"), dict) and "encoding" in value["metadata"]:
            yield path, value
        for k, v in value.items():
            yield from payloads(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from payloads(item, f"{path}[{i}]")


def meta(payload: dict[str, Any], key: str) -> str:
    return base64.b64decode(payload["metadata"].get(key, "")).decode()


async def temporal_cli(address: str, *args: str) -> Result:
    proc = await asyncio.create_subprocess_exec(
        TEMPORAL,
        *args,
        "--address",
        address,
        "--namespace",
        "default",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


@dataclass
class Site:
    """One deployment's environment: a dev server address, a task queue, a seeded workspace."""

    client: Client
    base: dict[str, str]
    workspace: Path
    started: list[Process]

    @property
    def address(self) -> str:
        return self.base["TEMPORAL_ADDRESS"]

    def env(self, **keys: str) -> dict[str, str]:
        return {**self.base, **keys}

    def reader(self, **keys: str) -> Client:
        """An in-process client with these keys (to wait for phases from outside)."""
        return Client(
            self.client.service_client,
            namespace="default",
            data_converter=data_converter(keys),
        )

    async def worker(self, **keys: str) -> Process:
        process = await spawn("worker", "worker.py", env=self.env(**keys))
        self.started.append(process)
        await process.wait_for_line(r"^worker ready ")
        return process

    async def codec_server(self, *args: str, **keys: str) -> str:
        process = await spawn(
            "codec-server",
            "-m",
            "starter",
            "codec-server",
            "--port",
            "0",
            *args,
            env=self.env(**keys),
        )
        self.started.append(process)
        match = await process.wait_for_line(r"^codec server at (http://127\.0\.0\.1:\d+) ")
        return match.group(1)

    async def cli(self, *args: str, **keys: str) -> Result:
        return await starter(*args, env=self.env(**keys))


@pytest.fixture
async def site(client: Client, tmp_path: Path) -> AsyncIterator[Site]:
    workspace = seed(tmp_path / "workspace")
    base = clean_env()  # no AGENT_* from outside: each process gets exactly the keys it is given
    base.update(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_TASK_QUEUE=f"enc-{uuid.uuid4().hex[:8]}",
        AGENT_WORKSPACE=str(workspace),
        AGENT_STATE_DIR=str(tmp_path / "state"),
    )
    s = Site(client, base, workspace, [])
    try:
        yield s
    finally:
        for process in reversed(s.started):
            await process.stop()


async def start_waiting(site: Site, workflow_id: str, **keys: str) -> None:
    started = await site.cli("run", "--no-follow", "--id", workflow_id, PROMPT, **keys)
    assert started.code == 0, started
    handle = site.reader(**keys).get_workflow_handle(workflow_id)
    st = await wait_for_phase(handle, "awaiting_approval")
    assert [c.id for c in st.pending_approvals] == ["call_2"]


def one_error_line(result: Result, *needles: str) -> None:
    assert result.code == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result
    for needle in needles:
        assert needle in lines[0], result


async def test_an_encrypted_run_and_what_the_cli_shows(site: Site) -> None:
    key = {ENV_KEY: new_key()}
    await site.worker(**key)
    endpoint = await site.codec_server(**key)
    workflow_id = f"enc-{uuid.uuid4().hex[:8]}"
    await start_waiting(site, workflow_id, **key)
    approved = await site.cli("approve", workflow_id, "call_2", "--approver", "ann", "--yes", **key)
    assert approved.code == 0, approved
    watched = await site.cli("watch", workflow_id, **key)
    assert watched.code == 0, watched
    assert "assistant: Deleted logs." in watched.stdout
    assert watched.stdout.splitlines()[-1] == "finished: stop"
    assert not (site.workspace / "logs").exists()
    history = await site.cli("history", workflow_id, **key)
    assert history.code == 0 and PROMPT in history.stdout, history

    # Without the codec: no plaintext anywhere, every payload but the search attributes sealed.
    for command in ("show", "describe"):
        shown = await temporal_cli(
            site.address, "workflow", command, "-w", workflow_id, "-o", "json"
        )
        assert shown.code == 0, shown
        document = json.loads(shown.stdout)
        seen = readable(document)
        assert [s for s in SECRETS if s in seen] == [], command
        for where, payload in payloads(document):
            if ".searchAttributes." in where:
                assert meta(payload, "encoding") == "json/plain"  # a phase and a count
            elif ".markerRecordedEventAttributes.details.patch-data" in where:
                # The SDK's core writes a patch marker itself: the patch id, nothing of the run.
                patch = json.loads(base64.b64decode(payload["data"]))
                assert patch["id"] in {known.id for known in PATCHES}, where
            elif ".markerRecordedEventAttributes.details.data" in where:
                # A local activity's marker (the worker's setup): the core's own bookkeeping
                # (sequence, attempt, activity type), nothing of the run; its result is sealed.
                bookkeeping = json.loads(base64.b64decode(payload["data"]))
                assert bookkeeping["activity_type"] == "worker_setup", where
            else:
                assert meta(payload, "encoding") == ENCODING.decode(), where
                assert meta(payload, KEY_ID_METADATA) == "default", where
        if command == "show":
            sealed = [p for w, p in payloads(document) if ".searchAttributes." not in w]
            assert len(sealed) > 20, "the walk found the history's payloads"

    # With the codec server: the same history reads in plaintext.
    shown = await temporal_cli(
        site.address,
        "workflow",
        "show",
        "-w",
        workflow_id,
        "-o",
        "json",
        "--codec-endpoint",
        endpoint,
    )
    assert shown.code == 0, shown
    document = json.loads(shown.stdout)
    seen = readable(document)
    assert [s for s in SECRETS if s not in seen] == []
    assert all(meta(p, "encoding") != ENCODING.decode() for _, p in payloads(document))
    described = await temporal_cli(
        site.address, "workflow", "describe", "-w", workflow_id, "--codec-endpoint", endpoint
    )
    assert described.code == 0 and workflow_id in described.stdout, described

    # The starter without the key, or with another: one line naming the key id, exit 1.
    for command in ("watch", "history"):
        one_error_line(await site.cli(command, workflow_id), "key id 'default'", "no key")
    one_error_line(
        await site.cli("history", workflow_id, **{ENV_KEYS: f"other:{new_key()}"}),
        "key id 'default'",
        "key ids other",
    )
    one_error_line(
        await site.cli("history", workflow_id, **{ENV_KEY: new_key()}),
        "key id 'default'",
        "different key",
    )


async def test_a_run_started_under_the_old_key_finishes_after_rotation(site: Site) -> None:
    old, new = new_key(), new_key()
    before, after = {ENV_KEY: old}, {ENV_KEYS: f"new:{new},default:{old}"}
    worker = await site.worker(**before)
    workflow_id = f"enc-rot-{uuid.uuid4().hex[:8]}"
    await start_waiting(site, workflow_id, **before)
    assert await worker.stop() == 0
    await site.worker(**after)
    approved = await site.cli("approve", workflow_id, "call_2", "--yes", **after)
    assert approved.code == 0, approved
    watched = await site.cli("watch", workflow_id, **after)
    assert watched.code == 0 and watched.stdout.splitlines()[-1] == "finished: stop", watched
    assert not (site.workspace / "logs").exists()
    shown = await temporal_cli(site.address, "workflow", "show", "-w", workflow_id, "-o", "json")
    ids = [meta(p, KEY_ID_METADATA) for w, p in payloads(json.loads(shown.stdout))]
    ids = [i for i in ids if i]
    assert ids[0] == "default" and ids[-1] == "new", ids  # the input under the old, the result new
    assert set(ids) == {"default", "new"}


async def test_a_worker_with_the_wrong_key_logs_one_line_per_run_and_the_runs_stay_open(
    site: Site,
) -> None:
    right, wrong = {ENV_KEY: new_key()}, {ENV_KEY: new_key()}
    worker = await site.worker(**wrong)
    ids = [f"enc-wrong-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for workflow_id in ids:
        started = await site.cli("run", "--no-follow", "--id", workflow_id, PROMPT, **right)
        assert started.code == 0, started
    handles = [site.client.get_workflow_handle(i) for i in ids]

    async def retried() -> bool:
        attempts = [
            (await h.describe()).raw_description.pending_workflow_task.attempt for h in handles
        ]
        return min(attempts) >= 3

    await wait_until(retried, timeout=90, interval=1.0)
    for handle in handles:
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    assert await worker.stop() == 0
    output = "\n".join([*worker.lines, await worker.rest_of_stdout()])
    lines = [line for line in output.splitlines() if "key id 'default'" in line]
    run_ids = [(await h.describe()).run_id for h in handles]
    assert sorted(run_ids) == sorted(line.split()[1] for line in lines), output
    assert all("is a different key" in line for line in lines)
    assert "Traceback" not in output and PROMPT not in output
    # The run is neither failed nor completed: with the right key it goes on.
    await site.worker(**right)
    reader = site.reader(**right).get_workflow_handle(ids[0])

    async def waiting() -> bool:
        try:  # until the task's next attempt, the server answers no query
            return (await status(reader)).phase == "awaiting_approval"
        except RPCError:
            return False

    await wait_until(waiting, timeout=120, interval=1.0)
    for handle in handles:
        await handle.terminate("test over")


async def test_a_key_that_cannot_be_used_stops_every_program_with_one_line(site: Site) -> None:
    bad = {ENV_KEY: "c2VjcmV0LWJ1dC1zaG9ydA=="}  # base64 of 16 bytes
    worker = await spawn("worker", "worker.py", env=site.env(**bad))
    code = await worker.proc.wait()
    output = (await worker.rest_of_stdout()).strip()
    assert code == 2 and output.count("\n") == 0 and ENV_KEY in output, output
    assert "c2VjcmV0" not in output
    for args in (["pending"], ["codec-server", "--port", "0"]):
        result = await site.cli(*args, **bad)
        assert result.code == 2, result
        assert result.stderr.count("\n") == 1 and ENV_KEY in result.stderr, result
        assert "c2VjcmV0" not in result.stderr


# --- the codec server -----------------------------------------------------------------------------


def proto_json(*items: Payload) -> dict[str, Any]:
    return {
        "payloads": [
            {
                "metadata": {k: base64.b64encode(v).decode() for k, v in p.metadata.items()},
                "data": base64.b64encode(p.data).decode(),
            }
            for p in items
        ]
    }


def from_json(document: dict[str, Any]) -> list[Payload]:
    return [
        Payload(
            metadata={k: base64.b64decode(v) for k, v in p.get("metadata", {}).items()},
            data=base64.b64decode(p.get("data", "")),
        )
        for p in document["payloads"]
    ]


async def test_the_codec_server_speaks_the_protocol(site: Site) -> None:
    key = {ENV_KEYS: f"k2:{new_key()},k1:{new_key()}"}
    url = await site.codec_server(**key)
    codec = EncryptionCodec(parse_keys(key))
    prompt = Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(PROMPT).encode())
    headers = {"X-Namespace": "default", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        encoded = await http.post("/encode", json=proto_json(prompt), headers=headers)
        assert encoded.status_code == 200, encoded.text
        (sealed,) = from_json(encoded.json())
        assert dict(sealed.metadata) == {"encoding": ENCODING, KEY_ID_METADATA: b"k2"}
        assert await codec.decode([sealed]) == [prompt], "the worker's codec reads it"
        (by_worker,) = await EncryptionCodec(
            parse_keys({ENV_KEYS: key[ENV_KEYS].split(",")[1]})
        ).encode([prompt])
        untouched = Payload(metadata={"encoding": b"binary/null"})
        decoded = await http.post(
            "/decode", json=proto_json(sealed, by_worker, prompt, untouched), headers=headers
        )
        assert decoded.status_code == 200, decoded.text
        assert from_json(decoded.json()) == [prompt, prompt, prompt, untouched]
        (foreign,) = await EncryptionCodec(parse_keys({ENV_KEYS: f"k9:{new_key()}"})).encode(
            [prompt]
        )
        refused = await http.post("/decode", json=proto_json(foreign), headers=headers)
        assert refused.status_code == 400 and "key id 'k9'" in refused.text
        assert (await http.post("/decode", content=b"not json", headers=headers)).status_code == 400
        assert (await http.get("/decode")).status_code == 405

        # CORS for the UI's origin only.
        ui = "http://localhost:8233"
        preflight = await http.options(
            "/decode",
            headers={
                "Origin": ui,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace",
            },
        )
        assert preflight.status_code in (200, 204)
        assert preflight.headers["access-control-allow-origin"] == ui
        assert preflight.headers["access-control-allow-methods"] == "POST"
        assert preflight.headers["access-control-allow-headers"] == (
            "content-type, x-namespace, authorization"
        )
        post = await http.post(
            "/decode", json=proto_json(sealed), headers={**headers, "Origin": ui}
        )
        assert post.headers["access-control-allow-origin"] == ui
        elsewhere = await http.options(
            "/decode",
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert "access-control-allow-origin" not in elsewhere.headers
        post = await http.post(
            "/decode", json=proto_json(sealed), headers={**headers, "Origin": "http://evil.example"}
        )
        assert "access-control-allow-origin" not in post.headers


async def test_the_codec_server_token_and_its_host(site: Site) -> None:
    key = {ENV_KEY: new_key()}
    ui = "http://ui.example:8080"
    url = await site.codec_server("--ui-origin", ui, AGENT_CODEC_TOKEN="t0ken", **key)
    body = proto_json(Payload(metadata={"encoding": b"json/plain"}, data=b'"x"'))
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        for path in ("/encode", "/decode"):
            assert (await http.post(path, json=body)).status_code == 401
            wrong = await http.post(path, json=body, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
            right = await http.post(path, json=body, headers={"Authorization": "Bearer t0ken"})
            assert right.status_code == 200, right.text
        preflight = await http.options(
            "/decode", headers={"Origin": ui, "Access-Control-Request-Method": "POST"}
        )
        assert preflight.status_code in (200, 204), "a preflight needs no token"
        assert preflight.headers["access-control-allow-origin"] == ui

    refused = await site.cli("codec-server", "--host", "0.0.0.0", "--port", "0", **key)
    assert refused.code == 2 and refused.stderr.count("\n") == 1, refused
    assert "AGENT_CODEC_TOKEN" in refused.stderr
    no_key = await site.cli("codec-server", "--port", "0")
    assert no_key.code == 2 and "AGENT_ENCRYPTION_KEY" in no_key.stderr, no_key
