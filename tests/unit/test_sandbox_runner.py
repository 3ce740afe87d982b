"""The product's workflow sandbox passes `workflows/` through (not imported again per run), keeps
a worker's own sandbox settings, and leaves a runner that is no sandbox alone."""

from __future__ import annotations

from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.plugin import AgentPlugin
from activities.sandbox_runner import workflow_runner


def passed_through(runner: object) -> set[str]:
    assert isinstance(runner, SandboxedWorkflowRunner)
    return set(runner.restrictions.passthrough_modules)


def test_a_worker_without_a_runner_gets_the_sandbox_with_workflows_passed_through() -> None:
    modules = passed_through(workflow_runner())
    assert "workflows" in modules
    assert SandboxRestrictions.default.passthrough_modules <= modules


def test_a_workers_own_sandbox_keeps_its_settings() -> None:
    own = SandboxRestrictions.default.with_passthrough_modules("mine")
    runner = workflow_runner(SandboxedWorkflowRunner(restrictions=own))
    assert {"mine", "workflows"} <= passed_through(runner)


def test_a_runner_that_is_no_sandbox_is_left_alone() -> None:
    unsandboxed = UnsandboxedWorkflowRunner()
    assert workflow_runner(unsandboxed) is unsandboxed


def test_the_plugin_gives_its_workers_and_replayers_the_runner() -> None:
    plugin = AgentPlugin(activities=[])
    assert plugin.workflow_runner is workflow_runner
