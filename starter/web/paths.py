"""Workflow ids in URLs. Temporal allows any text as a workflow id, `/` included, so a run's pages
and API routes (`/runs/{id}`, `/api/runs/{id}/approvals`, …) carry the id as one percent-encoded
path segment (`team%2Fnightly`), and routing must look at the path as it was sent: the decoded
path has lost which `/` separated segments and which belonged to the id.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send


def segment(workflow_id: str) -> str:
    """`workflow_id` as one path segment: every reserved character encoded, and an id made of
    dots only (`.`, `..`) too, since browsers would read those as "this or the parent folder"."""
    encoded = quote(workflow_id, safe="")
    if encoded and set(encoded) == {"."}:
        encoded = "%2E" * len(encoded)
    return encoded


def _keep_separators(raw_segment: str) -> str:
    decoded = unquote(raw_segment)
    return decoded.replace("%", "%25").replace("/", "%2F")


class SegmentedPath:
    """Route on the path as sent: each segment decoded, except that a `/` or `%` inside a
    segment stays encoded (`%2F`, `%25`), so `/runs/a%2Fb/live` is the `live` route of run
    `a/b`. Handlers read the id with `workflow_id_of`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] in {"http", "websocket"} else None
        if isinstance(raw, bytes | bytearray):
            text = bytes(raw).decode("latin-1").split("?", 1)[0]
            scope = {**scope, "path": "/".join(_keep_separators(s) for s in text.split("/"))}
        await self.app(scope, receive, send)


def workflow_id_of(request: Request) -> str:
    """The workflow id of a run route (`{workflow_id}`), as Temporal knows it."""
    return unquote(str(request.path_params["workflow_id"]))


def path_as_sent(request: Request) -> str:
    """The request's path with its segments encoded as `SegmentedPath` left them, ready to be
    sent back (e.g. as the page to return to after signing in)."""
    return quote(request.url.path, safe="/%")
