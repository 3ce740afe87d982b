"""What the workflow tells operators: one function per fact, each a no-op outside a workflow.

Counters and histograms go through `workflow.metric_meter()`, which records nothing while a run
replays its history: a worker that rebuilds a run from history (after an eviction, a restart,
or on another worker) never counts that run's rounds, answers or compactions again. The names
are the ones the worker's Prometheus endpoint serves (`runtime.metrics_runtime` adds `_total`
to counters):

- `agent_rounds_total`: a model call the loop makes (`round_started`);
- `agent_approvals_total{source, decision}`: every answer recorded (`approval_recorded`), and
  every call whose approval timeout passed unanswered (`decision="expired"`, `source="timeout"`:
  `approvals_expired`);
- `agent_approval_wait_seconds{source}`: for an answer to a call that was announced as waiting,
  workflow time from the `awaiting_approval` event to the answer;
- `agent_compactions_total`: a compaction of the model's view (`compacted`);
- `agent_runs_waiting_for_person`: a gauge, this worker's view (`phase_changed`, `run_left`).

The gauge is the one fact that is state, not an event: it counts the runs this worker process
holds in its workflow cache whose phase is one of `WAITING_PHASES`. That set
is kept once per process (`workflows.waiting_runs`, imported through the sandbox's
pass-through, so every run shares it whatever copy of this module it uses), updated whether or
not the run is replaying (a run rebuilt from history while it waits is waiting), and each
change sets the gauge through the worker's own meter (`bind_waiting_gauge`, called by the
plugin for every worker it configures; the replay-safe workflow meter would miss a change made
while replaying). A run leaves the set
when it leaves the phase, and when its execution ends on this worker in any way (finished,
failed, continued as new, evicted from the cache): `RunTracking` calls `run_left`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import temporalio.worker
from temporalio import workflow
from temporalio.common import MetricMeter

with workflow.unsafe.imports_passed_through():
    from workflows.waiting_runs import WAITING_RUNS

if TYPE_CHECKING:
    from workflows.model import ApprovalRecord, ApprovalWait

ROUNDS = "agent_rounds"
APPROVALS = "agent_approvals"
APPROVAL_WAIT = "agent_approval_wait_seconds"
COMPACTIONS = "agent_compactions"
SUB_AGENTS = "agent_sub_agents"
WAITING = "agent_runs_waiting_for_person"
WAITING_PHASES = ("awaiting_approval", "approval_expired", "awaiting_answer")
"""The phases in which a run waits for a person (a call to approve, also after its approval
timeout passed, a question to answer)."""


def _meter() -> MetricMeter | None:
    return workflow.metric_meter() if workflow.in_workflow() else None


def round_started() -> None:
    """The loop is about to ask the model (one round)."""
    if (meter := _meter()) is not None:
        meter.create_counter(ROUNDS, "Model calls the agent loop made").add(1)


def approval_recorded(record: ApprovalRecord, wait: ApprovalWait | None) -> None:
    """An answer was recorded (a person's, a rule's, the timeout's or a seeded one). `wait` is
    the run's announced approval wait, if any: the answer then ends a wait that people saw."""
    if (meter := _meter()) is None:
        return
    decision = "approved" if record.approved else "rejected"
    meter.create_counter(APPROVALS, "Answers to tool calls, by who decided").add(
        1, {"source": record.source, "decision": decision}
    )
    if wait is not None:
        seconds = max(0.0, (record.at - wait.since).total_seconds())
        meter.create_histogram_float(
            APPROVAL_WAIT, "Seconds from awaiting_approval to the answer", "s"
        ).record(seconds, {"source": record.source})


def approvals_expired(count: int) -> None:
    """Calls whose approval timeout passed unanswered (`on_approval_timeout: expire`): counted
    as `decision="expired"`, by the `timeout` (nothing was decided: the calls wait on)."""
    if (meter := _meter()) is not None and count:
        meter.create_counter(APPROVALS, "Answers to tool calls, by who decided").add(
            count, {"source": "timeout", "decision": "expired"}
        )


def compacted() -> None:
    """The model's view was compacted (a `compaction` event)."""
    if (meter := _meter()) is not None:
        meter.create_counter(COMPACTIONS, "Compactions of the model's view").add(1)


def sub_agent_finished(reason: str | None) -> None:
    """A sub-agent ended (`finish_reason`, or `failed` when Temporal ended it without one)."""
    if (meter := _meter()) is not None:
        meter.create_counter(SUB_AGENTS, "Sub-agents that ended, by how").add(
            1, {"finish_reason": reason or "failed"}
        )


def bind_waiting_gauge(namespace: str, task_queue: str, meter: MetricMeter) -> None:
    """Where the gauge of the runs waiting for a person on (namespace, task_queue) is set: the
    worker's runtime meter (called by the plugin for every worker it configures)."""
    labels = {"namespace": namespace, "task_queue": task_queue, "workflow_type": "AgentWorkflow"}
    gauge = meter.create_gauge(WAITING, "Runs this worker holds that wait for a person")
    WAITING_RUNS.bind(namespace, task_queue, gauge.with_additional_attributes(labels))


def phase_changed(phase: str) -> None:
    """The run's phase changed: it waits for a person exactly while it is `awaiting_approval`,
    `approval_expired` (its calls wait on after their timeout) or `awaiting_answer`."""
    if workflow.in_workflow():
        _mark(phase in WAITING_PHASES)


def run_left() -> None:
    """The run's execution ended on this worker (any way): it no longer waits here."""
    if workflow.in_workflow():
        _mark(False)


def waiting_here(namespace: str, task_queue: str) -> int:
    """How many runs on (namespace, task_queue) this process counts as waiting for a person."""
    return WAITING_RUNS.count(namespace, task_queue)


def _mark(waiting: bool) -> None:
    info = workflow.info()
    WAITING_RUNS.mark(info.namespace, info.task_queue, info.run_id, waiting)


class RunTracking(temporalio.worker.Interceptor):
    """The worker interceptor that tells this module when a run's execution ends here."""

    def workflow_interceptor_class(
        self, input: temporalio.worker.WorkflowInterceptorClassInput
    ) -> type[temporalio.worker.WorkflowInboundInterceptor]:
        return _RunEnd


class _RunEnd(temporalio.worker.WorkflowInboundInterceptor):
    async def execute_workflow(self, input: temporalio.worker.ExecuteWorkflowInput) -> Any:
        try:
            return await self.next.execute_workflow(input)
        finally:
            run_left()
