"""Activity stand-ins for tests whose subject is the workflow logic: registered under the real
activity names (`worker_setup`, `call_llm`, `execute_tool`, `notify`, …), they script the model's
replies and record what the workflow asked for."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from workflows import names
from workflows.contract.rules import WorkerPolicy
from workflows.model import (
    ChatMessage,
    LlmRequest,
    LlmResponse,
    NotifyRequest,
    SummaryRequest,
    SummaryResponse,
    ToolCall,
    ToolRequest,
    ToolSpec,
    Usage,
    WorkerSetup,
)


def _takes(*names: str) -> dict[str, Any]:
    """A JSON schema of string parameters (rules may name only parameters a tool declares)."""
    return {"type": "object", "properties": {n: {"type": "string"} for n in names}}


TOOL_SPECS = [
    ToolSpec(
        name="list_dir",
        description="List a folder",
        parameters=_takes("path"),
        path_parameters=["path"],
    ),
    ToolSpec(
        name="read_file",
        description="Read a file",
        parameters=_takes("path"),
        path_parameters=["path"],
    ),
    ToolSpec(
        name="run_command",
        description="Run a shell command",
        parameters=_takes("command"),
        requires_approval=True,
        safe_to_retry=False,
    ),
    ToolSpec(
        name="delete_path",
        description="Delete a path",
        parameters=_takes("path"),
        requires_approval=True,
        safe_to_retry=False,
        path_parameters=["path"],
    ),
]


def calls(*items: tuple[str, str, Any]) -> LlmResponse:
    """A model reply that calls tools: each item is (call id, tool name, arguments)."""
    return LlmResponse(
        message=ChatMessage.assistant(
            "", [ToolCall(id=i, name=n, arguments=a) for i, n, a in items]
        ),
        usage=Usage(prompt_tokens=10, completion_tokens=5),
    )


def text(content: str) -> LlmResponse:
    return LlmResponse(
        message=ChatMessage.assistant(content), usage=Usage(prompt_tokens=10, completion_tokens=5)
    )


Reply = LlmResponse | Callable[[LlmRequest], LlmResponse] | Exception


@dataclass
class FakeAgentActivities:
    """Scripted replies for `call_llm`, recorded calls for `execute_tool`."""

    replies: Sequence[Reply] = ()
    llm_delay: float = 0.0
    tool_delay: float = 0.0
    specs: list[ToolSpec] = field(default_factory=lambda: list(TOOL_SPECS))
    llm_requests: list[LlmRequest] = field(default_factory=list)
    tool_requests: list[ToolRequest] = field(default_factory=list)
    llm_cancelled: int = 0
    tools_cancelled: int = 0
    client: Client | None = None
    """When set, `call_llm` reads the prefix of the history it was asked about (the
    `messages` query, cut to `message_count`, as the real activity does) into `llm_prefixes`."""
    llm_prefixes: list[list[ChatMessage]] = field(default_factory=list)
    worker_rules: WorkerPolicy = field(default_factory=WorkerPolicy)
    """The worker's rules `worker_setup` reports (its `AGENT_POLICY_FILE`)."""
    context_tokens: int = 100_000_000
    """The model's window `worker_setup` reports (by default too big to matter: tests of the
    window set their own)."""
    summary_requests: list[SummaryRequest] = field(default_factory=list)
    summary_error: Exception | None = None
    """Raised by `summarize_conversation` when set (a model that refuses the summary)."""
    notifies: bool = False
    """What `worker_setup` says of notifications (`WorkerSetup.notify`): with True the workflow
    runs `notify`."""
    notify_requests: list[NotifyRequest] = field(default_factory=list)
    """Every `notify` attempt, in order (a failed attempt too)."""
    notify_failures: int = 0
    """How many attempts of each `notify` activity fail (a retryable error) before one is
    taken; -1: every attempt fails."""
    notify_delay: float = 0.0
    """How long each `notify` attempt takes (heartbeating), e.g. a receiver that is slow."""
    ask_user: bool = False
    """What `worker_setup` says of `ask_user` (the worker's AGENT_ASK_USER)."""
    setup: dict[str, Any] = field(default_factory=dict)
    """More of what `worker_setup` says (`WorkerSetup`'s fields: the worker's escalation, token
    budget, approvers' groups, …)."""

    def activities(self) -> list[Callable[..., Any]]:
        @activity.defn(name=names.ACTIVITY_WORKER_SETUP)
        async def worker_setup() -> WorkerSetup:
            return WorkerSetup(
                tools=self.specs,
                policy=self.worker_rules,
                context_tokens=self.context_tokens,
                notify=self.notifies,
                ask_user=self.ask_user,
                **self.setup,
            )

        @activity.defn(name=names.ACTIVITY_SUMMARIZE)
        async def summarize_conversation(request: SummaryRequest) -> SummaryResponse:
            self.summary_requests.append(request)
            if self.summary_error is not None:
                raise self.summary_error
            covered = request.last - request.first
            return SummaryResponse(text=f"summary #{len(self.summary_requests)} of {covered}")

        @activity.defn(name=names.ACTIVITY_CALL_LLM)
        async def call_llm(request: LlmRequest) -> LlmResponse:
            self.llm_requests.append(request)
            index = len(self.llm_requests) - 1
            if self.client is not None:
                handle = self.client.get_workflow_handle(request.workflow_id, run_id=request.run_id)
                query = names.QUERY_MODEL_VIEW if request.view else names.QUERY_MESSAGES
                history = await handle.query(query, result_type=list[ChatMessage])
                self.llm_prefixes.append(history[: request.message_count])
            try:
                await self._sleep_heartbeating(self.llm_delay)
            except asyncio.CancelledError:
                self.llm_cancelled += 1
                raise
            if index >= len(self.replies):
                return text("(no more scripted replies)")
            reply = self.replies[index]
            if isinstance(reply, Exception):
                raise reply
            if callable(reply):
                return reply(request)
            return reply

        @activity.defn(name=names.ACTIVITY_EXECUTE_TOOL)
        async def execute_tool(request: ToolRequest) -> str:
            self.tool_requests.append(request)
            try:
                await self._sleep_heartbeating(self.tool_delay)
            except asyncio.CancelledError:
                self.tools_cancelled += 1
                raise
            if request.name == "explode":
                raise ApplicationError("boom", non_retryable=True)
            return f'{{"ok": true, "data": "ran {request.name} {request.call_id}"}}'

        @activity.defn(name=names.ACTIVITY_NOTIFY)
        async def notify(request: NotifyRequest) -> None:
            self.notify_requests.append(request)
            await self._sleep_heartbeating(self.notify_delay)
            attempt = activity.info().attempt
            if self.notify_failures < 0 or attempt <= self.notify_failures:
                raise ApplicationError(
                    f"the notification receiver answered HTTP 500 (attempt {attempt})",
                    type="NotifyHttp500",
                )

        return [
            worker_setup,
            call_llm,
            summarize_conversation,
            execute_tool,
            notify,
        ]

    @staticmethod
    async def _sleep_heartbeating(seconds: float) -> None:
        remaining = seconds
        while remaining > 0:
            activity.heartbeat()
            step = min(0.2, remaining)
            await asyncio.sleep(step)
            remaining -= step

    @property
    def tools_run(self) -> list[str]:
        return [r.call_id for r in self.tool_requests]


class BigTools(FakeAgentActivities):
    """Tools that answer with `size` characters each (for the context window's tests)."""

    size: int = 6_000

    def activities(self) -> list[Callable[..., Any]]:
        base = super().activities()

        @activity.defn(name=names.ACTIVITY_EXECUTE_TOOL)
        async def execute_tool(request: ToolRequest) -> str:
            self.tool_requests.append(request)
            return json.dumps({"ok": True, "data": f"{request.call_id}:" + "y" * self.size})

        replaced = base_execute(base)
        return [a for a in base if a is not replaced] + [execute_tool]


def base_execute(activities: list[Callable[..., Any]]) -> Callable[..., Any] | None:
    """The `execute_tool` among `activities`."""
    for fn in activities:
        definition = getattr(fn, "__temporal_activity_definition", None)
        if definition is not None and definition.name == names.ACTIVITY_EXECUTE_TOOL:
            return fn
    return None
