"""The S3 payload store (`AGENT_PAYLOAD_STORE=s3://BUCKET/PREFIX`): the SDK's own S3 driver
(`temporalio.contrib.aws.s3driver.S3StorageDriver`: keys, SHA-256 integrity, de-duplication)
over a boto3 client.

boto3, not the SDK's aioboto3 adapter: a boto3 client belongs to no event loop, so one data
converter serves every loop and thread that uses it, and it is made lazily, on the first payload
stored or read, so building a converter (which every program does at start) costs nothing and
touches no network. The calls run in threads. Credentials and the region come from the usual
AWS variables and files (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
`AWS_REGION`, `AWS_PROFILE`, …); `AGENT_S3_ENDPOINT_URL` points at an S3-compatible store.
The bucket must exist. PREFIX is prepended to every key, and is part of the setting: a
reference names its key below the prefix.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Mapping
from typing import Any

from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient

CONNECT_TIMEOUT_SECONDS = 5
READ_TIMEOUT_SECONDS = 10
"""A store that stops answering fails the task within seconds (Temporal then retries it)
instead of holding it for boto3's default minute."""
RETRY_ATTEMPTS = 3
"""boto3's own attempts per call, unless AWS_MAX_ATTEMPTS or AWS_RETRY_MODE say otherwise."""
MAX_PAYLOAD_BYTES = 1024 * 1024 * 1024
"""The SDK driver refuses larger payloads (its default, 50 MiB, is below a 64 MB conversation's
hand-over)."""

SESSION_VARIABLES = {
    "AWS_ACCESS_KEY_ID": "aws_access_key_id",
    "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
    "AWS_SESSION_TOKEN": "aws_session_token",
    "AWS_PROFILE": "profile_name",
}
"""Read from the environment the converter was built from (os.environ or the one given), like
the region (AWS_REGION, AWS_DEFAULT_REGION) and the retries (AWS_MAX_ATTEMPTS, AWS_RETRY_MODE);
boto3 reads the rest (config files, roles) itself."""


def _attempts(text: str | None) -> int:
    try:
        return max(1, int(text)) if text else RETRY_ATTEMPTS
    except ValueError:
        return RETRY_ATTEMPTS


class Boto3S3Client(S3StorageDriverClient):
    """The SDK driver's client interface over boto3, with PREFIX in front of every key. Only
    `bucket` is ever read or written: a reference naming another bucket (history is data anyone
    with access to the namespace can write) is refused."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        endpoint_url: str | None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint_url = endpoint_url
        self._environ = os.environ if environ is None else environ
        self._client: Any = None
        self._lock = threading.Lock()

    def _s3(self) -> Any:
        with self._lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                retries = {
                    "mode": self._environ.get("AWS_RETRY_MODE") or "standard",
                    "total_max_attempts": _attempts(self._environ.get("AWS_MAX_ATTEMPTS")),
                }
                config = Config(
                    connect_timeout=CONNECT_TIMEOUT_SECONDS,
                    read_timeout=READ_TIMEOUT_SECONDS,
                    retries=retries,
                )
                given = {
                    argument: self._environ[variable]
                    for variable, argument in SESSION_VARIABLES.items()
                    if self._environ.get(variable)
                }
                region = self._environ.get("AWS_REGION") or self._environ.get("AWS_DEFAULT_REGION")
                if region:
                    given["region_name"] = region
                session = boto3.session.Session(**given)
                self._client = session.client("s3", endpoint_url=self.endpoint_url, config=config)
            return self._client

    def _key(self, bucket: str, key: str) -> str:
        if bucket != self.bucket:
            raise ValueError(f"a reference names the bucket {bucket[:64]!r}, not {self.bucket!r}")
        return self.prefix + key

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        await asyncio.to_thread(
            lambda: self._s3().put_object(Bucket=bucket, Key=self._key(bucket, key), Body=data)
        )

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        from botocore.exceptions import ClientError

        def head() -> bool:
            try:
                self._s3().head_object(Bucket=bucket, Key=self._key(bucket, key))
            except ClientError as err:
                if err.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return False
                raise
            return True

        return await asyncio.to_thread(head)

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        def get() -> bytes:
            response = self._s3().get_object(Bucket=bucket, Key=self._key(bucket, key))
            body: bytes = response["Body"].read()
            return body

        return await asyncio.to_thread(get)

    def describe(self) -> Mapping[str, str]:
        described = {"bucket": self.bucket, "prefix": self.prefix or "(none)"}
        if self.endpoint_url:
            described["endpoint"] = self.endpoint_url
        return described


def s3_driver(
    bucket: str, prefix: str, endpoint_url: str | None, environ: Mapping[str, str]
) -> S3StorageDriver:
    """The SDK's S3 driver for `bucket`, keys under `prefix`."""
    return S3StorageDriver(
        client=Boto3S3Client(bucket, prefix, endpoint_url, environ),
        bucket=bucket,
        max_payload_size=MAX_PAYLOAD_BYTES,
    )
