"""`AGENT_APPROVERS_FILE`: who the people are, their groups, and the keys they sign with.

The operator's file, read by the worker (which verifies every signed decision with it: the
`verify_answer` local activity and the re-count of `execute_tool`), by the web app (to know for
whom its signing service may sign) and by the terminal (to know whose key it holds). One line per
key:

    # NAME   GROUPS       KEY (an OpenSSH Ed25519 public key, as ssh-keygen -t ed25519 makes)
    alice    ops,oncall   ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA... alice@laptop
    alice    ops,oncall   ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA... alice@desktop
    ben      ops          ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA... ben
    carol    -            via:web
    ben      ops          via:web
    web      @service     ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA... the web app

GROUPS is `a,b` or `-` (none). `NAME GROUPS via:SERVICE` lets NAME's decisions come through the
signing service SERVICE (a `SERVICE @service KEY` line). A person may have several lines; they
must agree on the groups. A name is a person or a service, never both, and a key belongs to one
name only. Blank lines and lines starting with `#` are skipped. Anything else stops the program
(`ApproversFileError`, one line: `AGENT_APPROVERS_FILE line N: …`).

A person's groups are this file's, never what a client says: `verify` answers with them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from temporalio import activity

from runtime.setting_error import SettingError
from workflows import names
from workflows.people.signatures import VerifyRequest, VerifyVerdict, canonical_bytes
from workflows.shown import shorten

VARIABLE = "AGENT_APPROVERS_FILE"
KEY_TYPE = "ssh-ed25519"
SERVICE_MARK = "@service"
VIA = "via:"
NAME = re.compile(r"[A-Za-z0-9._@+-]{1,64}")
"""A person's, a service's and a group's name (as the approver rules' groups are spelt)."""
MAX_FILE_BYTES = 1_000_000
SIGNATURE_BYTES = 64

DOES_NOT_VERIFY = (
    "its signature does not verify (forged, changed, or signed for another call, run, arguments"
    " or person)"
)
NO_FILE = (
    "this worker has no AGENT_APPROVERS_FILE, so it cannot check a signed decision (no one's"
    " key is known to it)"
)


class ApproversFileError(SettingError):
    """An approvers file no program may start with: one line naming the variable, and the line."""


def fingerprint(blob: bytes) -> str:
    """A key's fingerprint as `ssh-keygen -l` prints it: `SHA256:` and the unpadded base64 of
    the SHA-256 of the key's wire form."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


@dataclass(frozen=True)
class Key:
    """One public key of the file, and the line it is on."""

    public: Ed25519PublicKey
    blob: bytes
    """The key's OpenSSH wire form (what its fingerprint is over)."""
    line: int
    comment: str

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.blob)

    def verifies(self, signature: bytes, data: bytes) -> bool:
        try:
            self.public.verify(signature, data)
        except InvalidSignature:
            return False
        return True


@dataclass
class Person:
    """One person: their groups, their own keys, and the signing services that may sign for
    them."""

    name: str
    groups: tuple[str, ...]
    keys: list[Key] = field(default_factory=list)
    via: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)


@dataclass
class Service:
    """One signing service (the web app): it signs for the people whose `via:` names it."""

    name: str
    keys: list[Key] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)


