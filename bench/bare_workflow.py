"""The floor workflow: the smallest workflow doing what one agent round does (two activities),
so that the agent's figures can be read as "how much does AgentWorkflow add on top of Temporal".

No side effects at import: the workflow sandbox re-imports this module for every run.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel
from temporalio import workflow

BARE_WORKFLOW = "BenchBareWorkflow"
ACTIVITY_STEP_A = "bench_step_a"
"""Stands in for `call_llm`."""
ACTIVITY_STEP_B = "bench_step_b"
"""Stands in for `execute_tool`; records when it started (approval latency)."""
SIGNAL_GO = "go"


class BareInput(BaseModel):
    rounds: int
    pause_for_signal: bool = False
    """Run one step, wait for the `go` signal, then step B and a final step A, like an agent
    round that needs approval (model call, pause, tool, closing model call)."""


class StepInput(BaseModel):
    workflow_id: str
    round: int


@workflow.defn(name=BARE_WORKFLOW)
class BareWorkflow:
    def __init__(self) -> None:
        self._go = False
        self._paused = False

    @workflow.run
    async def run(self, input: BareInput) -> int:
        wid = workflow.info().workflow_id
        if input.pause_for_signal:
            await self._step(ACTIVITY_STEP_A, StepInput(workflow_id=wid, round=0))
            self._paused = True
            await workflow.wait_condition(lambda: self._go)
            self._paused = False
            await self._step(ACTIVITY_STEP_B, StepInput(workflow_id=wid, round=0))
            await self._step(ACTIVITY_STEP_A, StepInput(workflow_id=wid, round=1))
            return 1
        for round_ in range(input.rounds):
            await self._step(ACTIVITY_STEP_A, StepInput(workflow_id=wid, round=round_))
            await self._step(ACTIVITY_STEP_B, StepInput(workflow_id=wid, round=round_))
        return input.rounds

    async def _step(self, name: str, step: StepInput) -> None:
        await workflow.execute_activity(
            name, step, start_to_close_timeout=timedelta(seconds=60), summary=name
        )

    @workflow.query
    def paused(self) -> bool:
        """True while waiting for `go` (the bench waits for this before it signals)."""
        return self._paused

    @workflow.signal(name=SIGNAL_GO)
    def go(self) -> None:
        self._go = True
