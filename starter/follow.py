"""The command line's follower: what `starter.watch` yields, printed (the model's text as it is
generated, each event once), and the people around it asked.

When the run waits for approval, an `on_awaiting` callback decides (a person at a terminal, the
demo, …); without one the follower prints how to answer and keeps following. Between the turns
of a session, `on_waiting_for_message` asks for the next message (or the follower says how to
send one).

A failure that passes (a worker away for a restart, a slow answer) does not end following: what
the follower asks the run is asked again, and one line says so if it lasts (`starter.patience`).

The transcript shows the session's user messages too (`user: …`, each where its turn begins,
read from the run's record after each reply with text), and every reply of the model ends its own
line, so turns never run together.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
from collections.abc import Awaitable, Callable, Sequence
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

from runtime.shown_commands import starter_command
from starter.errors import refusal
from starter.handle import AgentHandle, AnswerNotDelivered
from starter.output import Output
from starter.patience import Patience
from starter.render import call_text, pin_hint, quorum_text, text_block, visible
from starter.request_trouble import NoWorker
from starter.signed_answer import PromptKey as ApproverKey
from starter.signed_answer import as_sent, groups_in_users_file
from starter.watch import Ended, Quiet, Restart, Streamed, Text, watch
from starter.web.auth import UsersFileError
from workflows.contract.arguments import arguments_digest
from workflows.model import (
    ApprovalExpiredEvent,
    AwaitingApprovalEvent,
    ChatMessage,
    FinishReason,
    QuestionEvent,
    Quorum,
    SubAgentWaitingEvent,
    TextDeltaEvent,
    ToolApprovalResponse,
    ToolCall,
    WarningEvent,
)
from workflows.run.event_log import EVENT_TEXT_LIMIT
from workflows.run.wording import EMPTY_REPLY_NUDGE
from workflows.shown import shorten

LOOK_SECONDS = 5.0
"""The longest the follower waits for the run's status between items: a worker that answers later
is asked again (a failure that passes), not waited for while nothing is printed."""

AwaitingHandler = Callable[[WorkflowHandle[Any, Any], list[ToolCall]], Awaitable[None]]
WaitingHandler = Callable[[WorkflowHandle[Any, Any]], Awaitable[bool]]
QuestionHandler = Callable[[WorkflowHandle[Any, Any], QuestionEvent], Awaitable[None]]
SubAgentHandler = Callable[[SubAgentWaitingEvent], Awaitable[None]]


class ShownCalls(list[ToolCall]):
    """The calls a person is asked about, and the run they belong to (the first run id of its
    chain): an answer carries both, so it is refused if the run or the call changed since."""

    def __init__(self, calls: list[ToolCall], run_id: str | None) -> None:
        super().__init__(calls)
        self.run_id = run_id


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
    """The starter as it runs from here (`.venv/bin/python -m starter` on a fresh clone)."""
    return starter_command()


class _Prompts:
    """What the follower does besides printing: ask about newly pending calls (or say how to
    answer them), and between the turns of a session ask for the next message (or say how)."""

    def __init__(
        self,
        handle: AgentHandle,
        out: Output,
        on_awaiting: AwaitingHandler | None,
        on_waiting_for_message: WaitingHandler | None,
        patience: Patience,
    ) -> None:
        self._handle = handle
        self._out = out
        self._patience = patience
        self._on_awaiting = on_awaiting
        self._on_waiting_for_message = on_waiting_for_message
        self._asked: set[str] = set()
        self._session_hinted_at: int | None = None
        self.closed = False
        """The run had closed when following began: its past asks nobody."""

    async def pending_calls(self) -> None:
        """After an `awaiting_approval` event: the calls still unanswered now (not those of an old
        event replayed from the log) and not asked about before. A closed run has none (and no
        worker may be there to say so)."""
        if self.closed:
            return
        while True:
            try:
                status = await self._handle.status(seconds=LOOK_SECONDS)
                break
            except (NoWorker, RPCError, WorkflowQueryFailedError) as err:
                if not await self.still_open():
                    return
                if not self._patience.transient(err):
                    raise
                await self._patience.pause(err)
        self._patience.ok()
        if status.phase != "awaiting_approval":
            return
        calls = [c for c in status.pending_approvals if c.id not in self._asked]
        self._asked.update(c.id for c in calls)
        if calls and self._on_awaiting is not None:
            shown = ShownCalls(calls, await self._handle.first_run_id(status))
            await self._on_awaiting(self._handle.raw, shown)
        elif calls:
            run_id = await self._handle.first_run_id(status)
            print_answer_hint(self._out, self._handle.id, calls, run_id, status.quorums)

    async def between_turns(self, last: int) -> bool:
        """While nothing happens: if a session waits for a message, ask for it (once per wait).
        False when the person chose to stop following."""
        if self._session_hinted_at == last:
            return True
        try:
            status = await self._handle.status(seconds=LOOK_SECONDS)
        except Exception as err:
            if not self._patience.transient(err):
                raise
            await self._patience.pause(err)  # the next quiet moment asks again
            return True
        self._patience.ok()
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
        if not await self._on_waiting_for_message(self._handle.raw):
            return False
        self._session_hinted_at = None
        return True

    async def still_open(self) -> bool:
        """Whether the run is still open (also while the server does not say)."""
        try:
            description = await self._handle.describe()
        except RPCError as err:
            self._patience.server_failed(err)  # raises once the run or the server is gone
            return True
        self._patience.server_answered()
        return description.status == WorkflowExecutionStatus.RUNNING


class _UserLines:
    """A session's user messages in the transcript, each on a line of its own where its turn
    begins: after a reply with text (or a warning, which may end a turn), the next item first
    prints the user messages the record holds after that reply and before the next one. The
    reply is found in the record by its text, so a follower that joined late (`--after`) or
    reads a closed run's history shows each message once, in its place."""

    def __init__(
        self,
        handle: AgentHandle,
        out: Output,
        patience: Patience,
        *,
        from_start: bool,
        shown: bool = True,
    ) -> None:
        self._handle = handle
        self._out = out
        self._patience = patience
        self._shown = shown and not out.json_mode
        """Shown at all: not in JSON output (events only), nor where the caller says them."""
        self._upto: int | None = 0 if from_start else None
        """The record's messages before this index are shown (None: not yet placed)."""
        self._reply: str | None = None
        """The last reply's text (its event's preview), to be found in the record."""
        self._due = from_start and self._shown
        self.record: list[ChatMessage] | None = None
        """A closed run's whole record, read once (None: asked of the run each time)."""

    def replied(self, text: str) -> None:
        if text and self._shown:
            self._reply = text
            self._due = True

    def turn_may_have_ended(self) -> None:
        self._due = self._shown

    async def show(self) -> None:
        """Before the next item: the user messages since the last reply, if any are due."""
        if not self._due:
            return
        record = self.record
        if record is None:
            try:
                record = await self._handle.messages(seconds=LOOK_SECONDS)
            except Exception as err:
                if not self._patience.transient(err):
                    raise
                return  # not now: the next item asks again
        self._due = False
        start = self._upto
        if self._reply is not None:
            found = _reply_at(record, self._reply, start or 0)
            start = start if found is None else found + 1
            self._reply = None
        if start is None:
            return  # joined after the run's start: shown from its next reply on
        limit = next((i for i in range(start, len(record)) if _replied(record[i])), len(record))
        for message in record[start:limit]:
            if message.role == "user" and message.content != EMPTY_REPLY_NUDGE:
                self._out.line(f"user: {text_block(message.content)}")
        self._upto = limit


