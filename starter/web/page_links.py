"""The runs page's `page` parameter: where the next page starts (visibility's page token and the
rows of it already shown), signed by the server for the filter it belongs to. Temporal answers a
page token it did not write with an error it retries for many seconds, so only tokens this
server handed out for this very filter are ever sent to it; anything else is a 400 at once."""

from __future__ import annotations

import base64
import binascii
import json

from starter.runs import BadFilter, Cursor, RunFilter
from starter.web.auth import Signer

PURPOSE = "runs-page"
MAX_PAGE_CHARS = 4_096


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _bound(run_filter: RunFilter, body: bytes) -> bytes:
    return json.dumps([run_filter.status, run_filter.text]).encode() + b"|" + body


def page_link(signer: Signer, run_filter: RunFilter, cursor: Cursor) -> str:
    """The `page` value that leads to `cursor` in this filter's listing."""
    body = json.dumps(
        {"t": _b64(cursor.token) if cursor.token else None, "s": cursor.skip},
        separators=(",", ":"),
    ).encode()
    return f"{_b64(body)}.{signer.sign(PURPOSE, _bound(run_filter, body))}"


def cursor_of(signer: Signer, run_filter: RunFilter, page: str | None) -> Cursor | None:
    """The cursor a `page` value stands for (None: the first page); BadFilter when it was not
    handed out by this server for this filter."""
    if not page:
        return None
    refused = BadFilter("page: not a page of this listing (follow the page's own links)")
    if len(page) > MAX_PAGE_CHARS or not page.isascii() or "." not in page:
        raise refused
    encoded, _, signature = page.rpartition(".")
    try:
        body = _unb64(encoded)
    except (binascii.Error, ValueError):
        raise refused from None
    if not signer.signed(PURPOSE, _bound(run_filter, body), signature):
        raise refused
    try:
        fields = json.loads(body)
        token = _unb64(fields["t"]) if fields["t"] else None
        skip = int(fields["s"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise refused from None
    return Cursor(token, max(0, skip))
