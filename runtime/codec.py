"""Encryption at rest: an AES-256-GCM payload codec and the keys it reads from the environment.

`AGENT_ENCRYPTION_KEY` is one key (32 random bytes, base64) with the key id `default`;
`AGENT_ENCRYPTION_KEYS` is `KEYID:BASE64,KEYID:BASE64,…`: the first key encrypts, every key
decrypts, so a deployment rotates keys without downtime (`new:NEW,default:OLD`). When both are
set, `AGENT_ENCRYPTION_KEYS` wins.

Each payload is serialized whole (metadata and data) and sealed with a fresh 12-byte nonce; the
result carries only `encoding: binary/encrypted` and `encryption-key-id` in the clear. Payloads that
are not `binary/encrypted` decode unchanged, so runs recorded before encryption was switched on
still read.

Before sealing, the codec writes into the payload where it belongs (`workflows.contract.seal`): the
workflow id of the serialization context the SDK gives it, and the role and first run id that
the project's clients name while they send (`sealed_for`, set by `runtime.seal_binding`). The
record is inside the ciphertext; the associated data stays the key id, so payloads sealed before
the record existed decode as they always did (and carry no record: the workflows of this
release refuse them as bound to nothing).
"""

from __future__ import annotations

import base64
import binascii
import copy
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ActivitySerializationContext,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)

from runtime.setting_error import SettingError
from workflows.contract.seal import NO_SEAL, SEAL_METADATA, Seal
from workflows.names import PLAINTEXT_METADATA

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

ENV_KEY = "AGENT_ENCRYPTION_KEY"
ENV_KEYS = "AGENT_ENCRYPTION_KEYS"
DEFAULT_KEY_ID = "default"
ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
KEY_BYTES = 32
NONCE_BYTES = 12
KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class KeyConfigError(SettingError):
    """A key setting that cannot be used. The message names the variable, never the key."""


class DecryptionError(RuntimeError):
    """A payload this program cannot decrypt. Deliberately not an `ApplicationError`: in a
    workflow task it fails the task (the SDK retries it) and never the workflow itself."""

    def __init__(self, key_id: str, message: str) -> None:
        super().__init__(message)
        self.key_id = key_id


@dataclass(frozen=True)
class Keyring:
    """Key ids and their keys, in order: the first one encrypts."""

    keys: tuple[tuple[str, bytes], ...]

    @property
    def encrypting_id(self) -> str:
        return self.keys[0][0]

    def ids(self) -> list[str]:
        return [key_id for key_id, _ in self.keys]


def _key_bytes(text: str, where: str) -> bytes:
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != KEY_BYTES:
        raise KeyConfigError(
            f"{where} is not {KEY_BYTES} bytes of base64"
            " (make one with: python -c 'import os,base64;print(base64.b64encode(os.urandom(32))"
            ".decode())')"
        )
    return raw


def parse_keys(environ: Mapping[str, str]) -> Keyring | None:
    """The keys the environment sets, or None when it sets none. Raises KeyConfigError."""
    many = environ.get(ENV_KEYS, "").strip()
    if many:
        keys: list[tuple[str, bytes]] = []
        for number, entry in enumerate(many.split(","), start=1):
            key_id, sep, text = entry.strip().partition(":")
            key_id = key_id.strip()
            if not sep or not KEY_ID.fullmatch(key_id):
                raise KeyConfigError(
                    f"{ENV_KEYS}: entry {number} is not KEYID:BASE64"
                    " (key ids are 1 to 64 of A-Z a-z 0-9 . _ -)"
                )
            if any(key_id == seen for seen, _ in keys):
                raise KeyConfigError(f"{ENV_KEYS}: key id '{key_id}' appears twice")
            keys.append((key_id, _key_bytes(text, f"{ENV_KEYS}: the key of '{key_id}'")))
        return Keyring(tuple(keys))
    one = environ.get(ENV_KEY, "").strip()
    if one:
        return Keyring(((DEFAULT_KEY_ID, _key_bytes(one, ENV_KEY)),))
    return None


def _shown(key_id: str) -> str:
    """A key id read from a payload, safe to print in one line."""
    return key_id if KEY_ID.fullmatch(key_id) else repr(key_id[:64])


_SENDING: ContextVar[Seal | None] = ContextVar("agent_sealed_for", default=None)


