"""The model's context window over a run: the one owner of `state.context`.

Before every model call the run estimates the request (`window.estimate`); past
`options.compact_at` of the window it compacts the model's view (`window.compact`): old tool
results become placeholders, then the oldest turns are summarised by the
`summarize_conversation` activity (its result is in history, so a replay compacts the same way),
until the view is under `options.compact_to`; the last rounds are summarised or cut only when the
request would not fit the window. Between two compactions the view only grows at its end. A
provider that says the request is too long lowers the window to what it names and the call is
made again (twice at most). Each compaction is a `compaction` event and a marker in the record;
the record itself keeps every message.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError

from workflows import activity_calls as calls
from workflows import metrics
from workflows.context import RunContext
from workflows.conversation.record import Conversation
from workflows.conversation.window import (
    DEFAULT_RESERVE,
    SummaryRange,
    Thresholds,
    compact,
    estimate,
    learn,
    lowered,
    model_view,
    summary_tokens,
    view_basis,
)
from workflows.model import (
    ChatMessage,
    CompactionEvent,
    ContextState,
    SummaryRequest,
    ToolSpec,
    Usage,
    WorkerSetup,
)


def exceeded_message(needed: int, window: int) -> str:
    return (
        f"Context window exceeded: the request needs about {needed} tokens, more than the"
        f" model's window of {window} tokens, even with older messages dropped, summarised"
        " and cut"
    )


class Compactor:
    def __init__(
        self,
        ctx: RunContext,
        conversation: Conversation,
        offered: Callable[[], list[ToolSpec]],
    ) -> None:
        self._state = ctx.state
        self._conversation = conversation
        self._emit = ctx.emit
        self._offered = offered
        """The tools the request offers (their schemas take room in the window)."""
        self._warn = ctx.warn

    @property
    def active(self) -> bool:
        """Whether this run keeps to a window (once the worker said it)."""
        return self._state.context.window is not None

    def start(self, setup: WorkerSetup) -> None:
        """The window of this run: the worker's, lowered by `options.context_tokens`."""
        options = self._state.options
        window = setup.context_tokens
        if options.context_tokens is not None:
            window = min(window, options.context_tokens)
        reserve = options.max_tokens or setup.max_tokens or DEFAULT_RESERVE
        self._state.context = ContextState(window=window, reserve=min(reserve, window // 2))

    def view(self) -> list[ChatMessage]:
        """What the model is sent now (the `model_view` query)."""
        return model_view(self._conversation.messages, self._state.context)

    def view_basis(self) -> object:
        """Equal from one request to the next: the view only grew at its end."""
        return view_basis(self._state.context)

    def _tools_bytes(self) -> int:
        fields = {"name", "description", "parameters"}
        specs = [s.model_dump(include=fields) for s in self._offered()]
        return len(json.dumps(specs, separators=(",", ":")).encode())

    def estimate(self) -> int:
        messages = self._conversation.messages
        return estimate(messages, self._state.context, self._tools_bytes())

    async def fit(self) -> str | None:
        """Compact the view if the next request would pass `compact_at` of the window. Why the
        run cannot go on (no view fits the window), or None."""
        ctx = self._state.context
        if ctx.window is None:
            return None
        messages = self._conversation.messages
        done = await compact(messages, ctx, self._tools_bytes(), self._rules(), self._summarise)
        if done is None:
            return None
        if done.marker is not None:
            self._conversation.append(done.marker)
        self._state.context = done.ctx
        if done.changed:
            metrics.compacted()
            self._emit(
                CompactionEvent(
                    before_tokens=done.before,
                    after_tokens=done.after,
                    dropped_results=done.dropped,
                    summarised_messages=done.summarised,
                    cut_results=done.cut,
                )
            )
        window = done.ctx.window
        assert window is not None
        return exceeded_message(done.after, window) if done.after > window else None

    def _rules(self) -> Thresholds:
        options = self._state.options
        return Thresholds(
            at=options.compact_at,
            to=options.compact_to,
            keep_rounds=options.keep_rounds,
        )

    async def _summarise(self, span: SummaryRange, ctx: ContextState) -> str | None:
        """The summary of `span`, or None when it could not be made (the run says so in a
        warning and goes on with the other steps: a summary is a saving, not a need)."""
        assert ctx.window is not None
        info = workflow.info()
        request = SummaryRequest(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            first=span.first,
            last=span.last,
            skip=span.skip,
            previous_summary=ctx.summary,
            model=self._state.options.model,
            max_tokens=summary_tokens(ctx.window),
            context_tokens=ctx.window,
        )
        try:
            reply = await calls.summarize(request)
        except ActivityError as err:
            if calls.is_cancellation(err):
                raise
            self._warn(
                f"compaction: messages {span.first}–{span.last - 1} could not be summarised"
                f" ({calls.failure_detail(err)}); the view is made smaller without a summary"
            )
            return None
        self._state.usage = self._state.usage + reply.usage
        return reply.text

    def learn(self, usage: Usage, record_length: int) -> None:
        """After a request: the provider's count of it."""
        if self.active:
            self._state.context = learn(self._state.context, usage.prompt_tokens, record_length)

    def too_long(
        self, named: tuple[int | None, int | None], provider_says: str, record_length: int
    ) -> str | None:
        """The provider said the request was too long: lower the window to what it named and
        let the loop call again; why the run ends instead (the second such reply in a row)."""
        window, request = named
        ctx = lowered(
            self._state.context,
            self.estimate(),
            record_length,
            window=window,
            prompt_tokens=request,
        )
        self._state.context = ctx
        if ctx.too_long >= 2:
            return f"Context window exceeded: {provider_says}"
        return None
