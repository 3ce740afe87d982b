"""Turns: a session's (`keep_alive`) rounds between one message and the next.

A turn starts with a message and ends with an answer, a limit or a bad reply; between turns the
loop waits for the next message (`waits.Waits.for_message`). The one owner of `session_wait`
and of when a turn's round count starts again.
"""

from __future__ import annotations

from datetime import timedelta

from workflows.context import RunContext
from workflows.conversation.record import Conversation
from workflows.gate.approvals import Approvals
from workflows.model import ChatMessage, SessionWait
from workflows.run.wording import EMPTY_REPLY_NUDGE, nothing_returned_warning, nudged_already


class Turns:
    def __init__(self, ctx: RunContext, conversation: Conversation, approvals: Approvals) -> None:
        self._state = ctx.state
        self._conversation = conversation
        self._approvals = approvals
        self._warn = ctx.warn
        self._now = ctx.now

    def in_session(self) -> bool:
        """A session: a turn that stops at a limit ends the turn, not the run."""
        return self._state.options.keep_alive

    def after_empty_reply(self) -> bool:
        """An empty reply is no answer: the model is asked again once, with a nudge; a second
        one in a row ends the turn (the run, outside a session). True when the run ends (`stop`)."""
        state = self._state
        if not nudged_already(state.messages):
            self._conversation.append(ChatMessage.user(EMPTY_REPLY_NUDGE))
            return False
        if not state.options.keep_alive:
            self._warn(nothing_returned_warning(session=False))
            return True
        self.end(nothing_returned_warning(session=True))
        return False

    def end(self, warning: str) -> None:
        """A session's turn stopped short of an answer: say why, and wait for the next message.
        A message that arrived while the turn ran (the last one, not yet answered) starts the
        next turn at once."""
        self._warn(warning)
        state = self._state
        last = state.messages[-1] if state.messages else None
        unanswered = last is not None and last.role == "user" and last.content != EMPTY_REPLY_NUDGE
        if unanswered and state.round > 0:
            self.start()
            return
        self.await_next()

    def await_next(self) -> None:
        """Between turns: the loop waits for the next message (until the idle deadline)."""
        idle = self._state.options.idle_timeout_seconds
        self._state.session_wait = SessionWait(
            idle_deadline=None if idle is None else self._now() + timedelta(seconds=idle)
        )

    def start(self) -> None:
        """A new turn: its rounds and repeats count from zero."""
        self._state.session_wait = None
        self._state.round = 0
        self._approvals.repeats.new_turn()
