"""In-process activities for the bench: the bare workflow's no-op steps, and fake agent
activities registered under the real names (`list_tools`, `call_llm`, `execute_tool`).

The fakes are for figures whose subject is the workflow, not the HTTP client: history growth
depends on what the workflow records, approval latency on how fast it reacts to a signal. Each
records `time.monotonic()` when a tool step starts, so latencies are measured inside the activity.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity

from bench.bare_workflow import ACTIVITY_STEP_A, ACTIVITY_STEP_B, StepInput
from workflows import names
from workflows.model import (
    ChatMessage,
    LlmRequest,
    LlmResponse,
    ToolCall,
    ToolRequest,
    ToolSpec,
    WorkerSetup,
)
from workflows.rules import WorkerPolicy

LIST_DIR = ToolSpec(name="list_dir", description="List a folder", parameters={"type": "object"})
RUN_COMMAND = ToolSpec(
    name="run_command",
    description="Run a shell command",
    parameters={"type": "object"},
    requires_approval=True,
    safe_to_retry=False,
)


@dataclass
class Stamps:
    """When each workflow's tool step started (monotonic clock, this process)."""

    tool_started: dict[str, float] = field(default_factory=dict)

    def mark(self, workflow_id: str) -> None:
        self.tool_started.setdefault(workflow_id, time.monotonic())


def bare_activities(stamps: Stamps) -> list[Callable[..., Any]]:
    """Two no-op steps; step B records its start time (the floor of approval latency)."""

    @activity.defn(name=ACTIVITY_STEP_A)
    async def step_a(step: StepInput) -> None:
        return None

    @activity.defn(name=ACTIVITY_STEP_B)
    async def step_b(step: StepInput) -> None:
        stamps.mark(step.workflow_id)

    return [step_a, step_b]


FAKE_WINDOW_TOKENS = 100_000_000


@dataclass
class FakeAgent:
    """A scripted model: every round it replies `content_size` characters and one call of `tool`;
    the tool returns `content_size` characters. With `stop_after_first`, the reply of round 1 and
    later is plain text, so an approval run ends after its tool ran."""

    content_size: int = 100
    tool: ToolSpec = field(default_factory=lambda: LIST_DIR)
    stop_after_first: bool = False
    stamps: Stamps = field(default_factory=Stamps)

    def activities(self) -> list[Callable[..., Any]]:
        specs = [LIST_DIR, RUN_COMMAND]
        filler = "x" * self.content_size

        @activity.defn(name=names.ACTIVITY_LIST_TOOLS)
        async def list_tools() -> list[ToolSpec]:
            return specs

        @activity.defn(name=names.ACTIVITY_WORKER_POLICY)
        async def worker_policy() -> WorkerPolicy:
            return WorkerPolicy()

        @activity.defn(name=names.ACTIVITY_WORKER_SETUP)
        async def worker_setup() -> WorkerSetup:
            # A window too big to matter: the figures measure the loop and its history, not
            # compaction (which would call summarize_conversation, a model call these fakes lack).
            return WorkerSetup(tools=specs, context_tokens=FAKE_WINDOW_TOKENS)

        @activity.defn(name=names.ACTIVITY_CALL_LLM)
        async def call_llm(request: LlmRequest) -> LlmResponse:
            if self.stop_after_first and request.round >= 1:
                return LlmResponse(message=ChatMessage.assistant("done"))
            call = ToolCall(
                id=f"call_{request.round}", name=self.tool.name, arguments='{"path": "."}'
            )
            return LlmResponse(message=ChatMessage.assistant(filler, [call]))

        @activity.defn(name=names.ACTIVITY_EXECUTE_TOOL)
        async def execute_tool(request: ToolRequest) -> str:
            self.stamps.mark(request.workflow_id)
            return filler

        return [list_tools, worker_policy, worker_setup, call_llm, execute_tool]
