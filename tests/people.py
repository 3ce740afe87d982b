"""People with keys of their own, for the tests: Ed25519 keys (made in this process, or by
`ssh-keygen -t ed25519` for the tests of real programs), the approvers file they are listed in,
and each person's signing key as the terminal loads it."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runtime.approvers import AnswerVerifier, ApproversFile, load_approvers, openssh_public
from runtime.signing_key import SigningKey, signed_answer
from workflows.model import ToolApprovalResponse


def write_private_key(key: Ed25519PrivateKey, path: Path) -> Path:
    """`key` as an OpenSSH private key file (and its `.pub` beside it), mode 0600."""
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    Path(f"{path}.pub").write_bytes(openssh_public(key.public_key()) + b"\n")
    return path


def ssh_keygen(path: Path, comment: str = "test") -> Path:
    """A key made as a person makes one: `ssh-keygen -t ed25519 -N "" -f PATH`."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path


def public_line(path: Path) -> str:
    """The `ssh-ed25519 AAAA… comment` text of a private key file's `.pub`."""
    return Path(f"{path}.pub").read_text().strip()


@dataclass
class People:
    """An approvers file and the private keys of everyone in it (`key_files`)."""

    folder: Path
    groups: dict[str, list[str]]
    via: dict[str, list[str]] = field(default_factory=dict)
    """Each signing service and the people it may sign for."""
    key_files: dict[str, Path] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.folder / "approvers"

    @property
    def approvers(self) -> ApproversFile:
        return load_approvers(self.path)

    def key(self, name: str) -> SigningKey:
        """`name`'s own key, or a service's, as a program loads it."""
        return SigningKey.load(self.key_files[name], self.approvers)

    def verifier(self) -> AnswerVerifier:
        """The worker's `verify_answer` over this file."""
        return AnswerVerifier(self.approvers)


def make_people(
    folder: Path,
    groups: Mapping[str, Sequence[str]],
    *,
    via: Mapping[str, Sequence[str]] | None = None,
    keygen: bool = False,
    own_keys: bool = True,
) -> People:
    """An approvers file in `folder`: each person of `groups` with a key of their own (unless
    `own_keys` is False: then only those a service signs for, through it), each service of
    `via` with its key and the people it may sign for. `keygen`: the keys are made by
    ssh-keygen, else in this process."""
    folder.mkdir(parents=True, exist_ok=True)
    people = People(folder, {n: list(g) for n, g in groups.items()}, {s: list(p) for s, p in
                    (via or {}).items()})  # fmt: skip
    lines = ["# made by tests/people.py"]
    for name, its_groups in groups.items():
        shown = ",".join(its_groups) or "-"
        if own_keys:
            path = folder / f"{name}.key"
            if keygen:
                ssh_keygen(path, name)
            else:
                write_private_key(Ed25519PrivateKey.generate(), path)
            people.key_files[name] = path
            lines.append(f"{name} {shown} {public_line(path)}")
        for service, signs_for in (via or {}).items():
            if name in signs_for:
                lines.append(f"{name} {shown} via:{service}")
    for service in via or {}:
        path = folder / f"{service}.key"
        if keygen:
            ssh_keygen(path, service)
        else:
            write_private_key(Ed25519PrivateKey.generate(), path)
        people.key_files[service] = path
        lines.append(f"{service} @service {public_line(path)}")
    people.path.write_text("\n".join(lines) + "\n")
    return people


def module_people(
    groups: Mapping[str, Sequence[str]], *, via: Mapping[str, Sequence[str]] | None = None
) -> People:
    """`make_people` in a folder of its own, for a test module's constants."""
    return make_people(Path(tempfile.mkdtemp(prefix="people-")), groups, via=via)


def signed_vote(
    key: SigningKey,
    call_id: str,
    *,
    workflow_id: str,
    run_id: str,
    arguments_sha256: str,
    approved: bool = True,
    approver: str | None = None,
    reason: str | None = None,
) -> dict[str, object]:
    """An answer signed with `key` (as its person, or `approver` through a service), as JSON."""
    name = approver or key.person
    assert name is not None
    response = ToolApprovalResponse(call_id=call_id, approved=approved, reason=reason)
    return signed_answer(
        key,
        response,
        approver=name,
        workflow_id=workflow_id,
        run_id=run_id,
        arguments_sha256=arguments_sha256,
    ).model_dump(mode="json")
