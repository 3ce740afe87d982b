"""The workflow's side of its activities: how each is called (its options: timeouts and retries
from the tool's spec and these constants, never literals at a call site) and what its failures
mean. Only the workflow imports this; activities are reached by their stable names, since
importing `activities/` would pull httpx into the workflow sandbox."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from workflows import names
from workflows.contract.tool_results import framework_error_message
from workflows.model import (
    LlmRequest,
    LlmResponse,
    SummaryRequest,
    SummaryResponse,
    ToolRequest,
    ToolSpec,
    WorkerSetup,
)

HEARTBEAT_TIMEOUT = timedelta(seconds=20)
"""Activities heartbeat every 0.5 s; a worker that dies mid-activity is noticed after this."""
SETUP_TIMEOUT = timedelta(seconds=30)
"""`worker_setup` answers from memory (and one bounded probe of the model server)."""
SUMMARY_TIMEOUT = timedelta(minutes=10)
"""One `summarize_conversation`: a model call like `call_llm`'s."""
LLM_TIMEOUT = timedelta(minutes=10)
"""One model call, all of its streaming (the worker's LLM_TIMEOUT_SECONDS bounds each silence)."""
DEFAULT_TOOL_TIMEOUT = timedelta(minutes=5)
"""One tool execution, unless its spec says otherwise (`ToolSpec.timeout_seconds`)."""

LLM_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=8,
)

LLM_RETRY_UNTIL_GIVEN_UP = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
)
"""`call_llm` itself says when to stop (a server that cannot be reached after the worker's
LLM_MAX_WAIT, any other failure after LLM_ATTEMPTS attempts)."""


def tool_retry(spec: ToolSpec | None) -> RetryPolicy:
    """A tool that is not safe to retry gets exactly one attempt: an interrupted attempt becomes
    an error result the model sees, never a second execution."""
    safe = spec.safe_to_retry if spec is not None else False
    return RetryPolicy(maximum_attempts=3 if safe else 1, initial_interval=timedelta(seconds=1))


def tool_timeout(spec: ToolSpec | None) -> timedelta:
    if spec is None or spec.timeout_seconds is None:
        return DEFAULT_TOOL_TIMEOUT
    return timedelta(seconds=spec.timeout_seconds)


def failure_detail(err: ActivityError) -> str:
    """What went wrong in a failed activity, in the words of the error it raised."""
    cause = err.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause or err)


def failure_type(err: ActivityError) -> str | None:
    """The type of the error an activity raised (an `ApplicationError`'s), or None."""
    cause = err.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def is_cancellation(err: BaseException) -> bool:
    return isinstance(err, asyncio.CancelledError) or (
        isinstance(err, ActivityError) and isinstance(err.cause, CancelledError)
    )


def tool_failure_content(err: ActivityError, spec: ToolSpec | None) -> str:
    """The tool message for an execution that failed (not one the tool reported)."""
    detail = failure_detail(err)
    if spec is not None and not spec.safe_to_retry:
        detail += (
            "; this tool is not safe to retry, so it was not run again"
            " (it may or may not have taken effect)"
        )
    return framework_error_message(f"tool execution failed: {detail}")


async def worker_setup() -> WorkerSetup:
    """The worker's setup, read by the worker running the run (a local activity: one marker in
    history, where an activity task writes three events and a workflow task three)."""
    setup: WorkerSetup = await workflow.execute_local_activity(
        names.ACTIVITY_WORKER_SETUP,
        result_type=WorkerSetup,
        start_to_close_timeout=SETUP_TIMEOUT,
        summary="read the worker's tools, rules and model window",
    )
    return setup


async def summarize(request: SummaryRequest) -> SummaryResponse:
    summary: SummaryResponse = await workflow.execute_activity(
        names.ACTIVITY_SUMMARIZE,
        request,
        result_type=SummaryResponse,
        start_to_close_timeout=SUMMARY_TIMEOUT,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=LLM_RETRY,
        summary=f"summarise messages {request.first}-{request.last - 1} to fit the model's window",
    )
    return summary


def model_unreachable(err: ActivityError) -> str | None:
    """The model server that stayed out of reach until `call_llm` gave up (its scheme, host and
    port), or None for any other failure."""
    cause = err.cause
    details = cause.details[0] if isinstance(cause, ApplicationError) and cause.details else None
    server = details.get(names.MODEL_UNREACHABLE_DETAIL) if isinstance(details, dict) else None
    return server if isinstance(server, str) else None


def context_exceeded(err: ActivityError) -> tuple[int | None, int | None] | None:
    """The provider said the request was too long for the model: (its window, its count of the
    request), each None where it named none; None for any other failure."""
    cause = err.cause
    if not isinstance(cause, ApplicationError) or cause.type != "LlmContextExceeded":
        return None
    details = cause.details[0] if cause.details else None
    if not isinstance(details, dict):
        return None, None
    window, request = details.get("context_tokens"), details.get("request_tokens")
    return (
        window if isinstance(window, int) else None,
        request if isinstance(request, int) else None,
    )


def start_llm(request: LlmRequest) -> workflow.ActivityHandle[LlmResponse]:
    """Retried until the activity itself gives up."""
    return workflow.start_activity(
        names.ACTIVITY_CALL_LLM,
        request,
        result_type=LlmResponse,
        start_to_close_timeout=LLM_TIMEOUT,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=LLM_RETRY_UNTIL_GIVEN_UP,
        summary=f"llm round {request.round}",
    )


def start_tool(request: ToolRequest, spec: ToolSpec | None) -> workflow.ActivityHandle[str]:
    return workflow.start_activity(
        names.ACTIVITY_EXECUTE_TOOL,
        request,
        result_type=str,
        start_to_close_timeout=tool_timeout(spec),
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=tool_retry(spec),
        summary=f"tool {request.name} {request.call_id}",
    )
