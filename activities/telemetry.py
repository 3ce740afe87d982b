"""What the activities tell operators: the model call's and the tool call's metrics and spans.

Metrics go through the SDK's activity meter (`activity.metric_meter()`: the worker's runtime,
served by `AGENT_METRICS_ADDRESS`; labelled `namespace`, `task_queue`, `activity_type`):

- `agent_llm_tokens_total{kind="prompt|completion"}`: the tokens the provider reported;
- `agent_llm_seconds`: a histogram of each model call's duration (every attempt);
- `agent_tool_calls_total{tool, outcome}`: each tool call, by the tool's name (`(unknown)` for
  a name the worker has no tool for, so a model cannot grow the label set) and its outcome
  (`tool_outcome`).

Spans go through the process's tracer provider (`runtime.tracing`; nothing is recorded without
one) as children of the activity's `RunActivity` span, with the GenAI semantic attributes: the
model call is `chat {model}` (`gen_ai.request.model`, `gen_ai.usage.input_tokens`,
`gen_ai.usage.output_tokens`, `gen_ai.response.finish_reasons`), the tool call `execute_tool
{tool}` (`gen_ai.tool.name`, `gen_ai.tool.call.id`, `agent.tool.outcome`). Messages, arguments
and results are added only with `AGENT_TRACE_CONTENT=true` (`gen_ai.input.messages`,
`gen_ai.output.messages`, `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`), each cut to
`CONTENT_CHARS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from temporalio import activity
from temporalio.common import MetricMeter
from temporalio.exceptions import ApplicationError

from workflows.contract.tool_results import TRUNCATION_MARKER
from workflows.model import ChatMessage, LlmResponse
from workflows.shown import shorten

TRACER_NAME = "durable-agent"
CONTENT_CHARS = 32_000
"""The longest message list, argument or result text a span carries (AGENT_TRACE_CONTENT)."""
UNKNOWN_TOOL = "(unknown)"

TOKENS = "agent_llm_tokens"
LLM_SECONDS = "agent_llm_seconds"
TOOL_CALLS = "agent_tool_calls"

_tracer = trace.get_tracer(TRACER_NAME)


def _meter() -> MetricMeter | None:
    return activity.metric_meter() if activity.in_activity() else None


def _error_type(err: BaseException) -> str:
    if isinstance(err, ApplicationError) and err.type:
        return err.type
    return type(err).__name__


def _json(value: Any) -> str:
    return shorten(
        json.dumps(value, ensure_ascii=False, default=str),
        CONTENT_CHARS,
        TRUNCATION_MARKER,
        within=True,
    )


class ModelCall:
    """The model call being made: `sending` records the request, `reply` what the provider
    answered."""

    def __init__(self, span: Span, content: bool) -> None:
        self._span = span
        self._content = content

    def sending(self, messages: Sequence[ChatMessage], tools: int) -> None:
        self._span.set_attribute("agent.messages", len(messages))
        self._span.set_attribute("agent.tools", tools)
        if self._content:
            sent = _json([m.model_dump(mode="json") for m in messages])
            self._span.set_attribute("gen_ai.input.messages", sent)

    def reply(self, response: LlmResponse) -> LlmResponse:
        usage = response.usage
        if (meter := _meter()) is not None:
            tokens = meter.create_counter(TOKENS, "Tokens the model provider reported")
            if usage.prompt_tokens:
                tokens.add(usage.prompt_tokens, {"kind": "prompt"})
            if usage.completion_tokens:
                tokens.add(usage.completion_tokens, {"kind": "completion"})
        span = self._span
        span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
        if response.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [response.finish_reason])
        span.set_attribute("agent.tool_calls", len(response.message.tool_calls or []))
        if self._content:
            span.set_attribute(
                "gen_ai.output.messages", _json([response.message.model_dump(mode="json")])
            )
        return response


@contextlib.contextmanager
def model_call(*, model: str, provider: str, round: int, content: bool) -> Iterator[ModelCall]:
    """Time one model call (`agent_llm_seconds`) inside its `chat {model}` span."""
    started = time.monotonic()
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "agent.round": round,
    }
    with _tracer.start_as_current_span(
        f"chat {model}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield ModelCall(span, content)
        except BaseException as err:
            span.set_attribute("error.type", _error_type(err))
            span.set_status(Status(StatusCode.ERROR, _error_type(err)))
            raise
        finally:
            if (meter := _meter()) is not None:
                meter.create_histogram_float(
                    LLM_SECONDS, "Seconds each model call took", "s"
                ).record(time.monotonic() - started)


def tool_outcome(content: str) -> str:
    """The outcome of a tool call from what the model is told: `ok`, `error` (the tool, or the
    framework around it, failed), `invalid_arguments`, `not_found` or `refused` (the worker's
    enforced rules)."""
    if content.startswith("Rejected:"):
        return "refused"
    if content.startswith("Tool '") and content.endswith("' not found"):
        return "not_found"
    if content.startswith('{"ok": true'):
        return "ok"
    if content.startswith('{"ok": false, "error": "Invalid tool arguments:'):
        return "invalid_arguments"
    return "error"


class ToolCall:
    """The tool call being made: `result` records what it answered."""

    def __init__(self, span: Span, content: bool) -> None:
        self._span = span
        self._content = content
        self.outcome = "failed"
        """`failed` until a result comes (the activity raised), `cancelled` when cancelled."""

    def result(self, text: str) -> str:
        self.outcome = tool_outcome(text)
        if self._content:
            self._span.set_attribute(
                "gen_ai.tool.call.result",
                shorten(text, CONTENT_CHARS, TRUNCATION_MARKER, within=True),
            )
        return text


@contextlib.contextmanager
def tool_call(
    *, name: str, known: bool, call_id: str, arguments: Any, content: bool
) -> Iterator[ToolCall]:
    """Count one tool call (`agent_tool_calls_total{tool, outcome}`) inside its span."""
    tool = name if known else UNKNOWN_TOOL
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": call_id,
    }
    if content:
        shown = arguments if isinstance(arguments, str) else _json(arguments)
        attributes["gen_ai.tool.call.arguments"] = shorten(
            shown, CONTENT_CHARS, TRUNCATION_MARKER, within=True
        )
    with _tracer.start_as_current_span(
        f"execute_tool {tool}",
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        call = ToolCall(span, content)
        try:
            yield call
        except BaseException as err:
            call.outcome = "cancelled" if isinstance(err, asyncio.CancelledError) else "failed"
            span.set_attribute("error.type", _error_type(err))
            raise
        finally:
            span.set_attribute("agent.tool.outcome", call.outcome)
            if call.outcome != "ok":
                span.set_status(Status(StatusCode.ERROR, call.outcome))
            if (meter := _meter()) is not None:
                meter.create_counter(TOOL_CALLS, "Tool calls, by tool and outcome").add(
                    1, {"tool": tool, "outcome": call.outcome}
                )