def _replied(message: ChatMessage) -> bool:
    """A reply of the model with text (each has its `text_delta` event)."""
    return message.role == "assistant" and bool(message.content)


def _reply_at(record: list[ChatMessage], text: str, start: int) -> int | None:
    """Where the reply whose event says `text` is in the record, from `start` on."""
    for index in range(start, len(record)):
        if _replied(record[index]) and shorten(record[index].content, EVENT_TEXT_LIMIT) == text:
            return index
    return None


async def follow(
    client: Client,
    workflow_id: str,
    out: Output,
    *,
    after: int = -1,
    on_awaiting: AwaitingHandler | None = None,
    on_waiting_for_message: WaitingHandler | None = None,
    stream: bool = True,
    on_question: QuestionHandler | None = None,
    user_messages: bool = True,
    on_sub_agent_waiting: SubAgentHandler | None = None,
) -> Followed:
    """Print the run's events from `after` on until it finishes, and (from the stream) the
    model's text as it is generated, before the round's tool calls; with `user_messages`, the
    session's user messages where their turns begin."""
    handle = AgentHandle(client, workflow_id)
    patience = Patience(on_notice=lambda line: out.info(line) if line else None)
    prompts = _Prompts(handle, out, on_awaiting, on_waiting_for_message, patience)
    prompts.closed = not await prompts.still_open()
    users = _UserLines(handle, out, patience, from_start=after < 0, shown=user_messages)
    if prompts.closed and user_messages and not out.json_mode:
        record = await handle.record()  # a closed run's from its history, as its events
        users.record = None if record is None else record.messages
    last = after
    items = watch(
        client,
        workflow_id,
        after=after,
        stream=stream,
        skip_streamed_text=not out.json_mode,
        patience=patience,
    )
    async with contextlib.aclosing(items):
        async for item in items:
            if isinstance(item, Text):
                await users.show()
                out.stream_text(item.text)
            elif isinstance(item, Streamed):
                out.end_text()
                users.replied(item.text)
            elif isinstance(item, Restart):
                out.info("  (the model call failed and was retried: ignore the text above)")
            elif isinstance(item, Quiet):
                if not await prompts.between_turns(item.last_seq):
                    return Followed(None, item.last_seq)
            elif isinstance(item, Ended):
                if item.closed_status is not None:
                    why = f" ({visible(item.reason)})" if item.reason else ""
                    out.info(f"run ended without a finished event: {item.closed_status}{why}")
                return Followed(item.finish_reason, item.last_seq, item.closed_status)
            else:
                await users.show()
                out.event(item)
                last = item.seq
                if isinstance(item, TextDeltaEvent):
                    users.replied(item.delta)
                elif isinstance(item, WarningEvent):
                    users.turn_may_have_ended()
                if isinstance(item, AwaitingApprovalEvent):
                    await prompts.pending_calls()
                elif isinstance(item, QuestionEvent) and on_question is not None:
                    await on_question(handle.raw, item)
                elif isinstance(item, QuestionEvent) and not prompts.closed:
                    how = "one option per TEXT" if item.multiple else "TEXT"
                    call = f"{visible(workflow_id)} {visible(item.call_id)}"
                    out.info(f"  answer it: {cli_name()} answer {call} {how}")
                elif isinstance(item, SubAgentWaitingEvent) and on_sub_agent_waiting is not None:
                    await on_sub_agent_waiting(item)
                elif isinstance(item, SubAgentWaitingEvent) and not prompts.closed:
                    out.info(
                        f"  answer it on the sub-agent {visible(item.workflow_id)}: {cli_name()}"
                        " pending prints the command"
                    )
                elif isinstance(item, ApprovalExpiredEvent) and not prompts.closed:
                    for call_id in item.call_ids:
                        out.info(
                            f"  ask again: {cli_name()} reask {visible(workflow_id)}"
                            f" {visible(call_id)} (or reject it, or cancel the run)"
                        )
    return Followed(None, last)  # pragma: no cover - watch always ends with Ended


