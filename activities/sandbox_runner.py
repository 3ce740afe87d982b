"""The workflow sandbox the agent's workers (and replayers) run AgentWorkflow in: Temporal's own,
with the project's workflow package passed through.

The sandbox builds a fresh module namespace for every run and imports again, for that run, each
module not passed through. `workflows.run.agent` imports its helpers through the pass-through
already, so per run it re-imported (and, where bytecode is not cached, compiled) itself and the
package: measured as the largest cost that the bare loop does not pay besides its activations
(docs/reports/benchmark.md). Every module of `workflows/` is pure and deterministic by rule (no
I/O, no clock, no module state that a run changes), which is what passing through needs; the
sandbox's other protections, the restricted standard library in the run's own code, still
apply to everything else the run imports.
"""

from __future__ import annotations

import dataclasses

from temporalio.worker import WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

PASSED_THROUGH = ("workflows",)


def passed_through(restrictions: SandboxRestrictions) -> SandboxRestrictions:
    return restrictions.with_passthrough_modules(*PASSED_THROUGH)


def workflow_runner(existing: WorkflowRunner | None = None) -> WorkflowRunner:
    """The runner for a worker or replayer: `existing` (a worker's own choice) with the package
    passed through when it is a sandbox, unchanged when it is not (an unsandboxed runner)."""
    if existing is None:
        return SandboxedWorkflowRunner(restrictions=passed_through(SandboxRestrictions.default))
    if isinstance(existing, SandboxedWorkflowRunner):
        return dataclasses.replace(existing, restrictions=passed_through(existing.restrictions))
    return existing
