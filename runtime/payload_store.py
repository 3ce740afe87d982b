"""Big conversations: Temporal's external payload storage, set by `AGENT_PAYLOAD_STORE`.

Payloads of 256 KiB and more go to a store, and history holds a small reference to each
(`json/protobuf`, `temporal.api.sdk.v1.ExternalStorageReference`: the driver's name and where the
payload is). Every program reads history, so every program needs the same setting, like the
encryption key:

- `file:///PATH`: a folder (it must exist) on this machine, or on a file system that every
  program mounts at the same path (`runtime.file_store`);
- `s3://BUCKET/PREFIX`: the SDK's S3 driver over boto3 (`runtime.s3_store`; the usual AWS
  variables, and `AGENT_S3_ENDPOINT_URL` for an S3-compatible store).

`runtime.connect.data_converter` puts the store after the codec, so with a key what reaches the
store is sealed already. A store that cannot be reached raises `PayloadStoreError`
(`runtime.store_failure`): the workflow task or the activity attempt fails and is retried, never
the run, and a worker logs it once per run (`runtime.store_log`).

With a store, the workflow's conversation budget is `AGENT_MAX_CONVERSATION_MB` (default 64)
instead of the 1.4 MB that keeps every payload under Temporal's 2 MB limit:
`conversation_budget_bytes` says which.

History is data anyone with access to the namespace can write, so a reference is loaded only
for the workflow it was stored for (`BoundExternalStorage`): its key names the workflow id
(`runtime.store_keys`), and a reference whose key names another workflow, or none, is not
loaded. It stays what it is, a small JSON document, which the workflow refuses as the input,
signal or update it is not. Programs that only display history (the codec server) load every
reference they are shown: displaying grants nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.api.sdk.v1.external_storage_pb2 import ExternalStorageReference
from temporalio.converter import (
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverWorkflowInfo,
)

from runtime.file_store import FileStorageDriver
from runtime.setting_error import SettingError
from runtime.store_failure import GuardedDriver, PayloadStoreError
from runtime.store_keys import stored_for
from workflows.bounds import MAX_CONVERSATION_BYTES

ENV_STORE = "AGENT_PAYLOAD_STORE"
ENV_S3_ENDPOINT = "AGENT_S3_ENDPOINT_URL"
ENV_MAX_CONVERSATION_MB = "AGENT_MAX_CONVERSATION_MB"
DEFAULT_MAX_CONVERSATION_MB = 64
MAX_CONVERSATION_MB_LIMIT = 1024
"""The largest budget accepted: the worker holds a run's conversation in memory, more than once."""
THRESHOLD_BYTES = 256 * 1024
"""Payloads of this size and more go to the store (the SDK's default, stated here)."""
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
REFERENCE_TYPE = ExternalStorageReference.DESCRIPTOR.full_name.encode()


class PayloadStoreConfigError(SettingError):
    """A store setting that cannot be used; the message names the variable."""


@dataclass(frozen=True)
class StoreSetting:
    """A parsed `AGENT_PAYLOAD_STORE`."""

    kind: Literal["file", "s3"]
    location: str
    """The setting as written (for messages; it holds no secret)."""
    path: Path | None = None
    bucket: str = ""
    prefix: str = ""
    endpoint_url: str | None = None


def _bad(value: str, why: str) -> PayloadStoreConfigError:
    return PayloadStoreConfigError(f"{ENV_STORE}={value[:200]!r}: {why}")


def _endpoint(environ: Mapping[str, str]) -> str | None:
    text = environ.get(ENV_S3_ENDPOINT, "").strip()
    if not text:
        return None
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PayloadStoreConfigError(
            f"{ENV_S3_ENDPOINT}={text[:200]!r} is not an http:// or https:// URL"
        )
    return text


def parse_store(environ: Mapping[str, str]) -> StoreSetting | None:
    """The store the environment sets, or None. Raises PayloadStoreConfigError."""
    value = environ.get(ENV_STORE, "").strip()
    if not value:
        return None
    parts = urlsplit(value)
    if parts.query or parts.fragment:
        raise _bad(value, "a store setting has no ?query or #fragment")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise _bad(value, "file:// takes an absolute path on this machine: file:///PATH")
        path = Path(unquote(parts.path))
        if not path.is_absolute() or parts.path in ("", "/"):
            raise _bad(value, "file:// takes an absolute path of a folder: file:///PATH")
        if not path.is_dir():
            raise _bad(
                value,
                f"the folder {path} does not exist (create it, or mount the shared file system)",
            )
        return StoreSetting(kind="file", location=value, path=path)
    if parts.scheme == "s3":
        bucket = parts.netloc
        if not BUCKET.fullmatch(bucket) or ".." in bucket:
            raise _bad(value, "s3:// takes a bucket name (3 to 63 of a-z 0-9 . -): s3://BUCKET")
        prefix = unquote(parts.path).strip("/")
        try:
            import boto3  # noqa: F401
        except ImportError:
            raise _bad(value, "the S3 store needs boto3: pip install 'durable-agent[s3]'") from None
        return StoreSetting(
            kind="s3",
            location=value,
            bucket=bucket,
            prefix=f"{prefix}/" if prefix else "",
            endpoint_url=_endpoint(environ),
        )
    raise _bad(value, "not file:///PATH or s3://BUCKET/PREFIX")


