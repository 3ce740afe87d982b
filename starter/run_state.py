"""A run as its history says now, read with no worker and without changing anything: what a fork
starts from and what `what-if` decides again.

- `first_options`: the options its first generation was started with (that generation's start
  event), as the client gave them: the run's own rules (`approval_policy`) as they were at the
  start, before anyone remembered an answer or replaced them.
- `messages`: its record (every message, compaction markers in place). A run that completed
  has it in its result (its close event: one small read); any other run (open, or ended by
  Temporal) is replayed from its current generation's history, as `starter.record` replays a
  closed run: the same workflow code and data converter a worker uses, the run's state read
  from the replayed instance as it was after its last recorded step.
- `state` (`whole=True`): the run's whole state the same way (its audit, the worker's tools and
  rules as the run had them, its options), always by replay.

Only the server's read APIs are used: describe, and the history's events. Nothing is sent to
the run: no signal, no update, no query. A run sealed with a key this program lacks raises the
codec's DecryptionError, as its queries would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import warnings
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHistory,
    WorkflowHistoryEventFilterType,
)
from temporalio.converter import PayloadCodec
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from workflows.model import AgentRunInput, AgentRunOptions, AgentRunResult, AgentState, ChatMessage
from workflows.run.agent import AgentWorkflow

warnings.filterwarnings("ignore", category=workflow.UnfinishedUpdateHandlersWarning)
warnings.filterwarnings("ignore", category=workflow.UnfinishedSignalHandlersWarning)


class NotReadable(Exception):
    """The run's history could not be read here (e.g. a run of other code, or no start)."""


@dataclass(frozen=True)
class RunState:
    """One run (chain) as its history says now."""

    workflow_id: str
    first_run_id: str
    """The first run id of its chain (what answers carry as `run_id`)."""
    run_id: str
    """Its current (or last) generation's run id."""
    open: bool
    messages: list[ChatMessage]
    first_options: AgentRunOptions
    state: AgentState | None = None
    """The whole state (with `whole=True`): None when only the record was read."""
    history_length: int = 0
    """Events in its current generation's history when it was read (0: not fetched)."""


@dataclass
class _Replayed:
    instance: AgentWorkflow
    returned: bool = False
    seen_messages: int = 0


