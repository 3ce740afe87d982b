"""In-process activities for the bench: the bare workflow's no-op steps, and fake agent
activities registered under the real names (`worker_setup`,
`call_llm`, `summarize_conversation`, `execute_tool`): every activity a run may
schedule, so that no figure's run waits on an activity no worker has.

The fakes are for figures whose subject is the workflow, not the HTTP client: history growth
depends on what the workflow records, approval latency on how fast it reacts to a signal. Each
records `time.monotonic()` when a tool step starts, so latencies are measured inside the activity.
"""

from __future__ import annotations

import json
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
    SummaryRequest,
    SummaryResponse,
    ToolCall,
    ToolRequest,
    ToolSpec,
    WorkerSetup,
)

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


@dataclass
class FakeAgent:
    """A scripted model: every round it replies `content_size` characters and one call of `tool`;
    the tool returns `content_size` characters (`tool_size`, when set). With `stop_after_first`,
    the reply of round 1 and later is plain text, so an approval run ends after its tool ran.

    `worker_setup` says what a real worker would: the model's window (`context_tokens`, 128,000
    by default as for a server that names none), and with `payload_store` the larger conversation
    budget of a worker with AGENT_PAYLOAD_STORE (`conversation_bytes`). A compaction's summary is
    `summary_size` characters."""

    content_size: int = 100
    tool: ToolSpec = field(default_factory=lambda: LIST_DIR)
    stop_after_first: bool = False
    stamps: Stamps = field(default_factory=Stamps)
    tool_size: int | None = None
    context_tokens: int = 128_000
    payload_store: bool = False
    conversation_bytes: int = 1_400_000
    summary_size: int = 1_000
    summaries: list[SummaryRequest] = field(default_factory=list)
    """Every `summarize_conversation` request this fake answered."""

    def setup(self) -> WorkerSetup:
        return WorkerSetup(
            tools=[LIST_DIR, RUN_COMMAND],
            context_tokens=self.context_tokens,
            conversation_bytes=self.conversation_bytes,
            payload_store=self.payload_store,
        )

    def activities(self) -> list[Callable[..., Any]]:
        filler = "x" * self.content_size
        output = filler if self.tool_size is None else "y" * self.tool_size
        summary = "s" * self.summary_size

        @activity.defn(name=names.ACTIVITY_WORKER_SETUP)
        async def worker_setup() -> WorkerSetup:
            return self.setup()

        @activity.defn(name=names.ACTIVITY_CALL_LLM)
        async def call_llm(request: LlmRequest) -> LlmResponse:
            if self.stop_after_first and request.round >= 1:
                return LlmResponse(message=ChatMessage.assistant("done"))
            # Arguments of their own each round: the run's repeat limit (`max_repeats`) would
            # answer a fourth identical call without running the tool.
            arguments = json.dumps({"path": ".", "round": request.round})
            call = ToolCall(id=f"call_{request.round}", name=self.tool.name, arguments=arguments)
            return LlmResponse(message=ChatMessage.assistant(filler, [call]))

        @activity.defn(name=names.ACTIVITY_SUMMARIZE)
        async def summarize_conversation(request: SummaryRequest) -> SummaryResponse:
            self.summaries.append(request)
            return SummaryResponse(text=summary)

        @activity.defn(name=names.ACTIVITY_EXECUTE_TOOL)
        async def execute_tool(request: ToolRequest) -> str:
            self.stamps.mark(request.workflow_id)
            return output

        return [
            worker_setup,
            call_llm,
            summarize_conversation,
            execute_tool,
        ]
