"""Who is asking, and whether a request may change anything.

Signed-in mode (a users file): a signed session cookie, or `Authorization: Bearer TOKEN` for
the API; a request that changes anything with the cookie must carry the session's CSRF token
(header `X-CSRF-Token` or form field `csrf_token`). Local mode (no users file): everyone on this
machine is the operating-system user, and a request that changes anything is refused when its
`Origin` or `Sec-Fetch-Site` says another site sent it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from starter.web.auth import CSRF_HEADER, SESSION_COOKIE, Signer, UsersFile

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
        session = self.signer.read_session(request.cookies.get(SESSION_COOKIE))
        if session is None or session.user not in self.users.users():
            return None
        return Identity(session.user, "session", session.sid)

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


def loopback_host(host_header: str) -> bool:
    """Whether a `Host` header names this machine (`localhost`, 127.0.0.0/8, `[::1]`)."""
    from starter.codec_server import is_loopback

    host = host_header.strip().lower()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    return is_loopback(host)


class LoopbackOnly:
    """Local mode answers only requests addressed to a loopback name: a page of another site
    whose name was made to resolve to 127.0.0.1 (DNS rebinding) is refused."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            host = headers.get(b"host", b"").decode("latin-1")
            if not loopback_host(host):
                body = b'{"error": "local mode answers only to a loopback host name"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 403,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


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
