"""Who may answer: the users file (salted scrypt hashes and API token digests), signed session
cookies, CSRF tokens and the slow-down after repeated failed sign-ins.

A line of the users file is `NAME:scrypt$N$r$p$SALT$HASH$TOKEN`, or with the user's groups
`NAME:scrypt$N$r$p$SALT$HASH$TOKEN:GROUP,GROUP`: SALT and HASH in base64, TOKEN the SHA-256 of
the user's API token in hex (`-` when the user has none). The groups travel with each answer
the user gives (an approver rule names the groups that may answer). The token itself is
printed once by `add-user --token` and never stored; it is 32 random bytes, so a fast digest is
enough, where a password needs the slow scrypt.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

ENV_USERS_FILE = "AGENT_WEB_USERS_FILE"
ENV_SECRET = "AGENT_WEB_SECRET"
SESSION_COOKIE = "agent_session"
SESSION_SECONDS = 12 * 3600
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf_token"
NAME = re.compile(r"[A-Za-z0-9._@+-]{1,64}")
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
FAILURES_BEFORE_SLOWDOWN = 5
FAILURE_WINDOW_SECONDS = 60.0
SLOWDOWN_SECONDS = 1.0
MAX_WAITING_PER_NAME = 8
MAX_REMEMBERED_NAMES = 10_000
WRONG_CREDENTIALS = "wrong username or password"
TOO_MANY_ATTEMPTS = "too many sign-in attempts for this name at once: try again in a minute"


class UsersFileError(ValueError):
    """The users file cannot be read or a line is malformed (the message is one line)."""


def hash_password(password: str, salt: bytes | None = None) -> str:
    """`scrypt$N$r$p$SALT$HASH` with a fresh random salt."""
    salt = salt if salt is not None else os.urandom(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
    )
    b64 = base64.b64encode
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64(salt).decode()}${b64(digest).decode()}"


def check_password(password: str, encoded: str) -> bool:
    try:
        kind, n, r, p, salt, digest = encoded.split("$")
        if kind != "scrypt":
            return False
        expected = base64.b64decode(digest)
        got = hashlib.scrypt(
            password.encode(),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            maxmem=256 * 1024 * 1024,
            dklen=len(expected),
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class User:
    name: str
    password_hash: str
    token_sha256: str | None
    groups: tuple[str, ...] = ()


def checked_groups(groups: Iterable[str]) -> tuple[str, ...]:
    """Group names as the users file keeps them (sorted, each once), or UsersFileError."""
    kept = sorted(set(groups))
    for group in kept:
        if not NAME.fullmatch(group):
            raise UsersFileError(f"a group name is 1-64 of A-Z a-z 0-9 . _ @ + -, got {group!r}")
    return tuple(kept)


def parse_users(text: str) -> dict[str, User]:
    users: dict[str, User] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, rest = line.partition(":")
        hashed, has_groups, group_text = rest.partition(":")
        parts = hashed.split("$")
        if not sep or not NAME.fullmatch(name) or len(parts) != 7 or parts[0] != "scrypt":
            raise UsersFileError(
                f"line {number} is not NAME:scrypt$N$r$p$SALT$HASH$TOKEN[:GROUP,GROUP]"
            )
        try:
            groups = checked_groups(g.strip() for g in group_text.split(",")) if has_groups else ()
        except UsersFileError as err:
            raise UsersFileError(f"line {number}: {err}") from None
        token = parts[6]
        users[name] = User(name, "$".join(parts[:6]), None if token == "-" else token, groups)
    return users


def user_line(user: User) -> str:
    groups = f":{','.join(user.groups)}" if user.groups else ""
    return f"{user.name}:{user.password_hash}${user.token_sha256 or '-'}{groups}"


def add_user(
    path: Path,
    name: str,
    password: str,
    *,
    with_token: bool,
    groups: Sequence[str] | None = None,
) -> str | None:
    """Add or replace `name` in the users file; returns the new API token when asked for one.
    `groups` sets the user's groups; None keeps those a replaced user had."""
    if not NAME.fullmatch(name):
        raise UsersFileError(f"a user name is 1-64 of A-Z a-z 0-9 . _ @ + -, got {name!r}")
    users = parse_users(path.read_text()) if path.exists() else {}
    kept = users[name].groups if name in users else ()
    chosen = kept if groups is None else checked_groups(groups)
    token = secrets.token_urlsafe(32) if with_token else None
    digest = token_digest(token) if token else None
    users[name] = User(name, hash_password(password), digest, chosen)
    text = "".join(user_line(u) + "\n" for u in users.values())
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)
    return token


