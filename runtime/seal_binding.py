"""The client side of binding sealed payloads to their place (`workflows.contract.seal`).

Every client of the project (`runtime.connect`) carries `SealBindingInterceptor`: while it
starts a workflow, signals one or sends it an update, it tells the codec the role of the
payloads (`start`, `signal:NAME`, `update:NAME`) and, for a signal or an update, the first run
id of the workflow it goes to (from the handle, or one `describe` call), so that the codec seals
them for exactly that run and handler. With encryption off it does nothing.

A `cancel` with no payload is sent as `{}`: with encryption on, a payload-less cancel is
refused like an unsealed one (anybody can send nothing), so a key holder's cancel always
carries a sealed payload.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import (
    DescribeWorkflowInput,
    Interceptor,
    OutboundInterceptor,
    SignalWorkflowInput,
    StartWorkflowInput,
    StartWorkflowUpdateInput,
    WorkflowHandle,
    WorkflowUpdateHandle,
)

from runtime.codec import sealed_for
from workflows import names
from workflows.contract.seal import START_ROLE, Seal, signal_role, update_role

RUN_BOUND_SIGNALS = frozenset(
    {names.SIGNAL_TOOL_APPROVAL, names.SIGNAL_CANCEL, names.SIGNAL_SEND_MESSAGE}
)
"""Signals that carry authority, so are bound to the first run too. Other signals (the live
stream's publishes, sent by activities many times a run) are bound to workflow and role only,
without a `describe` call each."""


class SealBindingInterceptor(Interceptor):
    """Binds what a client seals to the run and handler it is sent to."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Binding(next)


class _Binding(OutboundInterceptor):
    async def _first_run(self, workflow_id: str, run_id: str | None) -> str:
        """The first run id of the chain the workflow's current (or given) run belongs to."""
        described = await self.next.describe_workflow(
            DescribeWorkflowInput(id=workflow_id, run_id=run_id, rpc_metadata={}, rpc_timeout=None)
        )
        return described.raw_description.workflow_execution_info.first_run_id

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        with sealed_for(Seal(workflow_id=input.id, role=START_ROLE)):
            return await self.next.start_workflow(input)

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        if input.signal == names.SIGNAL_CANCEL and not input.args:
            input.args = [{}]
        first_run = ""
        if input.signal in RUN_BOUND_SIGNALS:
            first_run = await self._first_run(input.id, input.run_id)
        seal = Seal(workflow_id=input.id, role=signal_role(input.signal), first_run_id=first_run)
        with sealed_for(seal):
            await self.next.signal_workflow(input)

    async def start_workflow_update(
        self, input: StartWorkflowUpdateInput
    ) -> WorkflowUpdateHandle[Any]:
        first_run = input.first_execution_run_id or await self._first_run(input.id, input.run_id)
        seal = Seal(workflow_id=input.id, role=update_role(input.update), first_run_id=first_run)
        with sealed_for(seal):
            return await self.next.start_workflow_update(input)
