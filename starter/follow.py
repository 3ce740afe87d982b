"""Follow a run live: the run's stream (events and the model's text as it is generated), or, as a
fallback, polling the `events` query with `after=<last seq>`; each event is printed once.

Events carry gap-free sequence numbers that continue across continue-as-new generations, and the
handle follows the latest run of the workflow id, so a follower never misses or repeats an event.
When the run waits for approval, an `on_awaiting` callback decides (a person at a terminal, the
demo, …); without one the follower prints how to answer and keeps following.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError

from starter import live
from starter.answers import AnswerNotDelivered, submit_answer
from starter.errors import refusal
from starter.output import Output
from starter.render import call_text, visible
from workflows import names
from workflows.arguments import arguments_digest
from workflows.model import (
    AgentEvent,
    AgentStatus,
    AwaitingApprovalEvent,
    FinishedEvent,
    FinishReason,
    ToolApprovalResponse,
    ToolCall,
)

RETRIED = "\x00retried"
"""Queued when a model call's streamed text is void (its attempt failed)."""
POLL_SECONDS = 0.25
IDLE_CHECK_EVERY = 6
"""While nothing happens, look at the run's status every this many polls (≈1.5 s)."""

AwaitingHandler = Callable[[WorkflowHandle[object, object], list[ToolCall]], Awaitable[None]]
WaitingHandler = Callable[[WorkflowHandle[object, object]], Awaitable[bool]]


class ShownCalls(list[ToolCall]):
    """The calls a person is asked about, and the run they belong to (the first run id of its
    chain): an answer carries both, so it is refused if the run or the call changed since."""

    def __init__(self, calls: list[ToolCall], run_id: str | None) -> None:
        super().__init__(calls)
        self.run_id = run_id


async def chain_run_id(handle: WorkflowHandle[object, object], status: AgentStatus) -> str | None:
    """The first run id of the run chain whose `status` this is: the status says it; a worker
    that does not yet, the run's description."""
    if status.run_id:
        return status.run_id
    try:
        description = await handle.describe()
    except RPCError:
        return None
    return description.raw_description.workflow_execution_info.first_run_id or None


def answer_for(call: ToolCall, run_id: str | None, **answer: Any) -> ToolApprovalResponse:
    """An answer to `call` as it was shown: its run and the digest of its arguments."""
    return ToolApprovalResponse(
        call_id=call.id, run_id=run_id, arguments_sha256=arguments_digest(call.arguments), **answer
    )


@dataclass
class Followed:
    finish_reason: FinishReason | None
    """None when following stopped before a `finished` event (a session left open, or a run that
    ended without one, e.g. terminated)."""
    last_seq: int
    closed_status: str | None = None


def cli_name() -> str:
    return "python -m starter"


async def fetch_events(handle: WorkflowHandle[object, object], after: int) -> list[AgentEvent]:
    events: list[AgentEvent] = await handle.query(
        names.QUERY_EVENTS, after, result_type=list[AgentEvent]
    )
    return events


async def fetch_status(handle: WorkflowHandle[object, object]) -> AgentStatus:
    status: AgentStatus = await handle.query(names.QUERY_STATUS, result_type=AgentStatus)
    return status


class _Prompts:
    """What both followers do besides printing: ask about newly pending calls (or say how to
    answer them), and between the turns of a session ask for the next message (or say how)."""

    def __init__(
        self,
        handle: WorkflowHandle[object, object],
        out: Output,
        on_awaiting: AwaitingHandler | None,
        on_waiting_for_message: WaitingHandler | None,
    ) -> None:
        self._handle = handle
        self._out = out
        self._on_awaiting = on_awaiting
        self._on_waiting_for_message = on_waiting_for_message
        self._asked: set[str] = set()
        self._session_hinted_at: int | None = None

    async def pending_calls(self) -> bool:
        """After an `awaiting_approval` event: the calls still unanswered now (not those of an old
        event replayed from the log) and not asked about before. True when someone was asked."""
        status = await fetch_status(self._handle)
        if status.phase != "awaiting_approval":
            return False
        calls = [c for c in status.pending_approvals if c.id not in self._asked]
        self._asked.update(c.id for c in calls)
        if calls and self._on_awaiting is not None:
            shown = ShownCalls(calls, await chain_run_id(self._handle, status))
            await self._on_awaiting(self._handle, shown)
            return True
        if calls:
            print_answer_hint(self._out, self._handle.id, calls)
        return False

    async def between_turns(self, last: int) -> bool:
        """While nothing happens: if a session waits for a message, ask for it (once per wait).
        False when the person chose to stop following."""
        if self._session_hinted_at == last:
            return True
        status = await fetch_status(self._handle)
        if status.phase != "waiting_for_message":
            return True
        self._session_hinted_at = last
        workflow_id = self._handle.id
        if self._on_waiting_for_message is None:
            self._out.info(
                f"session open, waiting for a message:"
                f' {cli_name()} say {workflow_id} "…"'
                f" (end it: {cli_name()} cancel {workflow_id})"
            )
            return True
        if not await self._on_waiting_for_message(self._handle):
            return False
        self._session_hinted_at = None
        return True