class UsersFile:
    """The users file, read again whenever it changes (so `add-user` needs no restart)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._users: dict[str, User] = {}
        self.reload()

    def reload(self) -> None:
        try:
            stat = self.path.stat()
            stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            if stamp != self._stamp:
                self._users = parse_users(self.path.read_text())
                self._stamp = stamp
        except OSError as err:
            raise UsersFileError(f"cannot read {self.path}: {err.strerror or err}") from None

    def users(self) -> dict[str, User]:
        try:
            self.reload()
        except UsersFileError:
            pass  # keep the last good list while the file is being replaced
        return self._users

    def groups_of(self, name: str) -> tuple[str, ...]:
        """A user's groups (none for a name the file does not hold)."""
        user = self.users().get(name)
        return () if user is None else user.groups

    def by_token(self, token: str) -> User | None:
        digest = token_digest(token)
        found = None
        for user in self.users().values():
            if user.token_sha256 and hmac.compare_digest(user.token_sha256, digest):
                found = user
        return found


_DUMMY_HASH = hash_password("not a password", salt=b"\0" * 16)


class TooManyAttempts(Exception):
    """Too many sign-in attempts for one name are already waiting their turn."""


@dataclass
class _NameRecord:
    failures: deque[float] = field(default_factory=lambda: deque(maxlen=FAILURES_BEFORE_SLOWDOWN))
    """The times of the last few failures (only the last FAILURES_BEFORE_SLOWDOWN matter)."""
    in_flight: int = 0
    """Attempts being checked right now: each counts as a failure until it is known."""
    waiting: int = 0
    last_slot: float = float("-inf")
    """When the latest slowed attempt for this name was let through."""


@dataclass
class Attempt:
    """One sign-in attempt inside `Throttle.attempt`; call `failed()` when it failed."""

    did_fail: bool = False

    def failed(self) -> None:
        self.did_fail = True


@dataclass
class Throttle:
    """After FAILURES_BEFORE_SLOWDOWN failures for a name within a minute (attempts still being
    checked count as failures), further attempts for that name are let through one at a time,
    SLOWDOWN_SECONDS apart, whether they come one after the other or all at once; at most
    MAX_WAITING_PER_NAME wait, the rest are refused at once (TooManyAttempts). At most
    MAX_REMEMBERED_NAMES names are remembered, the least recently failed forgotten first, so
    every attempt costs the same however many names were tried."""

    clock: Callable[[], float] = time.monotonic
    max_names: int = MAX_REMEMBERED_NAMES
    _names: OrderedDict[str, _NameRecord] = field(default_factory=OrderedDict)

    def remembered(self) -> int:
        """How many names the throttle holds."""
        return len(self._names)

    def _record(self, name: str) -> _NameRecord:
        record = self._names.get(name)
        if record is None:
            record = self._names[name] = _NameRecord()
            while len(self._names) > self.max_names:
                self._names.popitem(last=False)
        return record

    def _slowed(self, record: _NameRecord, now: float) -> bool:
        horizon = now - FAILURE_WINDOW_SECONDS
        recent = sum(1 for at in record.failures if at >= horizon)
        return recent + record.in_flight >= FAILURES_BEFORE_SLOWDOWN

    @contextlib.asynccontextmanager
    async def attempt(self, name: str) -> AsyncIterator[Attempt]:
        """Wait for this name's turn, then check inside the block; raises TooManyAttempts."""
        record = self._record(name)
        now = self.clock()
        if self._slowed(record, now):
            if record.waiting >= MAX_WAITING_PER_NAME:
                raise TooManyAttempts(name)
            slot = max(now, record.last_slot) + SLOWDOWN_SECONDS
            record.last_slot = slot
            record.waiting += 1
            try:
                await asyncio.sleep(slot - now)
            finally:
                record.waiting -= 1
        record.in_flight += 1
        attempt = Attempt()
        try:
            yield attempt
        finally:
            record.in_flight -= 1
            if attempt.did_fail:
                record.failures.append(self.clock())
                if name in self._names:
                    self._names.move_to_end(name)
                else:  # forgotten meanwhile: remembered again, as the newest
                    self._names[name] = record
                    while len(self._names) > self.max_names:
                        self._names.popitem(last=False)


async def verify(users: UsersFile, throttle: Throttle, name: str, password: str) -> User | None:
    """The user when the name and password match; the same slow work for an unknown name.
    Raises TooManyAttempts when too many attempts for this name already wait."""
    async with throttle.attempt(name) as attempt:
        user = users.users().get(name)
        ok = await asyncio.to_thread(
            check_password, password, user.password_hash if user else _DUMMY_HASH
        )
        if user is None or not ok:
            attempt.failed()
            return None
        return user


@dataclass(frozen=True)
class Session:
    user: str
    sid: str
    expires: int
    user_stamp: str
    """A digest of the user's password hash when the session began: a new password (`web
    add-user` again) ends every session begun before it."""