def public_blob(raw: bytes | str) -> bytes:
    """The OpenSSH wire form of a public key given as `ssh-ed25519 AAAA… [comment]` (or the key
    object's own OpenSSH text)."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    return base64.b64decode(text.split()[1])


def openssh_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)


class ApproversFile:
    """The people and services of one approvers file (`load_approvers`)."""

    def __init__(self, path: Path, people: dict[str, Person], services: dict[str, Service]):
        self.path = path
        self._people = people
        self._services = services
        self._by_blob: dict[bytes, str] = {}
        for person in people.values():
            self._by_blob.update({k.blob: person.name for k in person.keys})
        for service in services.values():
            self._by_blob.update({k.blob: service.name for k in service.keys})

    # ---- who is who

    def people(self) -> list[Person]:
        """Every person, in the order of their first line."""
        return sorted(self._people.values(), key=lambda p: p.lines[0])

    def services(self) -> list[Service]:
        return sorted(self._services.values(), key=lambda s: s.lines[0])

    def person(self, name: str) -> Person | None:
        return self._people.get(name)

    def groups_of(self, name: str) -> tuple[str, ...]:
        """A person's groups (none for a name the file does not have)."""
        person = self._people.get(name)
        return () if person is None else person.groups

    def person_of(self, public_key: Ed25519PublicKey) -> str | None:
        """Whose own key `public_key` is, or None."""
        name = self._by_blob.get(public_blob(openssh_public(public_key)))
        return name if name in self._people else None

    def service_of(self, public_key: Ed25519PublicKey) -> str | None:
        """Which signing service's key `public_key` is, or None."""
        name = self._by_blob.get(public_blob(openssh_public(public_key)))
        return name if name in self._services else None

    def may_sign_through(self, name: str, service: str) -> bool:
        """Whether the file lets `name`'s decisions come through the signing service `service`."""
        person = self._people.get(name)
        return person is not None and service in self._services and service in person.via

    def signs_through(self, service: str) -> list[str]:
        """The people a signing service may sign for, in the file's order."""
        return [p.name for p in self.people() if service in p.via]

    def group_sizes(self) -> dict[str, int]:
        """Each group and how many people are in it."""
        sizes: dict[str, int] = {}
        for person in self._people.values():
            for group in person.groups:
                sizes[group] = sizes.get(group, 0) + 1
        return dict(sorted(sizes.items()))

    def __len__(self) -> int:
        return len(self._people)

    # ---- the worker's check

    def verify(self, request: VerifyRequest) -> VerifyVerdict:
        """Whether a decision's signature verifies: by the person's own key, or (`signed_by`) by
        a signing service the file lets sign for them. Valid: with the person's groups as this
        file has them (a list, possibly empty) and the service, if one signed."""
        shown = shorten(request.approver, 64)
        person = self._people.get(request.approver)
        if person is None:
            what = (
                "a signing service, not a person"
                if request.approver in self._services
                else ("not in the worker's approvers file")
            )
            return VerifyVerdict(valid=False, problem=f"'{shown}' is {what}")
        try:
            signature = base64.b64decode(request.signature, validate=True)
        except (binascii.Error, ValueError):
            signature = b""
        if len(signature) != SIGNATURE_BYTES:
            return VerifyVerdict(
                valid=False,
                problem="its signature is not an Ed25519 signature (the shared key's signatures"
                " of before are not taken: each person signs with their own key)",
            )
        data = canonical_bytes(request.fields())
        if request.signed_by:
            service = shorten(request.signed_by, 64)
            found = self._services.get(request.signed_by)
            if found is None:
                problem = f"the signing service '{service}' is not in the worker's approvers file"
                return VerifyVerdict(valid=False, problem=problem)
            if request.signed_by not in person.via:
                return VerifyVerdict(
                    valid=False,
                    problem=f"{shown} may not sign through '{service}' (the worker's approvers"
                    f" file has no `{shown} … via:{service}` line)",
                )
            keys = found.keys
        else:
            keys = person.keys
            if not keys:
                return VerifyVerdict(
                    valid=False,
                    problem=f"{shown} has no key of their own in the worker's approvers file",
                )
        if not any(key.verifies(signature, data) for key in keys):
            return VerifyVerdict(valid=False, problem=DOES_NOT_VERIFY)
        return VerifyVerdict(
            valid=True, groups=list(person.groups), signed_by=request.signed_by or None
        )


