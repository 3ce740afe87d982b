"""A real S3-compatible server for the payload-store tests and the benchmark: `moto_server`
(from `moto[server]`, a dev extra) as its own process on 127.0.0.1, started, paused (SIGSTOP),
resumed (SIGCONT) and stopped by its process id. Its state lives in its memory: a bucket and
its objects last as long as the process."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MOTO_SERVER = str(Path(sys.executable).parent / "moto_server")
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    # Nothing from this machine's AWS files, and never the instance-metadata address.
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}
"""What every program talking to the test server gets: fake credentials, nothing else."""


class S3Server:
    """One `moto_server` process; `url` is its endpoint."""

    def __init__(self, process: subprocess.Popen[bytes], url: str) -> None:
        self.process = process
        self.url = url

    @property
    def pid(self) -> int:
        return self.process.pid

    def client(self) -> Any:
        """A boto3 client of this server (for the tests' own looks into the bucket)."""
        import boto3

        return boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
        ).client("s3", endpoint_url=self.url)

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def objects(self, bucket: str) -> dict[str, bytes]:
        """Every object of `bucket`, key → bytes."""
        s3 = self.client()
        listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
        return {o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}

    def pause(self) -> None:
        """SIGSTOP: the port still accepts connections, nothing answers (a hung store)."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGCONT)  # a stopped process does not act on SIGTERM
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextmanager
def s3_server(log: Path) -> Iterator[S3Server]:
    """Start `moto_server` on a free port of 127.0.0.1 (its log in `log`), stop it at the end."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [MOTO_SERVER, "-H", "127.0.0.1", "-p", "0"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **AWS_ENV},
        )
    server: S3Server | None = None
    try:
        deadline = time.monotonic() + 30
        while server is None:
            found = re.search(rb"Running on (http://127\.0\.0\.1:\d+)", log.read_bytes())
            if found:
                server = S3Server(process, found.group(1).decode())
            elif process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto_server did not start: {log.read_text()[-2000:]}")
            else:
                time.sleep(0.05)
        yield server
    finally:
        if server is not None:
            server.stop()
        elif process.poll() is None:
            process.kill()
            process.wait()


async def in_thread(function: Any, *args: Any) -> Any:
    """Run a blocking boto3 call from a test's event loop."""
    return await asyncio.to_thread(function, *args)
