"""A real, local HTTP receiver of notifications (`AGENT_NOTIFY_URL`) for tests and the demo.

It listens on 127.0.0.1 and records every POST it gets: the body (parsed JSON, else the text),
the path, the content type, when it arrived (`received_at`, seconds since the epoch) and the
status it answered (null while it hangs). It answers 200 `ok`, except:

- `--fail-first N`: the first N POSTs get `--fail-status` (default 500), to see the retries;
- `--hang`: every POST is read, recorded and never answered (the connection stays open), as a
  receiver that accepts and stalls.

`GET /received` answers the JSON list of every POST so far (any other GET: 404).

As a process (the tests start and stop it by pid):

    python -m tests.notify_receiver --port 0 --fail-first 2
    # prints "listening on http://127.0.0.1:PORT", then "received N {body}" per POST

In-process (a background thread):

    with NotifyReceiver(fail_first=2) as receiver:
        ... AGENT_NOTIFY_URL=receiver.url ...
        receiver.wait_for(1)
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any

MAX_BODY_BYTES = 1_000_000


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, fail_first: int, fail_status: int, hang: bool) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.hang = hang
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
        status = self.server.fail_status if count <= self.server.fail_first else 200
        with self.server.lock:
            entry["status"] = status
        self._answer(status, b"ok" if status == 200 else b"failing on purpose", "text/plain")

    def _answer(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class NotifyReceiver:
    """The receiver on a background thread: `url`, `received()`, `wait_for(n)`."""

    def __init__(
        self, port: int = 0, *, fail_first: int = 0, fail_status: int = 500, hang: bool = False
    ) -> None:
        self._server = _Server(port, fail_first, fail_status, hang)
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A local receiver of agent notifications.")
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    parser.add_argument("--fail-first", type=int, default=0, metavar="N")
    parser.add_argument("--fail-status", type=int, default=500, metavar="STATUS")
    parser.add_argument("--hang", action="store_true", help="never answer a POST")
    args = parser.parse_args(argv)
    server = _Server(args.port, args.fail_first, args.fail_status, args.hang)
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