async def follow(
    client: Client,
    workflow_id: str,
    out: Output,
    *,
    after: int = -1,
    on_awaiting: AwaitingHandler | None = None,
    on_waiting_for_message: WaitingHandler | None = None,
) -> Followed:
    """Print the run's events from `after` on until it finishes, and the model's text as it is
    generated: one ordered subscription to the run's live stream (`starter.live`), so text always
    comes before the round's tool calls. Falls back to polling the `events` query when the
    stream cannot be read (e.g. a worker without it)."""
    handle: WorkflowHandle[object, object] = client.get_workflow_handle(workflow_id)
    # Text pieces and events go through one queue, so they print in stream order even while
    # an approval prompt holds the loop.
    queue: asyncio.Queue[AgentEvent | str] = asyncio.Queue()
    subscription = asyncio.create_task(
        live.follow(
            client,
            workflow_id,
            on_delta=lambda _round, piece: queue.put_nowait(piece),
            on_event=queue.put_nowait,
            on_restart=lambda _round: queue.put_nowait(RETRIED),
            skip_streamed_text=not out.json_mode,
        )
    )
    last = after
    prompts = _Prompts(handle, out, on_awaiting, on_waiting_for_message)
    try:
        while True:
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait(
                {getter, subscription},
                timeout=POLL_SECONDS * IDLE_CHECK_EVERY,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if getter not in done:
                getter.cancel()
            if getter in done:
                event = getter.result()
                if event is RETRIED:
                    out.info("  (the model call failed and was retried: ignore the text above)")
                    continue
                if isinstance(event, str):
                    out.stream_text(event)
                    continue
                if event.seq <= last:
                    continue  # retained events from before `after`
                out.event(event)
                last = event.seq
                if isinstance(event, FinishedEvent):
                    return Followed(event.finish_reason, last)
                if isinstance(event, AwaitingApprovalEvent):
                    await prompts.pending_calls()
                continue
            if subscription.done() and queue.empty():
                # The stream ended without `finished` (terminated run) or cannot be read:
                # the durable event log says the rest.
                return await follow_by_polling(
                    client,
                    workflow_id,
                    out,
                    after=last,
                    on_awaiting=on_awaiting,
                    on_waiting_for_message=on_waiting_for_message,
                )
            if not subscription.done() and not await prompts.between_turns(last):
                return Followed(None, last)
    finally:
        subscription.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await subscription


async def follow_by_polling(
    client: Client,
    workflow_id: str,
    out: Output,
    *,
    after: int = -1,
    on_awaiting: AwaitingHandler | None = None,
    on_waiting_for_message: WaitingHandler | None = None,
) -> Followed:
    """Print the run's events from `after` on until it finishes, polling the `events` query (the
    fallback when the live stream is not available)."""
    handle: WorkflowHandle[object, object] = client.get_workflow_handle(workflow_id)
    last = after
    prompts = _Prompts(handle, out, on_awaiting, on_waiting_for_message)
    idle = 0
    while True:
        try:
            batch = await fetch_events(handle, last)
        except (WorkflowQueryFailedError, RPCError):
            description = await handle.describe()
            if description.status != WorkflowExecutionStatus.RUNNING:
                return _ended_without_finish(out, description.status, last)
            raise
        awaiting = False
        for event in batch:
            out.event(event)
            last = event.seq
            if isinstance(event, FinishedEvent):
                return Followed(event.finish_reason, last)
            if isinstance(event, AwaitingApprovalEvent):
                awaiting = True
        if awaiting and await prompts.pending_calls():
            idle = 0
            continue
        if batch:
            idle = 0
        else:
            idle += 1
            if idle % IDLE_CHECK_EVERY == 0:
                description = await handle.describe()
                if description.status != WorkflowExecutionStatus.RUNNING:
                    # One last look: the finished event may have landed just before the close.
                    tail = await _events_or_empty(handle, last)
                    for event in tail:
                        out.event(event)
                        last = event.seq
                        if isinstance(event, FinishedEvent):
                            return Followed(event.finish_reason, last)
                    return _ended_without_finish(out, description.status, last)
                if not await prompts.between_turns(last):
                    return Followed(None, last)
        await asyncio.sleep(POLL_SECONDS)


def _ended_without_finish(
    out: Output, status: WorkflowExecutionStatus | None, last: int
) -> Followed:
    """The run closed (terminated, timed out, failed) without a `finished` event."""
    name = status.name if status else "UNKNOWN"
    out.info(f"run ended without a finished event: {name}")
    return Followed(None, last, name)


async def _events_or_empty(handle: WorkflowHandle[object, object], after: int) -> list[AgentEvent]:
    try:
        return await fetch_events(handle, after)
    except (WorkflowQueryFailedError, RPCError):
        return []


def print_answer_hint(out: Output, workflow_id: str, pending: list[ToolCall]) -> None:
    for call in pending:
        out.info(f"  needs approval: {call_text(call)}")
        call_id = visible(call.id)
        out.info(f"    approve: {cli_name()} approve {workflow_id} {call_id}")
        out.info(f'    reject:  {cli_name()} reject {workflow_id} {call_id} --reason "…"')


async def _ask(prompt: str) -> str | None:
    try:
        return await asyncio.to_thread(input, prompt)
    except EOFError:
        return None


def default_approver() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment (e.g. a bare container)
        return "unknown"


def interactive_approvals(out: Output, approver: str | None = None) -> AwaitingHandler:
    """Ask a person at the terminal about each pending call; answers go through the
    `submit_approval` update, so a refusal comes back and is shown."""
    who = approver or default_approver()

    async def decide(handle: WorkflowHandle[object, object], calls: list[ToolCall]) -> None:
        for call in calls:
            while True:
                answer = await _ask(
                    f"approve {call_text(call)}? [y]es / [a]lways allow {visible(call.name)}"
                    " in this run / [n]o / [s]kip: "
                )
                if answer is None:
                    return
                choice = answer.strip().lower()
                if choice in {"y", "yes", "a", "always", "n", "no", "s", "skip", ""}:
                    break
            if choice in {"s", "skip", ""}:
                out.info(f"  skipped {visible(call.id)}: answer later with approve/reject")
                continue
            reason: str | None = None
            approved = choice in {"y", "yes", "a", "always"}
            if not approved:
                reason = (await _ask("reason (empty: User denied): ") or "").strip() or None
            response = answer_for(
                call,
                getattr(calls, "run_id", None),
                approved=approved,
                reason=reason,
                approver=who,
                remember=choice in {"a", "always"},
            )
            try:
                await submit_answer(handle, response)
            except WorkflowUpdateFailedError as err:
                out.info(f"  not accepted: {visible(refusal(err))}")
            except AnswerNotDelivered as err:
                why = "the run is busy" if err.busy else "no worker answered"
                out.info(
                    f"  not delivered within {err.seconds:.0f}s ({why}):"
                    f" answer later with {cli_name()} approve|reject {handle.id} {visible(call.id)}"
                )

    return decide


def interactive_session(out: Output, workflow_id: str) -> WaitingHandler:
    """Between turns of a `--keep-alive` session: ask for the next message (empty: stop following;
    the session stays open)."""

    async def next_message(handle: WorkflowHandle[object, object]) -> bool:
        text = await _ask("you (empty: leave the session open and stop following): ")
        if text is None or not text.strip():
            out.info(
                f"left session {workflow_id} open:"
                f' {cli_name()} say {workflow_id} "…" / {cli_name()} cancel {workflow_id}'
            )
            return False
        await handle.signal(names.SIGNAL_SEND_MESSAGE, {"content": text})
        return True

    return next_message