@contextmanager
def sealed_for(seal: Seal) -> Iterator[None]:
    """While inside, payloads sealed for `seal.workflow_id` also carry its role and first run id
    (the client interceptor of `runtime.seal_binding` wraps each start, signal and update)."""
    token = _SENDING.set(seal)
    try:
        yield
    finally:
        _SENDING.reset(token)


def _seal_for(workflow_id: str | None) -> Seal | None:
    """The record sealed into a payload encoded for `workflow_id` (None: no workflow known)."""
    if not workflow_id:
        return None
    sending = _SENDING.get()
    if sending is not None and sending.workflow_id == workflow_id:
        return sending
    return Seal(workflow_id=workflow_id)


def _context_workflow(context: SerializationContext) -> str | None:
    if isinstance(context, WorkflowSerializationContext | ActivitySerializationContext):
        return context.workflow_id
    return None


class EncryptionCodec(PayloadCodec, WithSerializationContext):
    """AES-256-GCM over whole payloads. Without keys it encodes nothing and still recognises
    encrypted payloads, so a program without a key says which key it lacks."""

    def __init__(self, keyring: Keyring | None, *, mark_plaintext: bool = False) -> None:
        """`mark_plaintext`: with keys, a payload found unencrypted on decoding is marked
        (metadata `agent-plaintext`), so the workflow can refuse a signal or an update that does
        not come from a key holder, and a decrypted one keeps its seal record (`agent-seal`),
        so the workflow can refuse one sealed for another place. The programs' converter
        marks; the codec server does not (it returns payloads as they were sent: plaintext
        ones unchanged, decrypted ones without the record)."""
        # Imported here, not at the top: a module that defines a workflow and imports this one is
        # re-imported by the workflow sandbox, which cannot load cryptography's native module twice.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.keyring = keyring
        self._mark_plaintext = mark_plaintext and keyring is not None
        self._ciphers: dict[str, AESGCM] = {
            key_id: AESGCM(key) for key_id, key in (keyring.keys if keyring else ())
        }
        self._workflow_id: str | None = None

    def with_context(self, context: SerializationContext) -> EncryptionCodec:
        """This codec, sealing for the workflow `context` names (the SDK calls this per
        operation: a start, a signal, an update, a workflow task, an activity)."""
        workflow_id = _context_workflow(context)
        if workflow_id == self._workflow_id:
            return self
        bound = copy.copy(self)
        bound._workflow_id = workflow_id
        return bound

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        if self.keyring is None:
            return payload
        key_id = self.keyring.encrypting_id
        seal = _seal_for(self._workflow_id)
        if seal is not None:
            bound = Payload()
            bound.CopyFrom(payload)
            bound.metadata[SEAL_METADATA] = seal.to_bytes()
            payload = bound
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[key_id].encrypt(nonce, payload.SerializeToString(), key_id.encode())
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID_METADATA: key_id.encode()},
            data=nonce + sealed,
        )

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            if self._mark_plaintext:
                marked = Payload()
                marked.CopyFrom(payload)
                marked.metadata[PLAINTEXT_METADATA] = b"1"
                if SEAL_METADATA in marked.metadata:  # a seal is only ever read from ciphertext
                    del marked.metadata[SEAL_METADATA]
                return marked
            return payload
        key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode("utf-8", "replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            have = (
                f"this program has the key ids {', '.join(self.keyring.ids())}"
                if self.keyring
                else f"this program has no key ({ENV_KEY} and {ENV_KEYS} are unset)"
            )
            raise DecryptionError(
                key_id,
                f"cannot decrypt a payload encrypted with key id '{_shown(key_id)}': {have}",
            )
        from cryptography.exceptions import InvalidTag

        data = payload.data
        try:
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], key_id.encode())
        except (InvalidTag, ValueError):
            raise DecryptionError(
                key_id,
                f"cannot decrypt a payload encrypted with key id '{_shown(key_id)}': this"
                " program's key of that id is a different key (or the payload was altered)",
            ) from None
        decoded = Payload()
        decoded.ParseFromString(plain)
        if not self._mark_plaintext:  # for display (the codec server): the payload as it was
            if SEAL_METADATA in decoded.metadata:
                del decoded.metadata[SEAL_METADATA]
        elif SEAL_METADATA not in decoded.metadata:  # sealed by an older codec: bound to nothing
            decoded.metadata[SEAL_METADATA] = NO_SEAL
        return decoded


def find_decryption_error(err: BaseException | None) -> DecryptionError | None:
    """The DecryptionError behind `err`, following causes and contexts (the SDK wraps)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, DecryptionError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None