class EndedSessions:
    """Sessions ended by signing out before they expired: refused until they would have expired.
    With a `path`, kept in that file too, so a sign-out holds across restarts (sessions outlive
    a restart when `AGENT_WEB_SECRET` is set); a file that cannot be written keeps them in
    memory only, with one warning."""

    def __init__(self, path: Path | None = None, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._ended: dict[str, int] = {}
        self._warned = False
        if path is not None and path.exists():
            try:
                for line in path.read_text().splitlines():
                    sid, _, expires = line.partition(" ")
                    if sid and expires.isdigit():
                        self._ended[sid] = int(expires)
            except OSError as err:
                self._warn(f"cannot read {path}: {err.strerror or err}")
            self._prune()
            self._write_all()

    def __contains__(self, sid: object) -> bool:
        return isinstance(sid, str) and sid in self._ended

    def __len__(self) -> int:
        return len(self._ended)

    def end(self, session: Session) -> None:
        self._prune()
        self._ended[session.sid] = session.expires
        if self.path is None:
            return
        try:
            with self.path.open("a") as handle:
                handle.write(f"{session.sid} {session.expires}\n")
        except OSError as err:
            self._warn(f"cannot write {self.path}: {err.strerror or err}")

    def _prune(self) -> None:
        now = self._clock()
        self._ended = {sid: at for sid, at in self._ended.items() if at > now}

    def _write_all(self) -> None:
        if self.path is None:
            return
        text = "".join(f"{sid} {at}\n" for sid, at in self._ended.items())
        try:
            temporary = self.path.with_name(self.path.name + ".tmp")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
            os.replace(temporary, self.path)
        except OSError as err:
            self._warn(f"cannot write {self.path}: {err.strerror or err}")

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("signed-out sessions are kept in memory only: %s", message)


def _ascii_equal(given: str, expected: str) -> bool:
    """A constant-time comparison that takes any text (a header may hold anything)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode())


class Signer:
    """HMAC-SHA256 signed session cookies and the CSRF token bound to each session."""

    def __init__(self, secret: bytes) -> None:
        self._key = secret

    @classmethod
    def of(cls, secret: str | None) -> Signer:
        """`AGENT_WEB_SECRET` keeps sessions across restarts; without it, a random key (every
        restart signs everyone out)."""
        return cls(secret.encode() if secret else os.urandom(32))

    def _mac(self, data: bytes) -> str:
        return base64.urlsafe_b64encode(hmac.new(self._key, data, hashlib.sha256).digest()).decode()

    def sign(self, purpose: str, data: bytes) -> str:
        """A signature of `data` for one purpose (a signature for one is no good for another)."""
        return self._mac(purpose.encode() + b"|" + data)

    def signed(self, purpose: str, data: bytes, signature: str) -> bool:
        return signature.isascii() and _ascii_equal(signature, self.sign(purpose, data))

    def user_stamp(self, user: User) -> str:
        """What a session of `user` carries to show it began under the current password."""
        return self._mac(b"user|" + user.name.encode() + b"|" + user.password_hash.encode())[:22]

    def new_session(self, user: User, now: float | None = None) -> tuple[Session, str]:
        session = Session(
            user.name,
            secrets.token_urlsafe(16),
            int((now or time.time()) + SESSION_SECONDS),
            self.user_stamp(user),
        )
        body = json.dumps(
            {"u": session.user, "s": session.sid, "e": session.expires, "p": session.user_stamp}
        )
        data = base64.urlsafe_b64encode(body.encode())
        return session, f"{data.decode()}.{self._mac(data)}"

    def read_session(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session a cookie holds when its signature is right and it has not expired (the
        caller checks the user, the stamp and whether it was ended)."""
        if not cookie or "." not in cookie or not cookie.isascii():
            return None
        data, _, mac = cookie.rpartition(".")
        if not _ascii_equal(mac, self._mac(data.encode())):
            return None
        try:
            body = json.loads(base64.urlsafe_b64decode(data.encode()))
            session = Session(str(body["u"]), str(body["s"]), int(body["e"]), str(body["p"]))
        except (ValueError, KeyError, TypeError):
            return None
        return session if session.expires > (now or time.time()) else None

    def session_of(self, cookie: str | None, users: dict[str, User]) -> Session | None:
        """The live session of a cookie: signed, not expired, of a user who still exists and
        whose password has not changed since."""
        session = self.read_session(cookie)
        if session is None:
            return None
        user = users.get(session.user)
        if user is None or not _ascii_equal(session.user_stamp, self.user_stamp(user)):
            return None
        return session

    def csrf_token(self, sid: str) -> str:
        return self._mac(b"csrf|" + sid.encode())

    def csrf_ok(self, sid: str, given: str | None) -> bool:
        return bool(given) and _ascii_equal(given or "", self.csrf_token(sid))
