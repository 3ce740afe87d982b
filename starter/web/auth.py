"""Who may answer: the users file (salted scrypt hashes and API token digests), signed session
cookies, CSRF tokens and the slow-down after repeated failed sign-ins.

A line of the users file is `NAME:scrypt$N$r$p$SALT$HASH$TOKEN`: SALT and HASH in base64, TOKEN
the SHA-256 of the user's API token in hex (`-` when the user has none). The token itself is
printed once by `add-user --token` and never stored; it is 32 random bytes, so a fast digest is
enough, where a password needs the slow scrypt.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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
WRONG_CREDENTIALS = "wrong username or password"


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


def parse_users(text: str) -> dict[str, User]:
    users: dict[str, User] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, rest = line.partition(":")
        parts = rest.split("$")
        if not sep or not NAME.fullmatch(name) or len(parts) != 7 or parts[0] != "scrypt":
            raise UsersFileError(f"line {number} is not NAME:scrypt$N$r$p$SALT$HASH$TOKEN")
        token = parts[6]
        users[name] = User(name, "$".join(parts[:6]), None if token == "-" else token)
    return users


def user_line(user: User) -> str:
    return f"{user.name}:{user.password_hash}${user.token_sha256 or '-'}"


def add_user(path: Path, name: str, password: str, *, with_token: bool) -> str | None:
    """Add or replace `name` in the users file; returns the new API token when asked for one."""
    if not NAME.fullmatch(name):
        raise UsersFileError(f"a user name is 1-64 of A-Z a-z 0-9 . _ @ + -, got {name!r}")
    users = parse_users(path.read_text()) if path.exists() else {}
    token = secrets.token_urlsafe(32) if with_token else None
    users[name] = User(name, hash_password(password), token_digest(token) if token else None)
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
        self._stamp: tuple[float, int] | None = None
        self._users: dict[str, User] = {}
        self.reload()

    def reload(self) -> None:
        try:
            stat = self.path.stat()
            stamp = (stat.st_mtime, stat.st_size)
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

    def by_token(self, token: str) -> User | None:
        digest = token_digest(token)
        found = None
        for user in self.users().values():
            if user.token_sha256 and hmac.compare_digest(user.token_sha256, digest):
                found = user
        return found


_DUMMY_HASH = hash_password("not a password", salt=b"\0" * 16)


@dataclass
class Throttle:
    """After FAILURES_BEFORE_SLOWDOWN failures for a name within a minute, every further attempt
    for that name waits SLOWDOWN_SECONDS first (right password or not)."""

    clock: Callable[[], float] = time.monotonic
    _failures: dict[str, deque[float]] = field(default_factory=dict)

    def delay(self, name: str) -> float:
        recent = self._recent(name)
        return SLOWDOWN_SECONDS if len(recent) >= FAILURES_BEFORE_SLOWDOWN else 0.0

    def failed(self, name: str) -> None:
        self._recent(name).append(self.clock())

    def _recent(self, name: str) -> deque[float]:
        if len(self._failures) > 10_000:  # many names: forget the quiet ones
            for key in [k for k, v in self._failures.items() if not v]:
                del self._failures[key]
        found = self._failures.setdefault(name, deque())
        horizon = self.clock() - FAILURE_WINDOW_SECONDS
        while found and found[0] < horizon:
            found.popleft()
        return found


async def verify(users: UsersFile, throttle: Throttle, name: str, password: str) -> User | None:
    """The user when the name and password match; the same slow work for an unknown name."""
    wait = throttle.delay(name)
    if wait:
        await asyncio.sleep(wait)
    user = users.users().get(name)
    ok = await asyncio.to_thread(
        check_password, password, user.password_hash if user else _DUMMY_HASH
    )
    if user is None or not ok:
        throttle.failed(name)
        return None
    return user


@dataclass(frozen=True)
class Session:
    user: str
    sid: str
    expires: int


class Signer:
    """HMAC-SHA256 signed session cookies and the CSRF token bound to each session."""

    def __init__(self, secret: bytes) -> None:
        self._key = secret

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Signer:
        """`AGENT_WEB_SECRET` keeps sessions across restarts; without it, a random key (every
        restart signs everyone out)."""
        value = (environ if environ is not None else os.environ).get(ENV_SECRET)
        return cls(value.encode() if value else os.urandom(32))

    def _mac(self, data: bytes) -> str:
        return base64.urlsafe_b64encode(hmac.new(self._key, data, hashlib.sha256).digest()).decode()

    def new_session(self, user: str, now: float | None = None) -> tuple[Session, str]:
        session = Session(
            user, secrets.token_urlsafe(16), int((now or time.time()) + SESSION_SECONDS)
        )
        body = json.dumps({"u": session.user, "s": session.sid, "e": session.expires})
        data = base64.urlsafe_b64encode(body.encode())
        return session, f"{data.decode()}.{self._mac(data)}"

    def read_session(self, cookie: str | None, now: float | None = None) -> Session | None:
        if not cookie or "." not in cookie:
            return None
        data, _, mac = cookie.rpartition(".")
        if not hmac.compare_digest(mac, self._mac(data.encode())):
            return None
        try:
            body = json.loads(base64.urlsafe_b64decode(data.encode()))
            session = Session(str(body["u"]), str(body["s"]), int(body["e"]))
        except (ValueError, KeyError, TypeError):
            return None
        return session if session.expires > (now or time.time()) else None

    def csrf_token(self, sid: str) -> str:
        return self._mac(b"csrf|" + sid.encode())

    def csrf_ok(self, sid: str, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(self.csrf_token(sid), given or "")
