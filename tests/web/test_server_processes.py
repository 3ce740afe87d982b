"""`python -m starter web` and `python -m starter codec-server` as real processes against hostile
requests: a body larger than the limit (declared or chunked) never grows the server's memory by
more than the limit (the peak resident size is read from /proc), and the codec server without a
token answers only requests addressed to a loopback name, while the `temporal` CLI still reads
through it."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from runtime.codec import ENV_KEY
from runtime.connect import data_converter
from starter.web.auth import SESSION_COOKIE, add_user
from tests.conftest import venv_binary
from workflows.model import AgentRunInput

pytestmark = pytest.mark.web

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
SLACK = 32 * MIB
"""What a server may grow by besides the body it holds (buffers, the interpreter's own)."""


@dataclass
class Server:
    url: str
    port: int
    pid: int


def peak_rss(pid: int) -> int:
    """The process's peak resident set size in bytes (VmHWM)."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmHWM:\s+(\d+) kB$", status, re.MULTILINE)
    assert found, status
    return int(found.group(1)) * 1024


@asynccontextmanager
async def process(args: list[str], env: dict[str, str], banner: str) -> AsyncIterator[Server]:
    """`python -m starter ARGS` until its banner names its URL; stopped by its pid on exit."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "starter", *args,
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        found = re.search(banner, line)
        assert found, line
        url = found.group(1).rstrip("/")
        yield Server(url, int(url.rsplit(":", 1)[1]), proc.pid)
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_", "TEMPORAL_"))}
    return {**env, **extra}


@asynccontextmanager
async def web_server(client: Client, tmp_path: Path, **extra: str) -> AsyncIterator[Server]:
    users = tmp_path / "users"
    if not users.exists():
        add_user(users, "alice", "a password", with_token=False)
    env = clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_WEB_USERS_FILE=str(users),
        AGENT_TASK_QUEUE=f"limits-{uuid.uuid4()}",
        **extra,
    )
    async with process(["web", "--port", "0"], env, r"at (http://127\.0\.0\.1:\d+)/") as server:
        yield server


def a_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


