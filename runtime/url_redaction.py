"""The one form in which a URL that may carry credentials is ever shown (`redact_url`): the
settings' refusals quote an endpoint so, and the model client's messages and logs
(`activities.redaction`) do too."""

from __future__ import annotations

import urllib.parse

MASK = "***"


def redact_url(url: str) -> str:
    """The URL as it may be shown: user info becomes `***@`, every query value `***` (a bare
    query item too), a fragment `#***`. Scheme, host, port and path stay, so it still says which
    endpoint it is. Never raises."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unreadable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
    query = "&".join(_redact_query_item(item) for item in parts.query.split("&") if item)
    fragment = MASK if parts.fragment else ""
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def _redact_query_item(item: str) -> str:
    name, equals, _ = item.partition("=")
    return f"{name}={MASK}" if equals else MASK