class _Capture(Interceptor):
    """Keeps each replayed run's instance (by workflow id), whether its `run` returned, and how many
    messages it had after each activation: a run that never returned (open, or ended by
    Temporal) is evicted at the end of its history, which cancels it, and its cancellation path
    adds what never happened; only what it had after its last recorded activation counts then."""

    def __init__(self) -> None:
        self.runs: dict[str, _Replayed] = {}

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        runs = self.runs

        class _Inbound(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                replayed = runs[workflow.info().workflow_id] = _Replayed(workflow.instance())

                def snapshot() -> bool:  # never met: conditions are checked every activation
                    replayed.seen_messages = len(replayed.instance._state.messages)
                    return False

                watching = asyncio.ensure_future(workflow.wait_condition(snapshot))
                try:
                    result = await super().execute_workflow(input)
                    replayed.returned = True
                    return result
                finally:
                    watching.cancel()

        return _Inbound


class _ReadingCodec(PayloadCodec):
    """The run's codec for reading: it decodes (decrypts) as the codec does, and leaves what the
    replayed workflow encodes as it is, since a replay's commands are compared, never sent. It
    is no `WithSerializationContext`, so the SDK does not copy the data converter for every
    payload of every activity (what makes a replay slow): decoding needs no context."""

    def __init__(self, codec: PayloadCodec) -> None:
        self._codec = codec

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self._codec.decode(payloads)


class StateReplayer:
    """Replays runs' histories (one generation each: its start event holds what the generations
    before it handed over) and gives each run's state after the last step its history records.
    One replayer serves many runs, with the client's data converter (its key, its store)."""

    def __init__(self, client: Client) -> None:
        self._capture = _Capture()
        converter = client.data_converter
        if converter.payload_codec is not None:
            reading = _ReadingCodec(converter.payload_codec)
            converter = dataclasses.replace(converter, payload_codec=reading)
        self._replayer = Replayer(
            workflows=[AgentWorkflow],
            data_converter=converter,
            interceptors=[self._capture],
            workflow_runner=UnsandboxedWorkflowRunner(),
        )

    def _state(self, history: WorkflowHistory, failure: Exception | None) -> AgentState:
        replayed = self._capture.runs.pop(history.workflow_id, None)
        if failure is not None or replayed is None:
            raise NotReadable(str(failure or "the run never started"))
        state = replayed.instance._state
        if not replayed.returned:
            state = state.model_copy(update={"messages": state.messages[: replayed.seen_messages]})
        return state

    async def state(self, history: WorkflowHistory) -> AgentState:
        result = await self._replayer.replay_workflow(history, raise_on_replay_failure=False)
        return self._state(history, result.replay_failure)

    async def states(
        self, histories: AsyncIterator[WorkflowHistory]
    ) -> AsyncIterator[tuple[WorkflowHistory, AgentState | NotReadable]]:
        """Each history's state (or why it cannot be read), in one replaying worker."""
        seen: list[WorkflowHistory] = []

        async def remembered() -> AsyncIterator[WorkflowHistory]:
            async for history in histories:
                seen.append(history)
                yield history

        async with self._replayer.workflow_replay_iterator(remembered()) as results:
            async for result in results:
                history = seen.pop(0)
                try:
                    yield history, self._state(history, result.replay_failure)
                except NotReadable as err:
                    yield history, err


async def _first_event(client: Client, workflow_id: str, run_id: str) -> HistoryEvent:
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    async for event in handle.fetch_history_events(page_size=1):
        return event
    raise NotReadable(f"run {run_id} of '{workflow_id}' has no history")


async def start_input(client: Client, event: HistoryEvent) -> AgentRunInput:
    """A generation's input, decoded from its start event (decrypted, loaded from the store)."""
    started = event.workflow_execution_started_event_attributes
    payloads: Sequence[Any] = list(started.input.payloads)
    if not payloads:
        raise NotReadable("the run's start carries no input")
    decoded = await client.data_converter.decode(payloads, [AgentRunInput])
    run_input: AgentRunInput = decoded[0]
    return run_input


async def first_options(
    client: Client, workflow_id: str, first_run_id: str, first: HistoryEvent | None = None
) -> AgentRunOptions:
    """The options the chain's first generation was started with."""
    if first is None:
        first = await _first_event(client, workflow_id, first_run_id)
    run_input = await start_input(client, first)
    if run_input.state is not None:  # a hand-over: not the chain's first generation
        raise NotReadable(f"the first run of '{workflow_id}' starts from a hand-over")
    return run_input.options


async def _result_messages(client: Client, workflow_id: str, run_id: str) -> list[ChatMessage]:
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    events = handle.fetch_history_events(
        event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT
    )
    async for event in events:
        attributes = event.workflow_execution_completed_event_attributes
        decoded = await client.data_converter.decode(
            list(attributes.result.payloads), [AgentRunResult]
        )
        result: AgentRunResult = decoded[0]
        return result.messages
    raise NotReadable(f"run {run_id} of '{workflow_id}' has no close event")


async def read_run(
    client: Client,
    workflow_id: str,
    *,
    whole: bool = False,
    replaying: StateReplayer | None = None,
) -> RunState:
    """The run of `workflow_id` (its latest chain) as its history says now. Raises RPCError as
    the server does (NOT_FOUND for an unknown id), NotReadable, and the codec's DecryptionError
    for a run sealed with a key this program lacks."""
    description = await client.get_workflow_handle(workflow_id).describe()
    info = description.raw_description.workflow_execution_info
    run_id = description.run_id
    first_run_id = info.first_run_id or run_id
    status = description.status
    is_open = status in {WorkflowExecutionStatus.RUNNING, None}
    if not whole and status == WorkflowExecutionStatus.COMPLETED:
        messages, options = await asyncio.gather(
            _result_messages(client, workflow_id, run_id),
            first_options(client, workflow_id, first_run_id),
        )
        return RunState(workflow_id, first_run_id, run_id, False, messages, options)
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    if not history.events:
        raise NotReadable(f"'{workflow_id}' has no history")
    first = history.events[0] if run_id == first_run_id else None
    state, options = await asyncio.gather(
        (replaying or StateReplayer(client)).state(history),
        first_options(client, workflow_id, first_run_id, first),
    )
    return RunState(
        workflow_id,
        first_run_id,
        run_id,
        is_open,
        list(state.messages),
        options,
        state if whole else None,
        len(history.events),
    )
