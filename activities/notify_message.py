"""What a notification says: the JSON body (`AGENT_NOTIFY_FORMAT=json`) or one line of Slack
text (`slack`, an incoming webhook's `{"text": …}`). Pure: `activities.notify` sends it.

Everything in it comes from the run (ids, the tool's name, its arguments, a failed run's error),
never from the worker's settings but the inbox link. The arguments and the error text are the
run's content: they go out only when the worker allows it (`include_content`). Text a person
reads is made visible as the terminal and the web show it (`workflows.shown`).
"""

from __future__ import annotations

import urllib.parse
from datetime import UTC, datetime
from typing import Any

from workflows.contract.arguments import arguments_digest, arguments_value
from workflows.model import FinishReason, NotifyRequest
from workflows.shown import ELLIPSIS, arguments_display, shorten, visible, visible_json

ARGUMENTS_JSON_CHARS = 4_000
"""The most characters of JSON the `arguments` field carries; longer arguments go as the first
this many characters of their JSON text, a string, with `"arguments_truncated": true`."""
ERROR_CHARS = 2_000
"""The most characters of a failed run's error in the JSON body."""
SLACK_ARGUMENTS_CHARS = 300
"""The most characters of the arguments in a Slack line (the inbox shows them whole)."""
SLACK_TEXT_CHARS = 200
"""The most characters of an id, a tool's name or an error in a Slack line."""
CALL_EVENTS = (
    "approval_waiting",
    "approval_reminder",
    "approval_expired",
    "approval_escalated",
    "question_waiting",
)
"""Events about one call; `question_waiting` is a question the model asked (`ask_user`), its
question and options as the call's arguments."""

_FINISHED = {
    "stop": "finished",
    "max_rounds": "stopped at its round limit",
    "cancelled": "was cancelled",
    "error": "failed",
    "budget": "was stopped at its token budget",
}


def run_link(inbox_url: str | None, workflow_id: str) -> str | None:
    """The run's page in the web inbox, `INBOX/runs/{id}` (the id percent-encoded), or None."""
    if not inbox_url:
        return None
    return f"{inbox_url.rstrip('/')}/runs/{urllib.parse.quote(workflow_id, safe='')}"


