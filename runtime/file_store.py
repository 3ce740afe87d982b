"""The file-system payload store (`AGENT_PAYLOAD_STORE=file:///PATH`): one file per stored
payload in a folder on this machine or on a file system every program mounts.

A payload is written whole to a temporary file in its folder, flushed to disk, then renamed into
place, so no program ever reads half a payload, and a payload that history refers to survives a
crash of the machine that wrote it. Files are named by the SHA-256 of their bytes
(`runtime.store_keys`), which is checked again on every read. The store's folder itself is never
created here: a shared file system that is not mounted must not turn into a local folder that
the other machines cannot see.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from runtime.store_keys import is_key, payload_key

DRIVER_NAME = "agent.file"
"""The name the references in history carry; every program that reads them needs this driver."""


class FileStorageDriver(StorageDriver):
    """Payloads as files under `root` (an existing folder)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def name(self) -> str:
        return DRIVER_NAME

    def type(self) -> str:
        return DRIVER_NAME

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        claims = []
        for payload in payloads:
            data = payload.SerializeToString()
            digest = hashlib.sha256(data).hexdigest()
            key = payload_key(context, digest)
            await asyncio.to_thread(self._write, key, data)
            claims.append(
                StorageDriverClaim(
                    claim_data={"path": key, "hash_algorithm": "sha256", "hash_value": digest}
                )
            )
        return claims

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return [await asyncio.to_thread(self._read, claim) for claim in claims]

    def _check_root(self) -> None:
        if not self.root.is_dir():
            raise FileNotFoundError(
                f"the folder {self.root} does not exist (create it, or mount the shared file"
                " system there)"
            )

    def _write(self, key: str, data: bytes) -> None:
        self._check_root()
        path = self.root / key
        if path.is_file():  # the same bytes, stored before: keep the file, mark it as in use
            os.utime(path)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}.partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, path)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise

    def _read(self, claim: StorageDriverClaim) -> Payload:
        key = claim.claim_data.get("path", "")
        if not is_key(key):
            raise ValueError(f"not a key of this store: {key[:120]!r}")
        self._check_root()
        data = (self.root / key).read_bytes()
        expected = claim.claim_data.get("hash_value", "")
        if hashlib.sha256(data).hexdigest() != expected:
            raise ValueError(f"{key}: the file's SHA-256 is not the one its reference names")
        payload = Payload()
        payload.ParseFromString(data)
        return payload
