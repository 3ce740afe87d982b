"""A client's signing key: a person's own (the terminal) or a signing service's (the web app).

`SigningKey.load(path, approvers)` reads an OpenSSH Ed25519 private key (as `ssh-keygen -t
ed25519` writes it; a passphrase is asked at a terminal) and finds its public key in the
approvers file (`runtime.approvers`): a person's own key signs as that person only; a service's
key signs for the people the file lets sign through it (`NAME GROUPS via:SERVICE`). What is
signed is `workflows.people.signatures`' canonical bytes; the worker verifies them with the same
file.

`find_signing_key` is the terminal's lookup: `--key FILE`, else `AGENT_SIGNING_KEY`, else
`~/.ssh/id_ed25519` when its public key is in the approvers file. Without one an answer goes
unsigned (taken only where no approver rule applies), and the command says so.
"""

from __future__ import annotations

import base64
import getpass
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runtime.approvers import (
    ApproversFile,
    fingerprint,
    load_approvers,
    openssh_public,
    public_blob,
)
from runtime.setting_error import SettingError
from runtime.settings import Settings
from workflows.model import (
    BudgetGrant,
    QuestionAnswer,
    ReopenRequest,
    ToolApprovalResponse,
)
from workflows.people.signatures import (
    REOPEN,
    SignedFields,
    answer_decision,
    budget_call,
    canonical_bytes,
    decision_of,
    grant_decision,
    signed_at_text,
)

DEFAULT_KEY = Path("~/.ssh/id_ed25519")
MAX_KEY_BYTES = 64_000


class SigningKeyError(SettingError):
    """A signing key this program cannot use: one line naming it and why."""


def _passphrase(path: Path) -> bytes | None:
    """The passphrase of an encrypted key, asked at a terminal (None: no terminal here)."""
    if not sys.stdin.isatty():
        return None
    return getpass.getpass(f"passphrase for {path}: ").encode()


