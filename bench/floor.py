"""The fair floor's activities: what one agent round costs outside AgentWorkflow, done by the bare
workflow's two steps.

Step A makes the agent's model call: the same streamed request, through the agent's own
`OpenAIChatClient`, to the same fake model server, with the messages the agent sent at that round
(so the same bytes), and returns the reply as `call_llm` does. Step B runs `list_dir` through the
agent's own `execute_tool`. What the floor leaves out is what AgentWorkflow adds on top: its
workflow code in the sandbox, its extra activities and history events, the `messages` query each
model call makes, and the live text it publishes.

The messages come from a reference agent run the figure made first (a JSON file of its record):
the activity reads them once, when the first floor round runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio import activity

from activities.agent_activities import AgentActivities
from activities.llm import OpenAIChatClient
from bench.bare_workflow import ACTIVITY_STEP_A, ACTIVITY_STEP_B, StepInput
from workflows.model import ChatMessage, LlmResponse, ToolRequest, ToolSpec

FLOOR_TOOL = "list_dir"
FLOOR_ARGUMENTS = '{"path": "."}'


def save_record(path: Path, messages: list[ChatMessage]) -> None:
    """Write a reference run's record for the floor (atomically: a worker may be reading)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([m.model_dump(mode="json") for m in messages]))
    tmp.replace(path)


def sent_at_round(record: list[ChatMessage], round_: int) -> list[ChatMessage]:
    """The messages the agent sent at `round_`: everything before that round's reply."""
    replies = [i for i, m in enumerate(record) if m.role == "assistant"]
    if round_ < len(replies):
        return record[: replies[round_]]
    return list(record)


class FairFloor:
    """Step A and step B of the bare workflow, doing the agent's model call and tool."""

    def __init__(self, real: AgentActivities, llm: OpenAIChatClient, record_path: Path):
        self._real = real
        self._llm = llm
        self._record_path = record_path
        self._record: list[ChatMessage] | None = None
        self._specs: list[ToolSpec] | None = None

    def _messages(self, round_: int) -> list[ChatMessage]:
        if self._record is None:
            raw = json.loads(self._record_path.read_text())
            self._record = [ChatMessage.model_validate(m) for m in raw]
        return sent_at_round(self._record, round_)

    async def _tools(self) -> list[ToolSpec]:
        if self._specs is None:
            setup = await self._real.worker_setup()
            self._specs = [s for s in setup.tools if s.name == FLOOR_TOOL]
        return self._specs

    def activities(self) -> list[Callable[..., Any]]:
        @activity.defn(name=ACTIVITY_STEP_A)
        async def model_call(step: StepInput) -> LlmResponse:
            return await self._llm.complete(self._messages(step.round), await self._tools())

        @activity.defn(name=ACTIVITY_STEP_B)
        async def list_dir(step: StepInput) -> str:
            request = ToolRequest(
                workflow_id=step.workflow_id,
                call_id=f"floor_{step.round}",
                name=FLOOR_TOOL,
                arguments=FLOOR_ARGUMENTS,
            )
            return await self._real.execute_tool(request)

        return [model_call, list_dir]
