"""Who is asking, and whether a request may change anything.

Signed-in mode (a users file): a signed session cookie, or `Authorization: Bearer TOKEN` for
the API; a request that changes anything with the cookie must carry the session's CSRF token
(header `X-CSRF-Token` or form field `csrf_token`). Local mode (no users file): everyone on this
machine is the operating-system user, and a request that changes anything is refused when its
`Origin` or `Sec-Fetch-Site` says another site sent it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from starter.web.auth import CSRF_HEADER, SESSION_COOKIE, EndedSessions, Session, Signer, UsersFile

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none';"
    " object-src 'none'"
)


@dataclass(frozen=True)
class Identity:
    user: str
    via: Literal["session", "token", "local"]
    sid: str | None = None


@dataclass
class Guard:
    signer: Signer
    users: UsersFile | None
    local_user: str
    ended: EndedSessions = field(default_factory=EndedSessions)
    """Sessions signed out before they expired."""

    @property
    def local(self) -> bool:
        return self.users is None

    def identify(self, request: Request) -> Identity | None:
        if self.users is None:
            return Identity(self.local_user, "local")
        header = request.headers.get("authorization", "")
        if header[:7].lower() == "bearer ":
            user = self.users.by_token(header[7:].strip())
            return Identity(user.name, "token") if user else None
        session = self.session(request)
        return Identity(session.user, "session", session.sid) if session else None

    def session(self, request: Request) -> Session | None:
        """The request's live session: signed, not expired, not signed out, and begun under
        its user's current password."""
        if self.users is None:
            return None
        found = self.signer.session_of(request.cookies.get(SESSION_COOKIE), self.users.users())
        return None if found is None or found.sid in self.ended else found

    def csrf_for(self, identity: Identity) -> str:
        return self.signer.csrf_token(identity.sid) if identity.sid else ""

    def change_refusal(
        self, request: Request, identity: Identity, form_token: str | None = None
    ) -> str | None:
        """Why this request may not change anything, or None when it may."""
        if identity.via == "token":
            return None
        if identity.via == "session":
            given = request.headers.get(CSRF_HEADER) or form_token
            if identity.sid is None or not self.signer.csrf_ok(identity.sid, given):
                return "missing or wrong CSRF token"
            return None
        return cross_site(request)


def cross_site(request: Request) -> str | None:
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in {"same-origin", "none"}:
        return f"refused: a request from another site (Sec-Fetch-Site: {fetch_site})"
    origin = request.headers.get("origin")
    if origin is not None:
        # The host and port only: behind a proxy that ends TLS the scheme seen here differs.
        own = request.headers.get("host", "").lower()
        if origin == "null" or urlsplit(origin).netloc.lower() != own:
            return f"refused: a request from another site (Origin: {origin})"
    return None


class SecurityHeaders:
    """Every response: the page may load nothing from another origin, nor be framed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [
                    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"same-origin"),
                    (b"cache-control", b"no-store"),
                ]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)
