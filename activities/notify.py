"""The `notify` activity: tell people that a call waits for them (or that a run that waited for a
person has ended) by POSTing to `AGENT_NOTIFY_URL`.

    notifier = Notifier(http, Settings.from_env())
    Worker(..., activities=[notifier.notify, ...])

One attempt is one POST with at most `ATTEMPT_SECONDS`; the workflow's retry policy does the
rest (backoff for up to an hour, then a `warning` in the run). Whether an attempt is worth
repeating is decided here:

- a 2xx answer is a delivery;
- no answer (a refused connection, a timeout, a dropped connection), a 5xx, 408, 425 or 429:
  retryable (a `Retry-After` of 429 and 503 is honoured, up to 5 minutes, but never shortens
  the retry policy's backoff);
- any other 4xx, or a redirect (never followed: the body would go elsewhere): not retryable.
  The receiver refused this very request (a revoked Slack webhook answers 403, 404 or 410, a body
  it cannot take 400); asking again for an hour would change nothing and only delay the warning
  that tells the operator to fix `AGENT_NOTIFY_URL`.

The URL is never shown beyond its scheme, host and port: its path may be the token (a Slack
webhook's is), as may its user info and query. Every text that could echo it (an HTTP library's
message, the receiver's answer, its own log lines) is scrubbed of those pieces.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from datetime import timedelta
from typing import Any

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.bounded_body import ACCEPT_ENCODING, read_bounded
from activities.llm import retry_after_seconds
from activities.notify_message import (
    json_body,
    run_link,
    slack_body,
)
from activities.redaction import Redactor, redact_logs
from runtime.settings import Settings, shown_notify_url
from workflows import names
from workflows.model import NotifyRequest
from workflows.people.notifications import NOTIFY_RETRY, child_id
from workflows.shown import ELLIPSIS, shorten, visible

ATTEMPT_SECONDS = 20.0
"""The longest one delivery attempt may take (inside the activity's 30 s start-to-close)."""
READ_SECONDS = 10.0
"""The longest silence tolerated from the receiver (connect: half of it)."""
RETRY_AFTER_CAP_SECONDS = 300.0
"""A receiver's `Retry-After` is honoured up to this (the workflow's backoff caps at 5 min)."""
ANSWER_EXCERPT_CHARS = 200
RETRYABLE_4XX = {408, 425, 429}
MIN_PATH_SECRET = 8
"""A URL path at least this long is treated as a secret in every text (shorter ones, `/hook`,
are not tokens, and scrubbing them would mangle ordinary words)."""


def url_path_secrets(url: str) -> list[str]:
    """The pieces of the URL's path that may be a token: the path itself and its longest
    segment, raw and percent-decoded."""
    try:
        path = urllib.parse.urlsplit(url).path
    except ValueError:
        return []
    pieces = [path, max(path.split("/"), key=len, default="")]
    found: list[str] = []
    for piece in pieces:
        for form in (piece, urllib.parse.unquote(piece)):
            if len(form) >= MIN_PATH_SECRET and form not in found:
                found.append(form)
    return found


class Notifier:
    """The `notify` activity over one httpx client and the worker's settings."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        settings: Settings,
        *,
        attempt_seconds: float = ATTEMPT_SECONDS,
    ) -> None:
        self._http = http
        self._attempt_seconds = attempt_seconds
        read = min(READ_SECONDS, attempt_seconds)
        self._timeout = httpx.Timeout(read, connect=read / 2)
        self._url = settings.notify_url
        self._format = settings.notify_format
        self._include_content = settings.notify_with_arguments
        self._inbox = settings.inbox_url
        self._shown = shown_notify_url(self._url) if self._url else "(no AGENT_NOTIFY_URL)"
        # The LLM key and endpoint never go out; the notify URL's user info, query and path
        # never show. Each path piece goes in as a key would (a Redactor scrubs one key).
        self._redactors = [Redactor(settings.llm_api_key, settings.llm_base_url or "")]
        if self._url:
            pieces = [Redactor(piece) for piece in url_path_secrets(self._url)]
            for redactor in [Redactor(None, self._url), *pieces]:
                self._redactors.append(redactor)
                redact_logs(redactor)

    def __repr__(self) -> str:  # never the URL's path, user info or query
        return f"Notifier(url={self._shown!r}, format={self._format!r})"

    @property
    def enabled(self) -> bool:
        """Whether this worker notifies anyone (AGENT_NOTIFY_URL is set)."""
        return self._url is not None

    def scrub(self, text: str) -> str:
        for redactor in self._redactors:
            text = redactor.scrub(text)
        return text

    def body(self, request: NotifyRequest) -> dict[str, Any]:
        """What is POSTed for `request`, in the worker's format, with no secret in it."""
        link = run_link(self._inbox, request.workflow_id)
        build = slack_body if self._format == "slack" else json_body
        body = build(request, link=link, include_content=self._include_content)
        return {key: self._scrubbed(value) for key, value in body.items()}

    def _scrubbed(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {key: self._scrubbed(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._scrubbed(item) for item in value]
        return value

    @activity.defn(name=names.ACTIVITY_NOTIFY)
    async def notify(self, request: NotifyRequest) -> None:
        """POST the notification once; raise ApplicationError when it was not delivered
        (retryable unless the receiver refused it for good)."""
        if self._url is None:
            raise ApplicationError(
                "this worker has no AGENT_NOTIFY_URL: set the same notification settings on"
                " every worker of the task queue",
                type="NotifyNotConfigured",
                non_retryable=True,
            )
        foreign = not_its_own(request)
        if foreign is not None:
            raise ApplicationError(foreign, type="NotifyRefused", non_retryable=True)
        data = json.dumps(self.body(request), ensure_ascii=False).encode("utf-8")
        try:
            async with asyncio.timeout(self._attempt_seconds):
                refused = await self._post(self._url, data)
        except (TimeoutError, httpx.TimeoutException) as err:
            raise ApplicationError(
                f"the notification receiver at {self._shown} did not answer in time"
                f" ({type(err).__name__})",
                type="NotifyTimeout",
            ) from None
        except httpx.HTTPError as err:
            detail = visible(self.scrub(str(err)) or "no detail")
            detail = shorten(detail, ANSWER_EXCERPT_CHARS, ELLIPSIS, within=True)
            raise ApplicationError(
                f"the notification could not be delivered to {self._shown}"
                f" ({type(err).__name__}: {detail})",
                type="NotifyConnectionError",
            ) from None
        if refused is not None:
            raise refused
        activity.logger.info(
            "notified %s of %s (%s)", self._shown, request.event, request.workflow_id
        )

    async def _post(self, url: str, data: bytes) -> ApplicationError | None:
        """One POST: None when it was delivered (a 2xx), else the error. The answer is streamed
        and at most `BODY_LIMIT` bytes of it read (a delivery is one whose answer also came, up
        to that): a receiver cannot make the worker read, decode or escape more than that."""
        async with self._http.stream(
            "POST",
            url,
            content=data,
            headers={
                "content-type": "application/json; charset=utf-8",
                "accept-encoding": ACCEPT_ENCODING,
            },
            timeout=self._timeout,
            follow_redirects=False,
        ) as response:
            said = await read_bounded(response)
        if 200 <= response.status_code < 300:
            return None
        return self.refusal(response, said)

    def refusal(self, response: httpx.Response, body_start: str) -> ApplicationError:
        """The error of an answer that is not a 2xx: retryable or not (see the module's doc),
        naming the status and a scrubbed excerpt of what the receiver said (`body_start`: its
        body, already cut to `BODY_LIMIT` bytes)."""
        status = response.status_code
        excerpt = visible(self.scrub(body_start.strip()))
        excerpt = shorten(excerpt, ANSWER_EXCERPT_CHARS, ELLIPSIS, within=True)
        said = f": {excerpt}" if excerpt else ""
        message = f"the notification receiver at {self._shown} answered HTTP {status}{said}"
        kind = f"NotifyHttp{status}"
        if 300 <= status < 400:
            return ApplicationError(
                f"{message} (a redirect, not followed: set AGENT_NOTIFY_URL to where it leads)",
                type=kind,
                non_retryable=True,
            )
        if 400 <= status < 500 and status not in RETRYABLE_4XX:
            return ApplicationError(
                f"{message} (refused; not retried: check AGENT_NOTIFY_URL)",
                type=kind,
                non_retryable=True,
            )
        delay = None
        if status in (429, 503):
            seconds = retry_after_seconds(response.headers.get("retry-after"))
            if seconds is not None:
                delay = max(min(seconds, RETRY_AFTER_CAP_SECONDS), backoff_seconds())
        return ApplicationError(
            message,
            type=kind,
            next_retry_delay=None if delay is None else timedelta(seconds=delay),
        )


def not_its_own(request: NotifyRequest) -> str | None:
    """Why this worker must not send `request`, if it must not: a notification goes out only for
    the workflow that asks for it, an `AgentWorkflow` about itself or the `AgentNotification` it
    left behind. Any other workflow scheduling `notify` on this task queue (one of a namespace
    client's own) would have the worker post its text."""
    info = activity.info()
    if info.workflow_type == names.WORKFLOW_TYPE and info.workflow_id == request.workflow_id:
        return None
    if (
        info.workflow_type == names.NOTIFICATION_WORKFLOW_TYPE
        and request.event == "run_finished"
        and info.workflow_id == child_id(request.workflow_id, request.run_id)
    ):
        return None
    return (
        f"a notification is sent only for the run that asks for it; {info.workflow_type!r}"
        " asked about another, and nothing was sent"
    )


def backoff_seconds() -> float:
    """The wait the activity's retry policy gives after this attempt. A receiver's `Retry-After`
    may lengthen it, never shorten it: `Retry-After: 1` would otherwise make the attempts of the
    whole hour one a second."""
    info = activity.info()
    policy = info.retry_policy or NOTIFY_RETRY
    seconds = policy.initial_interval.total_seconds() * policy.backoff_coefficient ** (
        info.attempt - 1
    )
    if policy.maximum_interval is not None:
        seconds = min(seconds, policy.maximum_interval.total_seconds())
    return seconds
