"""What both HTTP servers (the web inbox and the codec server) refuse before their application sees
a request, whoever sends it and however it is sent:

- `LimitedBody`: a body larger than the limit is refused by its `Content-Length` (413, nothing
  read), and a body without one (chunked) is read only up to the limit, so a large body never
  grows the server's memory by more than the limit.
- `AsciiHeaders`: a header (a cookie, a CSRF token, a bearer token…) with a byte that is not
  ASCII is a 400, never an error deep inside the application.
- `LoopbackHostOnly`: a server that asks for no secret answers only requests addressed to a
  loopback name, so a page of another site whose name was made to resolve to 127.0.0.1 (DNS
  rebinding) reads nothing.
"""

from __future__ import annotations

import ipaddress
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

KIB = 1024
MIB = 1024 * KIB


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, no port) is this machine's loopback."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loopback_host(host_header: str) -> bool:
    """Whether a `Host` header names this machine (`localhost`, 127.0.0.0/8, `[::1]`, any port)."""
    host = host_header.strip().lower()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    return is_loopback(host)


async def refuse(send: Send, status: int, message: str, *, close: bool = False) -> None:
    """Answer `{"error": message}` with `status` (and `Connection: close` when the body was
    left unread)."""
    body = json.dumps({"error": message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or []:
        if key == name:
            return bytes(value)
    return None


class LimitedBody:
    """Read each request's body with a limit of `max_bytes` before the application runs, then
    hand it the body in one piece (later `receive` calls go to the server, so a streaming
    response still hears the client leave)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> str:
        return f"the request body is larger than {self.max_bytes // MIB} MiB"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                await refuse(send, 400, "Content-Length is not a number", close=True)
                return
            if length > self.max_bytes:
                await refuse(send, 413, self._too_large(), close=True)
                return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left before its body was complete
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                del body
                await refuse(send, 413, self._too_large(), close=True)
                return
            if not message.get("more_body", False):
                break
        whole: Message | None = {"type": "http.request", "body": bytes(body), "more_body": False}
        del body

        async def replay() -> Message:
            nonlocal whole
            if whole is not None:
                message, whole = whole, None
                return message
            return await receive()

        await self.app(scope, replay, send)


class AsciiHeaders:
    """A request whose header names or values hold a byte outside ASCII gets a 400."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for key, value in scope.get("headers") or []:
                if not (bytes(key).isascii() and bytes(value).isascii()):
                    name = bytes(key).decode("latin-1")
                    await refuse(send, 400, f"the {name} header holds a byte that is not ASCII")
                    return
        await self.app(scope, receive, send)


class LoopbackHostOnly:
    """Answer only requests whose `Host` is a loopback name; others get 403 with `message`."""

    def __init__(self, app: ASGIApp, message: str) -> None:
        self.app = app
        self.message = message

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = (_header(scope, b"host") or b"").decode("latin-1")
            if not loopback_host(host):
                await refuse(send, 403, self.message)
                return
        await self.app(scope, receive, send)