def timestamp(moment: datetime | None) -> str | None:
    """ISO 8601 in UTC (`2026-01-02T03:04:05.678Z`); a naive time is taken as UTC."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def json_body(request: NotifyRequest, *, link: str | None, include_content: bool) -> dict[str, Any]:
    """The body of `AGENT_NOTIFY_FORMAT=json`. A call's event: `event`, `workflow_id`, `run_id`,
    `call_id`, `tool`, `arguments` and `arguments_sha256` (only with `include_content`: what
    `starter approve --run-id R --sha256 D` pins), `waiting_since`, `url` (and `groups`, who may
    answer now, for `approval_escalated`; with `rule_groups` for a call the worker's enforced
    approver rule decides: only those may);
    `run_finished`: `event`, `workflow_id`, `run_id`, `finish_reason`, `error` (only with
    `include_content`), `url`; `budget_exhausted`: `used`, `limit`, `waiting_since`, `url`. `url`
    is null without an inbox. A sub-agent's notification names its parent too, before `url`:
    `parent_workflow_id` and `parent_call_id` (the `delegate` call that started it). `who_may`
    (`{"groups", "count"}`: a call's approver rule, or who may grant tokens) when not anyone may
    answer."""
    body: dict[str, Any] = {
        "event": request.event,
        "workflow_id": request.workflow_id,
        "run_id": request.run_id,
    }
    if request.event == "budget_exhausted":
        body["used"], body["limit"] = request.used, request.limit
        body["waiting_since"] = timestamp(request.waiting_since)
    elif request.event in CALL_EVENTS:
        body["call_id"] = request.call_id
        body["tool"] = request.tool
        if include_content:
            text = visible_json(arguments_value(request.arguments))
            if len(text) <= ARGUMENTS_JSON_CHARS:
                body["arguments"] = arguments_value(request.arguments)
            else:
                body["arguments"] = shorten(text, ARGUMENTS_JSON_CHARS, ELLIPSIS)
                body["arguments_truncated"] = True
            body["arguments_sha256"] = arguments_digest(request.arguments)
        body["waiting_since"] = timestamp(request.waiting_since)
        if request.event == "approval_escalated":
            body["groups"] = list(request.groups or [])
            if request.rule_groups is not None:
                body["rule_groups"] = list(request.rule_groups)
    else:
        body["finish_reason"] = request.finish_reason
        if include_content:
            body["error"] = (
                None
                if request.error is None
                else shorten(request.error, ERROR_CHARS, ELLIPSIS, within=True)
            )
    if request.parent_workflow_id is not None:  # a sub-agent's: the run that delegated to it
        body["parent_workflow_id"] = request.parent_workflow_id
        body["parent_call_id"] = request.parent_call_id
    if request.who_may is not None:
        body["who_may"] = request.who_may.model_dump(mode="json")
    body["url"] = link
    return body


def slack_escape(text: str) -> str:
    """Text as Slack shows it literally: `&`, `<`, `>` escaped (Slack's own rule), every hidden
    character made visible."""
    return visible(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_code(text: str, limit: int = SLACK_TEXT_CHARS) -> str:
    """`text` in a code span, bounded; a backtick (which would end the span) shows as `ˋ`."""
    return f"`{slack_escape(shorten(text, limit, ELLIPSIS, within=True)).replace('`', 'ˋ')}`"


def _slack_run(request: NotifyRequest, link: str | None) -> str:
    if link is None:
        return slack_code(request.workflow_id)
    # `<URL|label>`: the URL may hold neither `|` nor `>`; the label is escaped text.
    target = link.replace("|", "%7C").replace(">", "%3E").replace("<", "%3C")
    label = shorten(request.workflow_id, SLACK_TEXT_CHARS, ELLIPSIS, within=True)
    return f"<{target}|{slack_escape(label)}>"


def _slack_since(moment: datetime | None) -> str:
    if moment is None:
        return ""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return f" since {moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def _slack_parent(request: NotifyRequest) -> str:
    """For a sub-agent's notification: ` (sub-agent of `W`, its call `call_1`)`; else nothing."""
    if request.parent_workflow_id is None:
        return ""
    call = slack_code(request.parent_call_id or "?")
    return f" (sub-agent of {slack_code(request.parent_workflow_id)}, its call {call})"


def who_may_text(request: NotifyRequest) -> str:
    """`; 2 of `ops` may approve` (`; only `ops` may` for a budget); empty when anyone may."""
    who = request.who_may
    if who is None:
        return ""
    groups = " or ".join(slack_code(g) for g in who.groups)
    if request.event == "budget_exhausted":
        return f" (only {groups} may)"
    many = f"{who.count} of {groups}" if who.count > 1 else f"one of {groups}"
    return f"; {many} may approve"


def slack_text(request: NotifyRequest, *, link: str | None, include_content: bool) -> str:
    """One short line for a Slack channel: the tool, the run (a link to its inbox page when there
    is one; for a sub-agent, whose sub-agent it is) and the call; the arguments (bounded) only
    with `include_content`; then what pins an answer to the call (`starter approve --run-id R
    --sha256 D`; the digest only with the arguments it is of)."""
    run = _slack_run(request, link) + _slack_parent(request)
    if request.event == "budget_exhausted":
        return (
            f":money_with_wings: Run {run} used {request.used or 0:,} of {request.limit or 0:,}"
            f" tokens: it waits for a person to grant more or stop it{who_may_text(request)}"
        )
    if request.event == "question_waiting":
        call = slack_code(request.call_id or "?")
        asked = ""
        if include_content and isinstance(request.arguments, dict):
            question = str(request.arguments.get("question") or "")
            asked = f": {slack_escape(shorten(question, SLACK_ARGUMENTS_CHARS, ELLIPSIS))}"
        return f":question: A question waits for an answer in run {run} (call {call}){asked}"
    if request.event in CALL_EVENTS:
        tool = slack_code(request.tool or "?")
        pin = f"call {slack_code(request.call_id or '?')}, run id {slack_code(request.run_id)}"
        args = ""
        if include_content:
            pin += f", sha256 {slack_code(arguments_digest(request.arguments))}"
            args = f": {slack_code(arguments_display(request.arguments), SLACK_ARGUMENTS_CHARS)}"
        where = f" in run {run} ({pin}){args}{who_may_text(request)}"
        if request.event == "approval_waiting":
            return f":hourglass_flowing_sand: {tool} is waiting for approval{where}"
        if request.event == "approval_expired":
            return (
                f":hourglass: {tool} expired unanswered (nothing was rejected: ask again or"
                f" reject it){where}"
            )
        if request.event == "approval_escalated":
            groups = ", ".join(slack_code(g) for g in request.groups or [])
            if request.rule_groups is not None:
                only = " or ".join(slack_code(g) for g in request.rule_groups)
                groups += f" (only {only} may answer it: the worker's enforced rule)"
            since = _slack_since(request.waiting_since)
            return f":rotating_light: {tool} escalated to {groups}: waiting{since}{where}"
        since = _slack_since(request.waiting_since)
        return f":alarm_clock: Reminder: {tool} has been waiting for approval{since}{where}"
    line = f"Run {run} {_finished(request.finish_reason)}"
    if include_content and request.error:
        error = shorten(request.error, SLACK_TEXT_CHARS, ELLIPSIS, within=True)
        line += f": {slack_escape(error)}"
    return line


def _finished(reason: FinishReason | None) -> str:
    return _FINISHED.get(reason or "stop", "finished")


def slack_body(
    request: NotifyRequest, *, link: str | None, include_content: bool
) -> dict[str, Any]:
    """The body of `AGENT_NOTIFY_FORMAT=slack`: an incoming webhook's `{"text": …}`."""
    return {"text": slack_text(request, link=link, include_content=include_content)}
