"""A real, local HTTP receiver of notifications (`AGENT_NOTIFY_URL`) for tests and the demo.

It listens on 127.0.0.1 and records every POST it gets: the body (parsed JSON, else the text),
the path, the content type, when it arrived (`received_at`, seconds since the epoch) and the
status it answered (null while it hangs). It answers 200 `ok`, except:

- `--fail-first N`: the first N POSTs get `--fail-status` (default 500), to see the retries,
  with `Retry-After: S` when `--retry-after S` is given;
- `--hang`: every POST is read, recorded and never answered (the connection stays open), as a
  receiver that accepts and stalls;
- `--trickle`: every POST is answered 200 one byte every 0.2 s, for minutes (each read is quick,
  the whole answer never ends);
- `--huge-body MIB`: every POST is answered `--fail-status` with a body of MIB MiB (written from a
  generator, so the receiver itself holds only one piece of it), as a hostile receiver would;
  its entry's `sent_bytes` says how much of it the client took before it hung up.

`GET /received` answers the JSON list of every POST so far (any other GET: 404).

As a process (the tests start and stop it by pid):

    python -m tests.notify_receiver --port 0 --fail-first 2
    # prints "listening on http://127.0.0.1:PORT", then "received N {body}" per POST

From a test, as a process started and stopped by pid:

    async with receiver_process("--fail-first", "2") as receiver:
        ... AGENT_NOTIFY_URL=receiver.url ...
        posts = await receiver.wait_for(3)

In-process (a background thread):

    with NotifyReceiver(fail_first=2) as receiver:
        ... AGENT_NOTIFY_URL=receiver.url ...
        receiver.wait_for(1)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import httpx

MAX_BODY_BYTES = 1_000_000
REPO = Path(__file__).resolve().parents[1]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        port: int,
        fail_first: int,
        fail_status: int,
        hang: bool,
        retry_after: str | None,
        trickle: bool = False,
        huge_body_mib: int = 0,
    ) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.huge_body_mib = huge_body_mib
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.hang = hang
        self.retry_after = retry_after
        self.trickle = trickle
        self.records: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.release = threading.Event()
        """Set when the receiver stops: hanging requests end then."""
        self.echo = False

    def record(self, entry: dict[str, Any]) -> int:
        with self.lock:
            entry["n"] = len(self.records) + 1
            self.records.append(entry)
            return len(self.records)

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(entry) for entry in self.records]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: stdout is the record
        pass

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/received":
            self._answer(404, b"not found", "text/plain")
            return
        data = json.dumps(self.server.snapshot(), ensure_ascii=False).encode("utf-8")
        self._answer(200, data, "application/json")

    def do_POST(self) -> None:
        length = min(int(self.headers.get("content-length") or 0), MAX_BODY_BYTES)
        raw = self.rfile.read(length) if length else b""
        text = raw.decode("utf-8", errors="replace")
        try:
            body: Any = json.loads(text)
        except ValueError:
            body = None
        entry: dict[str, Any] = {
            "path": self.path,
            "content_type": self.headers.get("content-type"),
            "received_at": time.time(),
            "body": body,
            "raw": None if body is not None else text,
            "status": None,
        }
        count = self.server.record(entry)
        if self.server.echo:
            print(f"received {count} {json.dumps(body if body is not None else text)}", flush=True)
        if self.server.hang:
            self.server.release.wait()
            return
        if self.server.trickle:
            self._trickle()
            return
        if self.server.huge_body_mib:
            self._huge(entry)
            return
        status = self.server.fail_status if count <= self.server.fail_first else 200
        with self.server.lock:
            entry["status"] = status
        if status == 200:
            self._answer(200, b"ok", "text/plain")
        else:
            self._answer(status, b"failing on purpose", "text/plain", self.server.retry_after)

    def _huge(self, entry: dict[str, Any]) -> None:
        """`--fail-status` with a body of `--huge-body` MiB: text with a control character in
        every line (each one escaped by a client that shows it), sent piece by piece."""
        piece = (b"boom \x1b[31m" + b"x" * 1000 + b"\n") * 64
        total = self.server.huge_body_mib * 1024 * 1024
        with self.server.lock:
            entry["status"] = self.server.fail_status
            entry["sent_bytes"] = 0
        self.send_response(self.server.fail_status)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(total))
        self.end_headers()
        sent = 0
        while sent < total:
            data = piece[: total - sent]
            try:
                self.wfile.write(data)
            except OSError:  # the client hung up: what it took is recorded
                break
            sent += len(data)
            with self.server.lock:
                entry["sent_bytes"] = sent
        self.close_connection = True

    def _trickle(self) -> None:
        size = 1_000
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(size))
        self.end_headers()
        for _ in range(size):
            if self.server.release.wait(0.2):
                return
            try:
                self.wfile.write(b".")
                self.wfile.flush()
            except OSError:  # the client gave up
                return

    def _answer(
        self, status: int, data: bytes, content_type: str, retry_after: str | None = None
    ) -> None:
        self.send_response(status)
        if retry_after is not None:
            self.send_header("retry-after", retry_after)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class NotifyReceiver:
    """The receiver on a background thread: `url`, `received()`, `wait_for(n)`."""

    def __init__(
        self,
        port: int = 0,
        *,
        fail_first: int = 0,
        fail_status: int = 500,
        hang: bool = False,
        retry_after: str | None = None,
    ) -> None:
        self._server = _Server(port, fail_first, fail_status, hang, retry_after)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def received(self) -> list[dict[str, Any]]:
        """Every POST so far, oldest first."""
        return self._server.snapshot()

    def wait_for(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The POSTs once there are at least `count` (TimeoutError after `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.received()
            if len(got) >= count:
                return got
            time.sleep(0.02)
        raise TimeoutError(f"the receiver got {len(self.received())} POSTs, not {count}")

    def start(self) -> NotifyReceiver:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.release.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> NotifyReceiver:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


@dataclass
class ReceiverProcess:
    """`python -m tests.notify_receiver` running as its own process (see `receiver_process`)."""

    proc: asyncio.subprocess.Process
    url: str
    lines: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def received(self) -> list[dict[str, Any]]:
        """Every POST it got so far (`GET /received`)."""
        async with httpx.AsyncClient() as http:
            answer = await http.get(f"{self.url}/received", timeout=10.0)
        answer.raise_for_status()
        posts: list[dict[str, Any]] = answer.json()
        return posts

    async def wait_for(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The POSTs once there are at least `count` (TimeoutError after `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            got = await self.received()
            if len(got) >= count:
                return got
            if time.monotonic() > deadline:
                raise TimeoutError(f"the receiver got {len(got)} POSTs, not {count}: {got}")
            await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def receiver_process(*args: str) -> AsyncIterator[ReceiverProcess]:
    """Start the receiver as a process on a free port (`args`: `--fail-first N`, `--hang`, …),
    yield it once it listens, and stop it by its pid (SIGTERM, then SIGKILL)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.notify_receiver",
        "--port",
        "0",
        *args,
        cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    stdout = proc.stdout
    drain: asyncio.Task[None] | None = None
    try:
        first = (await asyncio.wait_for(stdout.readline(), 30)).decode().strip()
        if not first.startswith("listening on "):
            raise RuntimeError(f"the receiver did not start: {first!r}")
        receiver = ReceiverProcess(proc, first.removeprefix("listening on "))

        async def read_rest() -> None:  # the pipe must never fill up
            async for raw in stdout:
                receiver.lines.append(raw.decode(errors="replace").rstrip("\n"))

        drain = asyncio.create_task(read_rest())
        yield receiver
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if drain is not None:
            drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drain


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A local receiver of agent notifications.")
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    parser.add_argument("--fail-first", type=int, default=0, metavar="N")
    parser.add_argument("--fail-status", type=int, default=500, metavar="STATUS")
    parser.add_argument("--retry-after", metavar="SECONDS", help="sent with each failure")
    parser.add_argument("--hang", action="store_true", help="never answer a POST")
    parser.add_argument("--trickle", action="store_true", help="answer one byte at a time")
    parser.add_argument("--huge-body", type=int, default=0, metavar="MIB", help="a body this big")
    args = parser.parse_args(argv)
    server = _Server(
        args.port,
        args.fail_first,
        args.fail_status,
        args.hang,
        args.retry_after,
        args.trickle,
        args.huge_body,
    )
    server.echo = True

    def stop(signum: int, frame: FrameType | None) -> None:
        server.release.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
