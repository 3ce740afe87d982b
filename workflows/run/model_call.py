"""One model call of the loop: the request, the reply joining the conversation, its calls
entering through the gate (`Approvals.admit`).

Before the call the conversation's size is checked and the view compacted to the window; a
provider that says the request is too long lowers the window, and the loop calls again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from temporalio import workflow
from temporalio.exceptions import ActivityError

from workflows import activity_calls as calls
from workflows import bounds, metrics
from workflows.context import RunContext
from workflows.conversation.compaction import Compactor
from workflows.conversation.record import Conversation
from workflows.conversation.tail import ConversationTails
from workflows.conversation.window import tokens
from workflows.gate.approvals import Approvals
from workflows.model import (
    ChatMessage,
    LlmRequest,
    LlmResponse,
    Tail,
    TextDeltaEvent,
    ToolSpec,
)
from workflows.people.budget import Budget
from workflows.run.batch import InFlight
from workflows.run.event_log import EVENT_TEXT_LIMIT
from workflows.run.wording import length_warning
from workflows.shown import shorten


@dataclass(frozen=True)
class Ended:
    """The run cannot go on: it ends `error` saying why."""

    problem: str
    outage: bool = False
    """The model server stayed out of reach until the call gave up: a session's turn ends
    instead (`versions.Patched.sessions_outlive_outages`)."""


class ModelCall:
    def __init__(
        self,
        ctx: RunContext,
        conversation: Conversation,
        approvals: Approvals,
        compactor: Compactor,
        inflight: InFlight,
        *,
        budget: Budget,
        offered: Callable[[], list[ToolSpec]] = list,
        digests: ConversationTails | None = None,
    ) -> None:
        self._state = ctx.state
        self._conversation = conversation
        self._approvals = approvals
        self._compactor = compactor
        self._inflight = inflight
        self._emit = ctx.emit
        self._warn = ctx.warn
        self._set_phase = ctx.set_phase
        self._budget = budget
        self._estimate_unreported = ctx.patched.own_keys
        """A reply that reports no usage is counted by estimate against the budget."""
        self._offered = offered
        """The tools the workflow itself offers besides the worker's (`ask_user`)."""
        self._digests = digests or ConversationTails()
        """The prefix digests of the record and the view, shared with the `conversation_tail`
        query (each message hashed once for both)."""

    async def ask(self) -> LlmResponse | Ended | None:
        """One model call; the reply joins the conversation. `Ended` when the run cannot go on
        (why), None when a cancel interrupted the call or it is to be made again."""
        state = self._state
        if problem := self._conversation.too_large():
            return Ended(problem)
        self._set_phase("running", f"round {state.round}: waiting for the model")
        metrics.round_started()
        if problem := await self._compactor.fit():
            return Ended(problem)
        info = workflow.info()
        sent = len(state.messages)
        view = self._compactor.view() if self._compactor.active else None
        digest, tail = self._by_reference(view)
        handle = calls.start_llm(
            LlmRequest(
                workflow_id=info.workflow_id,
                run_id=info.run_id,
                message_count=sent if view is None else len(view),
                round=state.round,
                tools=self._approvals.allowed_tools(),
                model=state.options.model,
                temperature=state.options.temperature,
                max_tokens=state.options.max_tokens,
                view=view is not None,
                offered=self._offered(),
                digest=digest,
                tail=tail,
            )
        )
        self._inflight.add("llm", handle)
        try:
            response: LlmResponse = await handle
        except ActivityError as err:
            if calls.is_cancellation(err):
                if state.cancel is None:
                    raise  # Temporal's own cancellation: run() ends the run as cancelled
                return None
            detail = calls.failure_detail(err)
            named = calls.context_exceeded(err) if self._compactor.active else None
            if named is not None:
                # Too long for the model: a lower window, a smaller view, the call again.
                if (problem := self._compactor.too_long(named, detail, sent)) is None:
                    return None
                return Ended(problem)
            return Ended(f"LLM call failed: {detail}", calls.model_unreachable(err) is not None)
        finally:
            self._inflight.remove("llm")
        if response.usage_reported:
            self._compactor.learn(response.usage, sent)
        elif self._estimate_unreported:
            reply = bounds.json_bytes(response.message)
            self._budget.count_estimate(self._compactor.estimate() + tokens(reply))
        if (ended := self._take(response)) is not None:
            return ended
        return response

    def _by_reference(self, view: list[ChatMessage] | None) -> tuple[str | None, Tail | None]:
        """The digest of what the request is for (the record, or the model's `view` of it) and
        what was added since the previous request (when known), so a worker holding the rest
        needs no query."""
        record = self._state.messages
        if view is None:
            tail = self._conversation.sources.sent(len(record))
            return self._digests.digest(record), tail
        basis = self._compactor.view_basis()
        tail = self._conversation.sources.sent(len(record), len(view), basis)
        return self._digests.digest(view, view=True), tail

    def _take(self, response: LlmResponse) -> Ended | None:
        """The reply joins the conversation and its calls pass the gate; `Ended` when it cannot
        (the run ends)."""
        state = self._state
        state.usage = state.usage + response.usage
        message = self._conversation.reply(
            response.message.content, response.message.tool_calls or [], state.round
        )
        if message.content:
            self._emit(TextDeltaEvent(delta=shorten(message.content, EVENT_TEXT_LIMIT)))
        added = bounds.json_bytes(message)
        if problem := self._conversation.too_large(added, reply=added):
            return Ended(problem)
        self._conversation.append_reply(message, state.round)
        for warning in response.warnings:
            self._warn(warning)
        calls_made = message.tool_calls or []
        if response.finish_reason == "length":
            state.cut_off.update({call.id: response.max_tokens for call in calls_made})
        self._approvals.admit(calls_made, from_text=response.calls_from_text)
        if response.finish_reason == "length":
            self._warn(length_warning(response))
        return None
