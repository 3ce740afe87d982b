"""Keeping the LLM key and endpoint credentials out of every text a person or the history sees.

An endpoint URL may carry credentials: user info (`https://user:pw@host/v1`) or a query
(`?key=…`, `?api-version=…&sig=…`). `redact_url` (`runtime.url_redaction`) is the only form in
which such a URL is ever shown; `Redactor.scrub` removes the key and those credentials from any
other text (a provider's error body that echoes them, an HTTP library's message that quotes a
header); `redact_logs` makes the HTTP library's own log lines (`HTTP Request: POST https://…`)
show URLs redacted.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.parse
import weakref

from runtime.url_redaction import redact_url

REDACTED = "[redacted]"
MIN_SECRET_PIECE = 4
"""URL pieces shorter than this are not searched for in free text (a `?v=1` would turn every `1`
into a mask); the URL itself is always shown redacted, whatever its pieces."""


_PRINTABLE_RUN = re.compile(r"[!-~]+")


def url_secrets(url: str) -> list[str]:
    """The pieces of a URL that may be credentials: user info (whole, user, password), query
    values (a bare query item whole) and the fragment, raw and percent-decoded."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return [url]
    pieces: list[str] = []
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        pieces += [userinfo, *userinfo.split(":", 1)]
    for item in parts.query.split("&"):
        name, equals, value = item.partition("=")
        pieces.append(value if equals else name)
    if parts.fragment:
        pieces.append(parts.fragment)
    found: list[str] = []
    for piece in pieces:
        for form in (piece, urllib.parse.unquote(piece), urllib.parse.unquote_plus(piece)):
            if len(form) >= MIN_SECRET_PIECE and form not in found:
                found.append(form)
    return found


def _spellings(secret: str) -> list[str]:
    """The ways a secret shows up in an error: as it is, and escaped the way Python (`repr` of
    text and of bytes) and JSON print it: a key with a newline appears as `sk-a\\nb` there."""
    forms = [secret, repr(secret)[1:-1], json.dumps(secret)[1:-1]]
    try:
        forms.append(repr(secret.encode("utf-8"))[2:-1])
    except UnicodeEncodeError:
        pass
    forms.append(urllib.parse.quote(secret, safe=""))
    return [form for index, form in enumerate(forms) if form and form not in forms[:index]]


class Redactor:
    """Scrubs one endpoint's secrets (the key, the URL's credentials) from any text."""

    def __init__(self, api_key: str | None, *urls: str) -> None:
        self._urls = sorted({u for u in urls if u}, key=len, reverse=True)
        secrets: list[str] = []
        if api_key:
            # The key, and each run of printable characters in it: a key with a line break is
            # quoted escaped once or twice over (`b'Bearer sk-a\\nb'` inside an exception's repr).
            secrets.append(api_key)
            secrets += [p for p in _PRINTABLE_RUN.findall(api_key) if len(p) >= MIN_SECRET_PIECE]
        for url in self._urls:
            secrets += url_secrets(url)
        spelled = {form for secret in secrets for form in _spellings(secret)}
        self._secrets = sorted(spelled, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """`text` with every known URL shown redacted and every secret replaced."""
        for url in self._urls:
            if url in text:
                text = text.replace(url, redact_url(url))
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text


_URL = re.compile(r"https?://[^\s\"'<>]+")
_active: weakref.WeakSet[Redactor] = weakref.WeakSet()


class SecretRedactingFilter(logging.Filter):
    """Rewrites a log record so that every URL in its message is shown redacted and the secrets
    of every live client's endpoint are replaced."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = _URL.sub(lambda match: redact_url(match.group(0)), message)
        for redactor in list(_active):
            redacted = redactor.scrub(redacted)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


LOGGERS_THAT_PRINT_SECRETS = (
    "httpx",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
)
"""httpx logs every request's full URL at INFO, httpcore the exceptions it met at DEBUG (one
quotes a header it could not send, with the key): a worker that logs at those levels would print
them as they are. A filter sits on each logger itself, since a logger's filters do not see its
children's records."""


def redact_logs(redactor: Redactor) -> None:
    """Scrub `redactor`'s secrets (while it lives) and every URL from the HTTP library's logs."""
    _active.add(redactor)
    for name in LOGGERS_THAT_PRINT_SECRETS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, SecretRedactingFilter) for f in logger.filters):
            logger.addFilter(SecretRedactingFilter())
