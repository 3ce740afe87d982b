"""Reading an outside server's answer without letting it decide how much is read.

A notification receiver's answer and a model server's error body are only ever shown as a short
excerpt, yet a hostile (or broken) server can send hundreds of megabytes: read whole, decoded and
escaped on the worker's event loop, such a body stops the worker from answering anything for
tens of seconds per attempt. So these bodies are streamed, and at most `BODY_LIMIT` bytes are
kept: the rest is never read, and nothing is done with the body before it is cut.

The bytes are read as they came over the wire (`aiter_raw`), so a compressed body cannot grow
past the limit while it is inflated: gzip and deflate are inflated here, to the limit at most;
the requests ask for no other (`ACCEPT_ENCODING`), and a body sent in another anyway is not
shown.

    async with http.stream("POST", url, ...) as response:
        text = await read_bounded(response)
"""

from __future__ import annotations

import zlib

import httpx

ACCEPT_ENCODING = "gzip, deflate"
"""What the requests whose answers are read here accept: the encodings inflated here, bounded (an
httpx with brotli or zstd installed would otherwise ask for those too)."""
BODY_LIMIT = 64 * 1024
"""The most bytes of an outside server's answer that are read (and, inflated, kept)."""
_INFLATE_WBITS = {"gzip": zlib.MAX_WBITS | 16, "x-gzip": zlib.MAX_WBITS | 16, "deflate": 0}
"""zlib's window bits per content encoding (`deflate`: 0 takes the window from its header)."""


async def read_bounded_bytes(response: httpx.Response, limit: int = BODY_LIMIT) -> bytes:
    """At most `limit` bytes of the body, as sent (still encoded), read in a stream."""
    data = bytearray()
    async for chunk in response.aiter_raw():
        data.extend(chunk[: limit - len(data)])
        if len(data) >= limit:
            break
    return bytes(data)


def inflated(raw: bytes, encoding: str, limit: int = BODY_LIMIT) -> bytes | None:
    """`raw` decoded from its content encoding, at most `limit` bytes of it; None when the
    encoding is not one read here (or the bytes are not in it)."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return raw[:limit]
    wbits = _INFLATE_WBITS.get(encoding)
    if wbits is None:
        return None
    try:
        return zlib.decompressobj(wbits).decompress(raw, limit)
    except zlib.error:
        if encoding != "deflate":
            return None
        try:  # a deflate body without its zlib header, as some servers send it
            return zlib.decompressobj(-zlib.MAX_WBITS).decompress(raw, limit)
        except zlib.error:
            return None


async def read_bounded(response: httpx.Response, limit: int = BODY_LIMIT) -> str:
    """The start of the body as text: at most `limit` bytes read and kept, never more."""
    raw = await read_bounded_bytes(response, limit)
    encoding = response.headers.get("content-encoding", "")
    body = inflated(raw, encoding, limit)
    if body is None:
        return f"({len(raw)} bytes in content encoding {encoding.strip()[:40]!r}, not shown)"
    return body.decode("utf-8", errors="replace")