def read_private_key(
    path: Path, what: str, ask: Callable[[Path], bytes | None] = _passphrase
) -> Ed25519PrivateKey:
    """The OpenSSH Ed25519 private key at `path` (`what`: how the error names it)."""
    try:
        data = path.expanduser().read_bytes()[:MAX_KEY_BYTES]
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise SigningKeyError(f"{what} {path} cannot be read: {reason}") from None
    try:
        key = serialization.load_ssh_private_key(data, password=None)
    except TypeError:  # encrypted: a passphrase is needed
        passphrase = ask(path)
        if passphrase is None:
            raise SigningKeyError(
                f"{what} {path} is protected by a passphrase and there is no terminal to ask it at"
            ) from None
        try:
            key = serialization.load_ssh_private_key(data, password=passphrase)
        except ValueError:
            raise SigningKeyError(f"{what} {path}: the passphrase does not open it") from None
        except UnsupportedAlgorithm as err:  # no bcrypt: the passphrase's KDF is missing
            raise SigningKeyError(f"{what} {path} cannot be opened here: {err}") from None
    except (ValueError, UnsupportedAlgorithm) as err:
        raise SigningKeyError(
            f"{what} {path} is not an OpenSSH private key (ssh-keygen -t ed25519 writes one): {err}"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(
            f"{what} {path} is a {type(key).__name__.removesuffix('PrivateKey')} key: only"
            " Ed25519 keys sign (ssh-keygen -t ed25519)"
        )
    return key


@dataclass
class SigningKey:
    """A private key and whose it is in the approvers file: a person's own (`person`) or a
    signing service's (`service`)."""

    private: Ed25519PrivateKey
    path: Path
    approvers: ApproversFile
    person: str | None = None
    service: str | None = None

    @classmethod
    def load(
        cls,
        path: Path,
        approvers: ApproversFile,
        *,
        what: str = "the signing key",
        ask: Callable[[Path], bytes | None] = _passphrase,
    ) -> SigningKey:
        """The key at `path`, found in `approvers`: SigningKeyError when it cannot be read or its
        public key is in the file neither as a person's nor as a service's."""
        private = read_private_key(path, what, ask)
        public = private.public_key()
        person, service = approvers.person_of(public), approvers.service_of(public)
        if person is None and service is None:
            print_ = fingerprint(public_blob(openssh_public(public)))
            raise SigningKeyError(
                f"{what} {path} ({print_}) is not in AGENT_APPROVERS_FILE {approvers.path}:"
                " add its public key on its owner's line (docs/approvers.md)"
            )
        return cls(private, path, approvers, person=person, service=service)

    @property
    def fingerprint(self) -> str:
        return fingerprint(public_blob(openssh_public(self.private.public_key())))

    def signs_for(self, name: str) -> bool:
        """Whether this key may sign `name`'s decisions: their own key, or a service the file
        lets sign for them."""
        if self.person is not None:
            return self.person == name
        return self.service is not None and self.approvers.may_sign_through(name, self.service)

    @property
    def signed_by(self) -> str | None:
        """The service name a decision signed with this key names (None: a person's own)."""
        return self.service

    def sign(self, fields: SignedFields) -> str:
        return base64.b64encode(self.private.sign(canonical_bytes(fields))).decode()

    def signed_now(
        self,
        *,
        approver: str,
        workflow_id: str,
        run_id: str,
        call_id: str,
        arguments_sha256: str,
        decision: str,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """`approver`, `signed_at`, the signature and `signed_by` of `approver`'s decision,
        signed now: the fields every signer (an answer, a question's answer, a reopen, a grant)
        sets on what it sends. ValueError when this key may not sign for `approver`."""
        if not self.signs_for(approver):
            raise ValueError(f"{self.path} does not sign for {approver}")
        signed_at = signed_at_text(now or datetime.now(UTC))
        fields = SignedFields(
            approver=approver,
            workflow_id=workflow_id,
            run_id=run_id,
            call_id=call_id,
            arguments_sha256=arguments_sha256,
            decision=decision,
            signed_at=signed_at,
            signed_by=self.service or "",
        )
        return {
            "approver": approver,
            "signed_at": signed_at,
            "signature": self.sign(fields),
            "signed_by": self.service,
        }


# ---- each kind of decision, signed


def signed_answer(
    key: SigningKey,
    response: ToolApprovalResponse,
    *,
    approver: str,
    workflow_id: str,
    run_id: str,
    arguments_sha256: str,
    now: datetime | None = None,
) -> ToolApprovalResponse:
    """`response` as `approver` signs it with `key`, bound to this call of this run."""
    signed = key.signed_now(
        approver=approver, workflow_id=workflow_id, run_id=run_id, call_id=response.call_id,
        arguments_sha256=arguments_sha256, decision=decision_of(response.approved), now=now,
    )  # fmt: skip
    return response.model_copy(
        update={
            **signed,
            "groups": None,
            "run_id": run_id,
            "arguments_sha256": arguments_sha256,
        }
    )


def signed_reopen(
    key: SigningKey,
    request: ReopenRequest,
    *,
    approver: str,
    workflow_id: str,
    run_id: str,
    arguments_sha256: str,
    now: datetime | None = None,
) -> ReopenRequest:
    """`reopen_approval` as `approver` signs it (decision `reopen`), bound to this call of this
    run."""
    signed = key.signed_now(
        approver=approver, workflow_id=workflow_id, run_id=run_id, call_id=request.call_id,
        arguments_sha256=arguments_sha256, decision=REOPEN, now=now,
    )  # fmt: skip
    return request.model_copy(
        update={
            **signed,
            "groups": None,
        }
    )


def signed_question_answer(
    key: SigningKey,
    answer: QuestionAnswer,
    *,
    approver: str,
    workflow_id: str,
    run_id: str,
    arguments_sha256: str,
    now: datetime | None = None,
) -> QuestionAnswer:
    """A question's answer as `approver` signs it, bound to the question's call of this run."""
    signed = key.signed_now(
        approver=approver, workflow_id=workflow_id, run_id=run_id, call_id=answer.call_id,
        arguments_sha256=arguments_sha256, decision=answer_decision(answer.answer), now=now,
    )  # fmt: skip
    return answer.model_copy(
        update={
            **signed,
            "groups": None,
            "run_id": run_id,
        }
    )


def signed_grant(
    key: SigningKey,
    grant: BudgetGrant,
    *,
    approver: str,
    workflow_id: str,
    run_id: str,
    limit: int,
    now: datetime | None = None,
) -> BudgetGrant:
    """A grant as `approver` signs it, over the run's budget as it stands (`limit`)."""
    signed = key.signed_now(
        approver=approver, workflow_id=workflow_id, run_id=run_id, call_id=budget_call(limit),
        arguments_sha256="", decision=grant_decision(grant), now=now,
    )  # fmt: skip
    return grant.model_copy(
        update={
            **signed,
            "groups": [],
        }
    )


# ---- the terminal's key


@dataclass(frozen=True)
class FoundKey:
    """The terminal's signing key, or why it has none (`unsigned`: one line)."""

    key: SigningKey | None
    unsigned: str | None = None


def approvers_of(settings: Settings) -> ApproversFile | None:
    """The approvers file of `settings` (None: AGENT_APPROVERS_FILE unset)."""
    return None if settings.approvers_file is None else load_approvers(settings.approvers_file)


def find_signing_key(
    explicit: Path | None,
    settings: Settings,
    *,
    home_key: Path = DEFAULT_KEY,
    ask: Callable[[Path], bytes | None] = _passphrase,
) -> FoundKey:
    """The terminal's key: `--key FILE` (`explicit`), else AGENT_SIGNING_KEY, else
    `~/.ssh/id_ed25519` when its public key is in the approvers file. A key named (by the flag
    or the setting) must be a person's own key in the file: SigningKeyError (or the file's
    ApproversFileError) says why not. No key: FoundKey with the reason the answer goes
    unsigned."""
    named = explicit if explicit is not None else settings.signing_key
    what = "--key" if explicit is not None else "AGENT_SIGNING_KEY"
    if named is not None:
        approvers = approvers_of(settings)
        if approvers is None:
            raise SigningKeyError(
                f"{what} {named}: AGENT_APPROVERS_FILE is not set, and the terminal reads it to"
                " know whose key this is"
            )
        key = SigningKey.load(named, approvers, what=what, ask=ask)
        if key.person is None:
            raise SigningKeyError(
                f"{what} {named} is the signing service {key.service}'s key: the terminal signs"
                " with a person's own key"
            )
        return FoundKey(key)
    home = home_key.expanduser()
    try:
        present = home.is_file()
    except OSError:
        present = False
    if not present:
        unset = (
            "" if settings.approvers_file is not None else " and AGENT_APPROVERS_FILE is not set"
        )
        return FoundKey(None, f"no key (--key, AGENT_SIGNING_KEY or ~/.ssh/id_ed25519){unset}")
    approvers = approvers_of(settings)
    if approvers is None:
        return FoundKey(
            None, f"AGENT_APPROVERS_FILE is not set, so {home_key} cannot be known as yours"
        )
    public = Path(f"{home}.pub")
    try:
        blob = public_blob(public.read_text())
    except (OSError, IndexError, ValueError):
        blob = b""
    known = {k.blob for p in approvers.people() for k in p.keys}
    if blob not in known:
        return FoundKey(None, f"{home_key}'s public key is not in AGENT_APPROVERS_FILE")
    key = SigningKey.load(home, approvers, what=str(home_key), ask=ask)
    if key.person is None:
        return FoundKey(None, f"{home_key} is a signing service's key, not a person's")
    return FoundKey(key)