def store_driver(setting: StoreSetting, environ: Mapping[str, str]) -> StorageDriver:
    """The driver of a store, its failures as PayloadStoreError."""
    if setting.kind == "file":
        assert setting.path is not None
        return GuardedDriver(FileStorageDriver(setting.path), setting.location)
    from runtime.s3_store import s3_driver

    return GuardedDriver(
        s3_driver(setting.bucket, setting.prefix, setting.endpoint_url, environ), setting.location
    )


logger = logging.getLogger(__name__)


class BoundExternalStorage(ExternalStorage):
    """The SDK's external storage, loading a reference only for the workflow it was stored for.

    The SDK binds each copy to the workflow it decodes for (a workflow task, an activity of the
    workflow, a client's start, signal, update or query): a reference whose key names another
    workflow is left as it is, never loaded."""

    def _decode_reference(self, payload: Payload) -> ExternalStorageReference | None:
        reference = super()._decode_reference(payload)
        target = self._store_context.target
        if reference is None or not isinstance(target, StorageDriverWorkflowInfo):
            return reference
        if not target.id:
            return reference
        key = reference.claim_data.get("path") or reference.claim_data.get("key") or ""
        if stored_for(key, target.id):
            return reference
        logger.warning(
            "a payload store reference in workflow %r names a payload stored for another"
            " workflow (%s); not loaded",
            target.id[:200],
            key[:200],
        )
        return None


def external_storage(environ: Mapping[str, str]) -> ExternalStorage | None:
    """The SDK's external storage for the environment's store, or None without one."""
    setting = parse_store(environ)
    if setting is None:
        return None
    return BoundExternalStorage(
        drivers=[store_driver(setting, environ)], payload_size_threshold=THRESHOLD_BYTES
    )


def conversation_budget_bytes(environ: Mapping[str, str]) -> int:
    """How many bytes a run's conversation may reach on this worker: AGENT_MAX_CONVERSATION_MB
    (default 64, in units of 10^6 bytes) with a payload store, the 1.4 MB that keeps every
    payload under Temporal's limit without one. Raises PayloadStoreConfigError for a bad value,
    and for a budget asked for without a store."""
    store = parse_store(environ)
    text = environ.get(ENV_MAX_CONVERSATION_MB, "").strip()
    if store is None:
        if text:
            raise PayloadStoreConfigError(
                f"{ENV_MAX_CONVERSATION_MB} needs {ENV_STORE}: without a payload store a"
                f" conversation is limited to {MAX_CONVERSATION_BYTES / 1e6:g} MB"
            )
        return MAX_CONVERSATION_BYTES
    if not text:
        return DEFAULT_MAX_CONVERSATION_MB * 1_000_000
    try:
        megabytes = float(text)
    except ValueError:
        megabytes = -1.0
    if not 0 < megabytes <= MAX_CONVERSATION_MB_LIMIT:
        raise PayloadStoreConfigError(
            f"{ENV_MAX_CONVERSATION_MB}={text[:40]!r} is not a number of megabytes above 0"
            f" and at most {MAX_CONVERSATION_MB_LIMIT}"
        )
    return int(megabytes * 1_000_000)


def too_large_hint(environ: Mapping[str, str]) -> str:
    """What a `Conversation too large` error can tell the operator to change."""
    if parse_store(environ) is None:
        return f"set {ENV_STORE} to keep conversations of up to {DEFAULT_MAX_CONVERSATION_MB} MB"
    return f"raise {ENV_MAX_CONVERSATION_MB} for longer conversations"


def is_reference(payload: Payload) -> bool:
    """Whether `payload` is a reference to a stored payload (what history holds)."""
    return (
        payload.metadata.get("encoding") == b"json/protobuf"
        and payload.metadata.get("messageType") == REFERENCE_TYPE
    )


async def resolve_references(
    storage: ExternalStorage, payloads: Sequence[Payload]
) -> list[Payload]:
    """Each reference replaced by the payload it names (as stored: sealed when a key was set),
    other payloads unchanged. For a program that reads raw history payloads (the codec server).
    Raises PayloadStoreError."""
    drivers = {driver.name(): driver for driver in storage.drivers}
    out: list[Payload] = []
    for payload in payloads:
        if not is_reference(payload):
            out.append(payload)
            continue
        reference = ExternalStorageReference()
        try:
            json_format.Parse(payload.data, reference)
        except json_format.ParseError:  # not a reference the SDK wrote: leave it as it is
            out.append(payload)
            continue
        driver = drivers.get(reference.driver_name)
        if driver is None:
            raise PayloadStoreError(
                f"a payload was stored by the driver {reference.driver_name[:64]!r}, and this"
                f" program's {ENV_STORE} has {', '.join(drivers)}",
                None,
            )
        claim = StorageDriverClaim(claim_data=dict(reference.claim_data))
        (stored,) = await driver.retrieve(StorageDriverRetrieveContext(), [claim])
        out.append(stored)
    return out
