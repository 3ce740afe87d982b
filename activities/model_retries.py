"""When a model call fails and Temporal will try it again, `call_llm` says so and says when it
stops.

- A server that cannot be reached (no connection: refused, timed out, DNS, TLS) is named at
  once: each failed attempt logs one line and tells the run (`model_unreachable`: the run warns
  every follower), and the next attempt comes after the usual backoff (1 s, 2 s, 4 s, … at most
  60 s). Once LLM_MAX_WAIT has passed since the first attempt, the call gives up and the run
  ends with an error saying so; its details name the server, so a session's turn ends instead
  (`names.MODEL_UNREACHABLE_DETAIL`).
- A server that stops in the middle of its reply (killed, restarted: the connection closed) is
  a failed attempt like those: one log line, the run told, the same backoff; it is tried at
  most LLM_ATTEMPTS times, as any other failure.
- A run retries a model call until the activity gives up (the workflow sets no attempt limit),
  so every other retryable failure stops here at LLM_ATTEMPTS attempts, and an attempt that
  starts after both LLM_ATTEMPTS attempts and LLM_MAX_WAIT (the earlier attempts timed out)
  gives up at once.

An expected network failure is `BENIGN` for the SDK: it logs it without a traceback.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities.llm import ServerDropped, ServerUnreachable
from workflows import names

log = logging.getLogger(__name__)

LLM_ATTEMPTS = 8
"""Attempts of a model call that fails for any other reason than an unreachable server."""
MAX_BACKOFF_SECONDS = 60.0
TELL_SECONDS = 5.0
"""The longest telling the run may hold up the next attempt."""
SETTING = "LLM_MAX_WAIT"


def waited_seconds(info: activity.Info) -> float:
    """Seconds since the call's first attempt was scheduled."""
    return max(0.0, (datetime.now(UTC) - info.scheduled_time).total_seconds())


def unlimited(info: activity.Info) -> bool:
    """Whether the workflow left the number of attempts to the activity (`call_llm`'s policy;
    `summarize_conversation` sets its own)."""
    policy = info.retry_policy
    return policy is not None and not policy.maximum_attempts


def last_allowed(info: activity.Info) -> bool:
    """Whether Temporal will not try this call again whatever it raises."""
    policy = info.retry_policy
    return policy is not None and 0 < policy.maximum_attempts <= info.attempt


def duration(seconds: float) -> str:
    """`45 s`, `10 min`, `2 min 5 s`."""
    whole = round(seconds)
    minutes, rest = divmod(whole, 60)
    if not minutes:
        return f"{rest} s"
    return f"{minutes} min" + (f" {rest} s" if rest else "")


def given_up_before(info: activity.Info, max_wait: float) -> ApplicationError | None:
    """At the start of an attempt: the error that ends the call when it has been tried long and
    often enough already (attempts that timed out never reached `after_failure`)."""
    if not unlimited(info) or info.attempt <= LLM_ATTEMPTS:
        return None
    waited = waited_seconds(info)
    if waited < max_wait:
        return None
    return ApplicationError(
        f"LLM call gave up after {info.attempt - 1} attempts over {duration(waited)} ({SETTING})",
        type="LlmGaveUp",
        non_retryable=True,
    )


def after_failure(err: ApplicationError, info: activity.Info) -> ApplicationError:
    """Any other failure: final at LLM_ATTEMPTS attempts when the workflow set no limit."""
    if err.non_retryable or not unlimited(info) or info.attempt < LLM_ATTEMPTS:
        return err
    return ApplicationError(
        f"{err.message}; not tried again: {info.attempt} attempts failed",
        *err.details,
        type=err.type,
        non_retryable=True,
    )


async def unreachable(
    err: ServerUnreachable, info: activity.Info, max_wait: float, client: Client, workflow_id: str
) -> ApplicationError:
    """A server that cannot be reached: one log line, the run told, the next attempt's delay;
    or, after `max_wait`, the error that ends the run."""
    waited = waited_seconds(info)
    said = f"model server {err.server} cannot be reached ({err.reason})"
    delay = min(2.0 ** (info.attempt - 1), MAX_BACKOFF_SECONDS, max_wait - waited)
    if delay < 0.5 or last_allowed(info):
        message = f"{said}: gave up after {info.attempt} attempt(s) over {duration(waited)}"
        if delay < 0.5:
            message += f" ({SETTING} {duration(max_wait)})"
        activity.logger.warning(message)
        return ApplicationError(
            message,
            {names.MODEL_UNREACHABLE_DETAIL: err.server, "waited_seconds": round(waited)},
            type=err.type,
            non_retryable=True,
            category=ApplicationErrorCategory.BENIGN,
        )
    message = (
        f"{said}: attempt {info.attempt} failed, trying again in {duration(delay)}"
        f" (gives up after {duration(max_wait)}: {SETTING})"
    )
    return await trying_again(message, err.type, delay, client, workflow_id)


async def dropped(
    err: ServerDropped, info: activity.Info, client: Client, workflow_id: str
) -> ApplicationError:
    """A server that went away in the middle of its reply: one log line and the run told, as
    for a server that cannot be reached; final at LLM_ATTEMPTS attempts (the workflow set no
    limit) or when Temporal will not try again."""
    said = f"model server {err.server} {err.reason}"
    if last_allowed(info) or (unlimited(info) and info.attempt >= LLM_ATTEMPTS):
        message = f"{said}: not tried again: {info.attempt} attempts failed"
        activity.logger.warning(message)
        return ApplicationError(
            message, type=err.type, non_retryable=True, category=ApplicationErrorCategory.BENIGN
        )
    delay = min(2.0 ** (info.attempt - 1), MAX_BACKOFF_SECONDS)
    message = f"{said}: attempt {info.attempt} failed, trying again in {duration(delay)}"
    return await trying_again(message, err.type, delay, client, workflow_id)


async def trying_again(
    message: str, error_type: str | None, delay: float, client: Client, workflow_id: str
) -> ApplicationError:
    """The failed attempt's one log line, the run told, and the error that has Temporal try
    again after `delay` seconds."""
    activity.logger.warning(message)
    await tell_the_run(client, workflow_id, message)
    return ApplicationError(
        message,
        type=error_type,
        next_retry_delay=timedelta(seconds=delay),
        category=ApplicationErrorCategory.BENIGN,
    )


async def tell_the_run(client: Client, workflow_id: str, message: str) -> None:
    """The run warns its followers (best effort: the retry goes on if the signal fails)."""
    try:
        handle = client.get_workflow_handle(workflow_id)
        await asyncio.wait_for(
            handle.signal(names.SIGNAL_MODEL_UNREACHABLE, {"message": message}), TELL_SECONDS
        )
    except Exception as error:  # the next attempt matters more than this notice
        log.debug("could not tell %s that the model is unreachable: %s", workflow_id, error)