async def follow_by_polling(
    client: Client,
    workflow_id: str,
    out: Output,
    *,
    after: int = -1,
    on_awaiting: AwaitingHandler | None = None,
    on_waiting_for_message: WaitingHandler | None = None,
) -> Followed:
    """`follow` from the event log only (for a worker without the live stream)."""
    return await follow(
        client,
        workflow_id,
        out,
        after=after,
        on_awaiting=on_awaiting,
        on_waiting_for_message=on_waiting_for_message,
        stream=False,
    )


def print_answer_hint(
    out: Output,
    workflow_id: str,
    pending: list[ToolCall],
    run_id: str | None = None,
    quorums: Sequence[Quorum] = (),
) -> None:
    """How to answer each call, pinned to the run and the arguments shown (`--run-id`,
    `--sha256`): an answer copied from here is refused if the call changed since. A call under
    an approver rule says its approvals so far and who may answer."""
    by_call = {q.call_id: q for q in quorums}
    for call in pending:
        out.info(f"  needs approval: {call_text(call)}")
        if call.id in by_call:
            out.info(f"    {quorum_text(by_call[call.id])}")
        pin = pin_hint(workflow_id, call.id, run_id, arguments_digest(call.arguments))
        out.info(f"    approve: {cli_name()} approve {pin}")
        out.info(f'    reject:  {cli_name()} reject {pin} --reason "…"')


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


def interactive_approvals(
    out: Output, client: Client, approver: str | None = None
) -> AwaitingHandler:
    """Ask a person at the terminal about each pending call; answers go through the
    `submit_approval` update, so a refusal comes back and is shown. Each answer names the run
    and the arguments the person was shown."""
    key = ApproverKey.from_env()
    who = default_approver() if key is not None else approver or default_approver()

    async def decide(raw: WorkflowHandle[Any, Any], calls: list[ToolCall]) -> None:
        handle = AgentHandle(client, raw.id)
        run_id = calls.run_id if isinstance(calls, ShownCalls) else None
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
                run_id,
                approved=approved,
                reason=reason,
                approver=who,
                remember=choice in {"a", "always"},
            )
            try:
                if key is not None:  # signed as the OS user, with their groups
                    groups = groups_in_users_file(who)
                    response = await as_sent(handle, response, key=key, approver=who, groups=groups)
                await handle.answer(response)
            except UsersFileError as err:
                out.info(f"  not sent: AGENT_WEB_USERS_FILE: {visible(str(err))}")
            except WorkflowUpdateFailedError as err:
                out.info(f"  not accepted: {visible(refusal(err))}")
            except AnswerNotDelivered as err:
                why = "the run is busy" if err.busy else "no worker answered"
                out.info(
                    f"  not delivered within {err.seconds:.0f}s ({why}):"
                    f" answer later with {cli_name()} approve|reject {handle.id} {visible(call.id)}"
                )

    return decide


def interactive_session(out: Output, client: Client, workflow_id: str) -> WaitingHandler:
    """Between turns of a `--keep-alive` session: ask for the next message (empty: stop following;
    the session stays open)."""

    async def next_message(raw: WorkflowHandle[Any, Any]) -> bool:
        text = await _ask("you (empty: leave the session open and stop following): ")
        if text is None or not text.strip():
            out.info(
                f"left session {workflow_id} open:"
                f' {cli_name()} say {workflow_id} "…" / {cli_name()} cancel {workflow_id}'
            )
            return False
        await AgentHandle(client, raw.id).say(text)
        return True

    return next_message