def load_approvers(path: Path | str) -> ApproversFile:
    """The approvers file at `path`; ApproversFileError (one line) for a file that cannot be
    read or a line that is not one of the forms above."""
    path = Path(path)
    try:
        data = path.read_bytes()[: MAX_FILE_BYTES + 1]
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ApproversFileError(f"{VARIABLE} {path} cannot be read: {reason}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ApproversFileError(f"{VARIABLE} {path} is over {MAX_FILE_BYTES:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ApproversFileError(f"{VARIABLE} {path} is not UTF-8 text") from None
    return parse_approvers(text, path)


def _bad(number: int, problem: str) -> ApproversFileError:
    return ApproversFileError(f"{VARIABLE} line {number}: {problem}")


def _name(value: str, number: int, what: str) -> str:
    if not NAME.fullmatch(value):
        shown = shorten(value, 40)
        raise _bad(number, f"{what} {shown!r} is not a name (letters, digits, . _ @ + -; 1 to 64)")
    return value


def _groups(value: str, number: int) -> tuple[str, ...]:
    if value == "-":
        return ()
    return tuple(sorted({_name(g, number, "group") for g in value.split(",")}))


def _key(words: list[str], number: int) -> Key:
    kind = words[0]
    if kind != KEY_TYPE:
        shown = shorten(kind, 40)
        raise _bad(number, f"only {KEY_TYPE} keys are taken, not {shown!r}")
    if len(words) < 2:
        raise _bad(number, f"the {KEY_TYPE} key has no key data")
    try:
        blob = base64.b64decode(words[1], validate=True)
        public = serialization.load_ssh_public_key(f"{kind} {words[1]}".encode())
    except (binascii.Error, ValueError, UnsupportedAlgorithm) as err:
        raise _bad(number, f"the {KEY_TYPE} key does not load ({err})") from None
    if not isinstance(public, Ed25519PublicKey):
        raise _bad(number, f"the key is not an Ed25519 key ({type(public).__name__})")
    return Key(public=public, blob=blob, line=number, comment=" ".join(words[2:]))


def parse_approvers(text: str, path: Path) -> ApproversFile:
    """The approvers file's text (`load_approvers`)."""
    people: dict[str, Person] = {}
    services: dict[str, Service] = {}
    owners: dict[bytes, tuple[str, int]] = {}
    vias: list[tuple[str, int]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if len(words) < 3:
            raise _bad(number, "expected NAME GROUPS KEY, NAME GROUPS via:SERVICE or SERVICE"
                       " @service KEY")  # fmt: skip
        name = _name(words[0], number, "name")
        if words[1] == SERVICE_MARK:
            if name in people:
                raise _bad(number, f"{name} is a person (line {people[name].lines[0]}), not a"
                           " service: a name is one or the other")  # fmt: skip
            key = _key(words[2:], number)
            service = services.setdefault(name, Service(name))
            service.keys.append(key)
            service.lines.append(number)
        else:
            if name in services:
                raise _bad(number, f"{name} is a signing service (line"
                           f" {services[name].lines[0]}), not a person: a name is one or the"
                           " other")  # fmt: skip
            groups = _groups(words[1], number)
            person = people.get(name)
            if person is None:
                person = people[name] = Person(name, groups)
            elif person.groups != groups:
                first = person.lines[0]
                had = ",".join(person.groups) or "-"
                raise _bad(number, f"{name}'s groups ({words[1]}) differ from line {first}'s"
                           f" ({had}): a person's lines must agree on their groups")  # fmt: skip
            person.lines.append(number)
            if words[2].startswith(VIA):
                if len(words) > 3:
                    raise _bad(number, "a via:SERVICE line ends after the service's name")
                service_name = _name(words[2][len(VIA) :], number, "service")
                if service_name not in person.via:
                    person.via.append(service_name)
                vias.append((service_name, number))
                continue
            key = _key(words[2:], number)
            person.keys.append(key)
        owner = owners.get(key.blob)
        if owner is not None and owner[0] != name:
            raise _bad(number, f"this key is {owner[0]}'s already (line {owner[1]}): a key"
                       " belongs to one name only")  # fmt: skip
        owners.setdefault(key.blob, (name, number))
    for service_name, number in vias:
        if service_name not in services:
            raise _bad(number, f"via:{service_name} names no signing service (a"
                       f" `{service_name} {SERVICE_MARK} KEY` line)")  # fmt: skip
    return ApproversFile(path, people, services)


class AnswerVerifier:
    """The `verify_answer` local activity, over the worker's approvers file (None: it has
    none, and refuses every signed decision saying so)."""

    def __init__(self, approvers: ApproversFile | None) -> None:
        self.approvers = approvers

    @activity.defn(name=names.ACTIVITY_VERIFY_ANSWER)
    async def verify_answer(self, request: VerifyRequest) -> VerifyVerdict:
        if self.approvers is None:
            return VerifyVerdict(valid=False, problem=NO_FILE)
        return self.approvers.verify(request)