async def send(
    port: int, path: str, *, total: int, declared: int | None = None, host: str | None = None
) -> tuple[bytes, int]:
    """POST `total` bytes to `path` (with `Content-Length: declared`, else chunked), stopping
    as soon as the server answers; returns the start of the answer and the bytes sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    framing = (
        f"Content-Length: {declared}" if declared is not None else "Transfer-Encoding: chunked"
    )
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host or f'127.0.0.1:{port}'}\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\n{framing}\r\n\r\n"
    )
    writer.write(head.encode())
    await writer.drain()
    answer = asyncio.ensure_future(reader.read(4096))
    if declared is not None:
        # A server that refuses by the declared length answers before any of the body is
        # sent (so the answer is not lost to a reset while the body is still being written).
        await asyncio.wait({answer}, timeout=2.0)
    piece = b"x" * MIB
    sent = 0
    try:
        while sent < total and not answer.done():
            writer.write(piece if declared is not None else b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            sent += len(piece)
        if declared is None and not answer.done():
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except ConnectionError:
        pass  # the server stopped reading and closed: the answer is already on its way
    try:
        got = await asyncio.wait_for(answer, 120)
    except ConnectionError:
        got = b""
    writer.close()
    return got, sent


def status_of(answer: bytes) -> int | None:
    found = re.match(rb"HTTP/1\.1 (\d{3}) ", answer)
    return int(found.group(1)) if found else None


async def test_the_inbox_reads_no_body_beyond_one_mib(client: Client, tmp_path: Path) -> None:
    async with web_server(client, tmp_path) as server:
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/signin")).status_code == 200
            wrong = await http.post("/signin", data={"username": "alice", "password": "x"})
            assert wrong.status_code == 401
        before = peak_rss(server.pid)
        # A declared gigabyte is refused before a byte of it is read.
        answer, sent = await asyncio.wait_for(
            send(server.port, "/signin", total=1024 * MIB, declared=1024 * MIB), 30
        )
        assert status_of(answer) == 413, answer
        assert sent < 64 * MIB
        # A chunked body (no length said) is read only up to the limit.
        answer, sent = await send(server.port, "/signin", total=256 * MIB)
        assert status_of(answer) in {413, None}, answer  # None: the reset won the race
        grew = peak_rss(server.pid) - before
        assert grew < 1 * MIB + SLACK, f"the inbox grew by {grew / MIB:.0f} MiB"
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/signin")).status_code == 200  # and it still serves
            small = await http.post("/signin", content=b"username=alice&password=" + b"y" * 1000)
            assert small.status_code == 401


async def test_the_codec_server_reads_no_body_beyond_64_mib(tmp_path: Path) -> None:
    env = clean_env(**{ENV_KEY: a_key()})
    banner = r"^codec server at (http://127\.0\.0\.1:\d+) "
    async with process(["codec-server", "--port", "0"], env, banner) as server:
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.post("/decode", json={"payloads": []})).status_code == 200
        before = peak_rss(server.pid)
        answer, sent = await asyncio.wait_for(
            send(server.port, "/decode", total=400 * MIB, declared=400 * MIB), 30
        )
        assert status_of(answer) == 413, answer
        assert sent < 128 * MIB
        answer, sent = await send(server.port, "/decode", total=400 * MIB)
        assert status_of(answer) in {413, None}, answer
        grew = peak_rss(server.pid) - before
        assert grew < 64 * MIB + SLACK, f"the codec server grew by {grew / MIB:.0f} MiB"
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.post("/decode", json={"payloads": []})).status_code == 200


async def test_the_codec_server_without_a_token_answers_loopback_names_only(
    client: Client, tmp_path: Path
) -> None:
    key = a_key()
    banner = r"^codec server at (http://127\.0\.0\.1:\d+) "
    async with process(["codec-server", "--port", "0"], clean_env(**{ENV_KEY: key}), banner) as s:
        async with httpx.AsyncClient(base_url=s.url) as http:
            for host in (f"127.0.0.1:{s.port}", f"localhost:{s.port}", f"[::1]:{s.port}"):
                ok = await http.post("/decode", json={"payloads": []}, headers={"Host": host})
                assert ok.status_code == 200, (host, ok.text)
            for host in (f"evil.example:{s.port}", "rebound.example", f"127.0.0.1.evil:{s.port}"):
                refused = await http.post("/decode", json={"payloads": []}, headers={"Host": host})
                assert refused.status_code == 403, (host, refused.text)
                assert "AGENT_CODEC_TOKEN" in refused.json()["error"]
        # The `temporal` CLI (Host: 127.0.0.1) still reads an encrypted history through it.
        sealed = await Client.connect(
            client.service_client.config.target_host,
            data_converter=data_converter({ENV_KEY: key}),
        )
        workflow_id = f"limits-{uuid.uuid4().hex[:8]}"
        prompt = f"a secret prompt {uuid.uuid4().hex}"
        handle = await sealed.start_workflow(
            "AgentWorkflow",
            AgentRunInput.from_prompt(prompt),
            id=workflow_id,
            task_queue=f"nobody-{uuid.uuid4()}",  # no worker: only the input is written
        )
        try:
            shown = await asyncio.create_subprocess_exec(
                venv_binary("temporal"), "workflow", "show", "-w", workflow_id,
                "--address", client.service_client.config.target_host,
                "--codec-endpoint", s.url, "-o", "json",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await asyncio.wait_for(shown.communicate(), 60)
        finally:
            await handle.terminate("test over")
        assert shown.returncode == 0, err.decode()
        [started] = [e for e in json.loads(out)["events"] if e["eventId"] == "1"]
        [payload] = started["workflowExecutionStartedEventAttributes"]["input"]["payloads"]
        assert base64.b64decode(payload["metadata"]["encoding"]) == b"json/plain"
        assert prompt in base64.b64decode(payload["data"]).decode()
    # With a token, the token is what counts, whatever the name.
    env = clean_env(**{ENV_KEY: key, "AGENT_CODEC_TOKEN": "t0ken"})
    async with process(["codec-server", "--port", "0"], env, banner) as s:
        async with httpx.AsyncClient(base_url=s.url) as http:
            headers = {"Host": "codec.example", "Authorization": "Bearer t0ken"}
            ok = await http.post("/decode", json={"payloads": []}, headers=headers)
            assert ok.status_code == 200, ok.text
            assert json.loads(ok.text) == {}


async def test_a_sign_out_holds_across_a_restart(client: Client, tmp_path: Path) -> None:
    """With `AGENT_WEB_SECRET` sessions outlive a restart of the server; one that was signed
    out does not come back with it."""
    secret = {"AGENT_WEB_SECRET": uuid.uuid4().hex}
    async with web_server(client, tmp_path, **secret) as server:
        async with httpx.AsyncClient(base_url=server.url) as http:
            signed = await http.post(
                "/signin", data={"username": "alice", "password": "a password"}
            )
            assert signed.status_code == 303
            kept = http.cookies[SESSION_COOKIE]
            signed = await http.post(
                "/signin",
                data={"username": "alice", "password": "a password"},
                headers={"Accept": "application/json"},
            )
            ended, token = http.cookies[SESSION_COOKIE], signed.json()["csrf_token"]
            assert (await http.post("/signout", data={"csrf_token": token})).status_code == 303
    async with web_server(client, tmp_path, **secret) as server:
        for cookie, expected in ((kept, 200), (ended, 401)):
            async with httpx.AsyncClient(
                base_url=server.url, cookies={SESSION_COOKIE: cookie}
            ) as http:
                assert (await http.get("/api/pending")).status_code == expected
