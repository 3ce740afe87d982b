"""The codec server: lets the Temporal UI and the `temporal` CLI show encrypted payloads in
plaintext to those allowed, with the same keys as the worker.

    python -m starter codec-server [--host 127.0.0.1] [--port 8081] [--ui-origin URL]

Temporal's codec-server protocol: `POST /encode` and `POST /decode`, each with a body
`{"payloads": [...]}` in proto JSON (the `X-Namespace` header names the namespace; one set of keys
serves every namespace). `/decode` returns payloads that are not encrypted unchanged. The UI calls
from the browser, so the server answers CORS preflights from the UI's origin. With
`AGENT_CODEC_TOKEN` set, every POST needs `Authorization: Bearer TOKEN`; without a token the server
binds to loopback only, since anyone who reaches it can read every payload.

With `AGENT_PAYLOAD_STORE` set (the workers' setting), `/decode` also replaces each reference to
a stored payload with the payload itself, read from the store, so the UI and the CLI show a big
conversation instead of where it is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping

import uvicorn
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp
from temporalio.api.common.v1 import Payloads
from temporalio.converter import ExternalStorage

from runtime.codec import DecryptionError, EncryptionCodec, parse_keys
from runtime.payload_store import ENV_STORE, external_storage, resolve_references
from runtime.settings import Settings
from runtime.store_failure import PayloadStoreError
from starter.request_guards import (
    MIB,
    AsciiHeaders,
    LimitedBody,
    LoopbackHostOnly,
    is_loopback,
)

ENV_TOKEN = "AGENT_CODEC_TOKEN"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8081
DEFAULT_UI_ORIGIN = "http://localhost:8233"
ALLOW_METHODS = "POST"
ALLOW_HEADERS = "content-type, x-namespace, authorization"
MAX_BODY_BYTES = 64 * MIB
"""The largest request body read; a larger one is refused (413) before it is read."""
NOT_LOOPBACK = (
    f"this codec server asks for no token, so it answers only requests addressed to a loopback"
    f" name (127.0.0.1, localhost, [::1]); set {ENV_TOKEN} to serve other names"
)

__all__ = ["build_app", "is_loopback", "listen", "serve"]


def _cors(origin: str | None, ui_origin: str) -> dict[str, str]:
    if origin is None or origin != ui_origin:
        return {}
    return {
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Allow-Methods": ALLOW_METHODS,
        "Access-Control-Allow-Headers": ALLOW_HEADERS,
        "Access-Control-Allow-Credentials": "true",
        "Access-Control-Max-Age": "600",
        "Vary": "Origin",
    }


def build_app(
    codec: EncryptionCodec,
    *,
    ui_origin: str,
    token: str | None,
    storage: ExternalStorage | None = None,
) -> ASGIApp:
    """The ASGI app; `token` None means no bearer token is asked for, and then only requests
    addressed to a loopback name are answered; with `storage`, `/decode` resolves references
    to stored payloads first."""
    expected = f"Bearer {token}".encode() if token else None

    def endpoint(
        transform: Callable[[EncryptionCodec, Payloads], Awaitable[None]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            cors = _cors(request.headers.get("origin"), ui_origin)
            if request.method == "OPTIONS":
                if not cors:
                    return PlainTextResponse("origin not allowed\n", status_code=403)
                return Response(status_code=204, headers=cors)
            given = request.headers.get("authorization", "").encode()
            if expected is not None and not hmac.compare_digest(given, expected):
                return PlainTextResponse("unauthorized\n", status_code=401, headers=cors)
            body = await request.body()  # at most MAX_BODY_BYTES: LimitedBody read it
            payloads = Payloads()
            try:
                json_format.Parse(body or b"{}", payloads)
            except json_format.ParseError as err:
                return PlainTextResponse(
                    f"not a Payloads JSON object: {err}\n", status_code=400, headers=cors
                )
            try:
                await transform(codec, payloads)
            except DecryptionError as err:
                return PlainTextResponse(f"{err}\n", status_code=400, headers=cors)
            except PayloadStoreError as err:
                return PlainTextResponse(f"{err}\n", status_code=502, headers=cors)
            return JSONResponse(json_format.MessageToDict(payloads), headers=cors)

        return handle

    async def encode(codec: EncryptionCodec, payloads: Payloads) -> None:
        await codec.encode_wrapper(payloads)

    async def decode(codec: EncryptionCodec, payloads: Payloads) -> None:
        if storage is not None:
            resolved = await resolve_references(storage, payloads.payloads)
            del payloads.payloads[:]
            payloads.payloads.extend(resolved)
        await codec.decode_wrapper(payloads)

    app: ASGIApp = Starlette(
        routes=[
            Route("/encode", endpoint(encode), methods=["POST", "OPTIONS"]),
            Route("/decode", endpoint(decode), methods=["POST", "OPTIONS"]),
        ]
    )
    app = LimitedBody(app, MAX_BODY_BYTES)
    if token is None:
        app = LoopbackHostOnly(app, NOT_LOOPBACK)
    return AsciiHeaders(app)


class StartError(Exception):
    """The server cannot start as configured; the message is the one line to print."""


def prepare(
    host: str, environ: Mapping[str, str]
) -> tuple[EncryptionCodec, str | None, ExternalStorage | None]:
    """The codec, the token and the payload store, or a StartError (a SettingError for a bad
    key or store)."""
    keyring = parse_keys(environ)
    storage = external_storage(environ)
    if keyring is None and storage is None:
        raise StartError(
            "no encryption key: set AGENT_ENCRYPTION_KEY or AGENT_ENCRYPTION_KEYS (the worker's),"
            " or AGENT_PAYLOAD_STORE to read stored payloads"
        )
    token = Settings.read(environ).codec_token
    if token is None and not is_loopback(host):
        raise StartError(
            f"--host {host} is not a loopback address: set {ENV_TOKEN} so that only those with"
            " the token can read the payloads, or serve on 127.0.0.1"
        )
    return EncryptionCodec(keyring), token, storage


async def serve(host: str, port: int, ui_origin: str) -> int:
    """Serve until SIGINT or SIGTERM. Returns the exit code."""
    try:
        codec, token, storage = prepare(host, os.environ)
    except (StartError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    app = build_app(codec, ui_origin=ui_origin.rstrip("/"), token=token, storage=storage)
    try:
        sock = listen(host, port)
    except OSError as err:
        print(f"error: cannot listen on {host}:{port}: {err.strerror or err}", file=sys.stderr)
        return 1
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
    )
    # Our own handlers: uvicorn's would raise the signal again after shutdown, and the exit code
    # would no longer be ours.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
    key_ids = ", ".join(codec.keyring.ids()) if codec.keyring else "none"
    # The socket listens already: connections made from now on wait in its backlog.
    print(
        f"codec server at http://{host}:{sock.getsockname()[1]} (key ids {key_ids};"
        f" ui origin {ui_origin}; token {'required' if token else 'not required'}"
        f"{'; payload store ' + os.environ[ENV_STORE].strip() if storage else ''})",
        flush=True,
    )
    await server.serve(sockets=[sock])
    return 0


def listen(host: str, port: int) -> socket.socket:
    """A listening socket (`port` 0: any free port), so the address printed is the real one."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock
