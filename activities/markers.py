"""At-most-once execution of the tools that are not safe to retry: a record per scheduled call,
in the worker's state folder (outside the workspace), sealed with the encryption key when one is
set, and removed after the retention period.

A record holds a tool's whole output (a command's stdout, say) for as long as it is kept. With
`AGENT_ENCRYPTION_KEY` / `AGENT_ENCRYPTION_KEYS` set, everything in it but its state is sealed
with AES-256-GCM under the first key (its key id recorded; any configured key of that id opens
it), bound to the record's file name and state. A record that cannot be opened (no key, another
key) never lets a call run twice: it is answered as an interrupted call is. Records older than
`AGENT_STATE_RETENTION_DAYS` (default 30) are removed when the worker starts and, at most once an
hour, when a call is claimed.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtime.codec import NONCE_BYTES, Keyring, parse_keys
from workflows.contract.tool_results import envelope_error

DEFAULT_RETENTION_DAYS = 30.0
SWEEP_INTERVAL_SECONDS = 3600.0
"""How often claiming a call also removes the records past their retention."""
RECORD_SUFFIXES = (".json", ".tmp")


def interrupted_message(call_id: str) -> str:
    return envelope_error(
        f"An earlier attempt of call '{call_id}' was interrupted before it reported a result; "
        "this tool is not safe to retry, so it was not run again (it may or may not have "
        "taken effect)."
    )


class _Sealer:
    """AES-256-GCM over a record's content, bound to its file key and state."""

    def __init__(self, keyring: Keyring) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._encrypting = keyring.encrypting_id
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keyring.keys}

    def seal(self, content: dict[str, Any], bound: str) -> dict[str, str]:
        nonce = os.urandom(NONCE_BYTES)
        data = json.dumps(content).encode()
        sealed = self._ciphers[self._encrypting].encrypt(nonce, data, bound.encode())
        return {"key_id": self._encrypting, "data": base64.b64encode(nonce + sealed).decode()}

    def open(self, sealed: object, bound: str) -> dict[str, Any] | None:
        """The content, or None when no configured key opens it."""
        from cryptography.exceptions import InvalidTag

        if not isinstance(sealed, dict):
            return None
        cipher = self._ciphers.get(str(sealed.get("key_id")))
        try:
            raw = base64.b64decode(str(sealed.get("data")), validate=True)
            if cipher is None or len(raw) <= NONCE_BYTES:
                return None
            plain = cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], bound.encode())
            content = json.loads(plain)
        except (InvalidTag, ValueError, binascii.Error):
            return None
        return content if isinstance(content, dict) else None


class IdempotencyMarkers:
    """At-most-once execution of tools that are not safe to retry, per scheduled call: the
    workflow id, the run key (the first run id of the run's continue-as-new chain) and the call
    id, which the workflow keeps unique within a run. A new call, in a later round, session turn,
    generation or a later run under the same workflow id, never meets an earlier call's record.

    A record file (named by a hash of the key, in a state folder outside the workspace) is
    created, exclusively, before the tool runs; it records the result when the tool finishes.
    A second attempt finds the record and does not run the tool again: it returns the recorded
    result, or, if the first attempt never finished (or the record cannot be opened), an error
    envelope saying so.
    """

    def __init__(
        self,
        folder: Path,
        keyring: Keyring | None = None,
        retention_days: float = DEFAULT_RETENTION_DAYS,
    ) -> None:
        self._folder = folder
        self._sealer = _Sealer(keyring) if keyring is not None else None
        self._retention_seconds = retention_days * 86_400
        self._swept_at = time.monotonic()
        self.sweep()

    @classmethod
    def for_worker(
        cls, folder: Path, retention_days: float, environ: Mapping[str, str] | None = None
    ) -> IdempotencyMarkers:
        """Records sealed with the worker's encryption keys (the ones its data converter uses)."""
        keyring = parse_keys(os.environ if environ is None else environ)
        return cls(folder, keyring, retention_days)

    def _path(self, workflow_id: str, call_id: str, run_key: str | None) -> Path:
        parts = [workflow_id, call_id] if run_key is None else [workflow_id, run_key, call_id]
        key = hashlib.sha256("\x00".join(parts).encode()).hexdigest()
        return self._folder / f"{key}.json"

    def _document(self, path: Path, state: str, content: dict[str, Any]) -> dict[str, Any]:
        if self._sealer is None:
            return {**content, "state": state}
        return {"state": state, "sealed": self._sealer.seal(content, f"{path.name}:{state}")}

    def _earlier(self, path: Path, call_id: str) -> str:
        """What a second attempt answers: the recorded result, else 'interrupted'."""
        try:
            previous = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = {}
        if not isinstance(previous, dict) or previous.get("state") != "done":
            return interrupted_message(call_id)
        content: Any = previous
        if "sealed" in previous:
            opened = None
            if self._sealer is not None:
                opened = self._sealer.open(previous["sealed"], f"{path.name}:done")
            content = opened or {}
        if isinstance(content.get("content"), str):
            return str(content["content"])
        return interrupted_message(call_id)

    def claim(
        self, workflow_id: str, call_id: str, tool: str, run_key: str | None = None
    ) -> str | None:
        """Claim the key. None when claimed now; else the content to return instead of running."""
        self._folder.mkdir(parents=True, exist_ok=True)
        if time.monotonic() - self._swept_at > SWEEP_INTERVAL_SECONDS:
            self.sweep()
        path = self._path(workflow_id, call_id, run_key)
        content = {"workflow_id": workflow_id, "call_id": call_id, "tool": tool}
        record = self._document(path, "started", content)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return self._earlier(path, call_id)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
            handle.flush()
            os.fsync(handle.fileno())
        return None

    def record(
        self, workflow_id: str, call_id: str, tool: str, content: str, run_key: str | None = None
    ) -> None:
        path = self._path(workflow_id, call_id, run_key)
        fields = {"workflow_id": workflow_id, "call_id": call_id, "tool": tool, "content": content}
        record = self._document(path, "done", fields)
        fd, temporary = tempfile.mkstemp(dir=self._folder, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        os.replace(temporary, path)

    def sweep(self, now: float | None = None) -> int:
        """Remove the records last written more than the retention period ago; how many."""
        self._swept_at = time.monotonic()
        cutoff = (time.time() if now is None else now) - self._retention_seconds
        removed = 0
        with contextlib.suppress(FileNotFoundError), os.scandir(self._folder) as entries:
            for entry in entries:
                if not entry.name.endswith(RECORD_SUFFIXES):
                    continue
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)
                        removed += 1
        return removed
