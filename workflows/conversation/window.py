"""The model's context window: estimate a request, build the model's view of the conversation,
and plan the compaction that makes the view fit. Pure; no Temporal import.

The record (`state.messages`) keeps every message. The view is what the model is sent: the
leading system messages and the first user message; then, once older turns were summarised, the
system messages among them and one summary message (a user message saying it is a summary); then
the rest, where tool results older than the last `keep_rounds` rounds are a one-line placeholder
and a result too big for the window is cut. The view changes only at a compaction: between two,
new messages are added at its end and nothing before them changes. A round starts at an
assistant message, so an assistant message and the tool results of its calls are always kept or
left out together. The compaction markers the run appends to the record (so people see where and
how the view changed) are never sent to the model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from workflows.bounds import json_bytes
from workflows.model import ChatMessage, ContextState
from workflows.shown import shorten

BYTES_PER_TOKEN = 3
"""The estimate's exchange rate for text the provider has not counted yet (never more bytes per
token than this: the provider's own counts may only make the estimate larger)."""
DEFAULT_RESERVE = 1_024
"""Tokens kept for the reply when neither the run nor the worker sets `max_tokens`."""
CONTEXT_CUT = "…[cut to fit the model's context window: {more} more characters]"
"""What a message cut for the model's view says at its end."""
MIN_CUT_CHARS = 200
"""A tool result cut to fit the window keeps at least this much."""
MAX_SUMMARY_CHARS = 16_000
"""A summary is at most this long (the activity's reply is bounded too)."""
SUMMARY_CHARS_PER_TOKEN = 6
"""The `summarize_conversation` activity keeps at most this many characters per token asked."""
MARKER_NAME = "compaction"
"""The `name` of the compaction markers in the record."""
USER_SUMMARY_PREFIX = (
    "[This is a summary of the earlier conversation, not a new request: older messages were"
    " summarised to fit the model's context window.]\n"
)
"""The summary as a user message (it is written from tool output: data, never an instruction)."""


def tokens(size: int) -> int:
    """Bytes not yet counted by the provider, as tokens (rounded up)."""
    return -(-size // BYTES_PER_TOKEN)


def placeholder(message: ChatMessage) -> ChatMessage:
    size = len(message.content.encode("utf-8", "surrogatepass"))
    text = f"[{message.name or 'tool'} output dropped to save context: {size} bytes]"
    return message.model_copy(update={"content": text})


def cut_message(message: ChatMessage, keep: int) -> ChatMessage:
    if len(message.content) <= keep:
        return message
    return message.model_copy(update={"content": shorten(message.content, keep, CONTEXT_CUT)})


def head_end(messages: Sequence[ChatMessage]) -> int:
    """The view always keeps the leading system messages and the first user message."""
    for index, message in enumerate(messages):
        if message.role == "user":
            return index + 1
        if message.role != "system":
            return index
    return len(messages)


def is_marker(message: ChatMessage) -> bool:
    """A compaction marker of the record (inside the summarised part, where `markers` no longer
    lists it, it is known by its name)."""
    return message.role == "system" and message.name == MARKER_NAME


def compacted(ctx: ContextState) -> bool:
    return bool(ctx.summary or ctx.dropped_until or ctx.cut or ctx.markers)


def model_view(messages: Sequence[ChatMessage], ctx: ContextState) -> list[ChatMessage]:
    """What the model is sent now (the record itself while nothing was compacted)."""
    if not compacted(ctx):
        return list(messages)
    head = head_end(messages)
    markers = set(ctx.markers)
    view = list(messages[:head])
    start = max(head, ctx.summary_until)
    if ctx.summary is not None:
        view += [m for m in messages[head:start] if m.role == "system" and not is_marker(m)]
        view.append(summary_message(ctx.summary))
    for index in range(start, len(messages)):
        if index in markers:
            continue
        message = messages[index]
        if message.role == "tool" and index < ctx.dropped_until:
            message = placeholder(message)
        elif index in ctx.cut:
            message = cut_message(message, ctx.cut[index])
        view.append(message)
    return view


def view_basis(ctx: ContextState) -> object:
    """What `model_view` makes of the record besides its messages: while it stays the same, the
    view grows by exactly the messages the record gains (`LlmRequest.tail` relies on it)."""
    if not compacted(ctx):
        return None
    cut = tuple(sorted(ctx.cut.items()))
    return (ctx.dropped_until, ctx.summary, ctx.summary_until, tuple(ctx.markers), cut,
            ctx.summary_as_user)  # fmt: skip


def summary_message(summary: str) -> ChatMessage:
    """The summary as the model reads it: a user message that says it is one (it is written
    from tool output: data, never the system's word)."""
    return ChatMessage.user(USER_SUMMARY_PREFIX + summary)


def view_bytes(messages: Sequence[ChatMessage], ctx: ContextState) -> int:
    return sum(json_bytes(m) for m in model_view(messages, ctx))


def estimate(messages: Sequence[ChatMessage], ctx: ContextState, tools_bytes: int) -> int:
    """The request's size in tokens, plus the reply reserve: the provider's count of the last
    request plus what was added since, and never less than the view's and the tool schemas'
    bytes at BYTES_PER_TOKEN (a provider that counts less, or counts only what its cache did not
    hold, must not let a request outgrow the window)."""
    by_bytes = tokens(view_bytes(messages, ctx) + tools_bytes)
    if ctx.prompt_tokens is None:
        return by_bytes + ctx.reserve
    markers = set(ctx.markers)
    added = sum(
        json_bytes(m)
        for i, m in enumerate(messages[ctx.prompt_messages :], start=ctx.prompt_messages)
        if i not in markers
    )
    return max(ctx.prompt_tokens + tokens(added), by_bytes) + ctx.reserve


def over(messages: Sequence[ChatMessage], ctx: ContextState, tools: int, share: float) -> bool:
    """Whether the request passes `share` of the window."""
    return ctx.window is not None and estimate(messages, ctx, tools) > share * ctx.window


def keep_start(messages: Sequence[ChatMessage], keep_rounds: int) -> int:
    """Where the last `keep_rounds` rounds begin (a round starts at an assistant message; the
    user messages just before it go with it). The head when there are not that many."""
    head = head_end(messages)
    rounds = [i for i in range(head, len(messages)) if messages[i].role == "assistant"]
    if len(rounds) <= keep_rounds:
        return head
    start = rounds[len(rounds) - keep_rounds] if keep_rounds else len(messages)
    while start > head and messages[start - 1].role == "user":
        start -= 1
    return start


def drop_old_results(
    messages: Sequence[ChatMessage], ctx: ContextState, keep_rounds: int
) -> tuple[ContextState, int]:
    """Step 1: tool results older than the last `keep_rounds` rounds become placeholders."""
    until = max(ctx.dropped_until, keep_start(messages, keep_rounds))
    first = max(ctx.dropped_until, ctx.summary_until)
    dropped = sum(1 for m in messages[first:until] if m.role == "tool")
    if not dropped:
        return ctx, 0
    return ctx.model_copy(update={"dropped_until": until, "prompt_tokens": None}), dropped


@dataclass(frozen=True)
class SummaryRange:
    first: int
    last: int
    skip: list[int]
    """Markers inside the range (earlier summaries: `previous_summary` holds them)."""
    count: int
    """The messages that become the summary."""


def summary_ends(messages: Sequence[ChatMessage], start: int) -> list[int]:
    """Where a summarised part may end, from `start` on: before a user, assistant or system
    message, never between an assistant message and the tool results of its calls, and never
    after the last message (the view always ends with the record's last turn)."""
    return [i for i in range(start, len(messages)) if messages[i].role != "tool"]


def summary_range(
    messages: Sequence[ChatMessage],
    ctx: ContextState,
    keep_rounds: int,
    fits: Callable[[SummaryRange | None], bool] | None = None,
) -> SummaryRange | None:
    """Step 2: the oldest turns to summarise: after the first user message (and what an earlier
    summary covers), before the last `keep_rounds` rounds; system messages stay as they are.
    Only when the view would still not `fit` so (None: with no summary at all), the summary
    reaches further, one turn at a time, into the last rounds (a turn of many long messages:
    nothing else can make room), up to the record's last turn."""
    kept_from = keep_start(messages, keep_rounds)
    usual = _span(messages, ctx, kept_from)
    if fits is None or fits(usual):
        return usual
    chosen = usual
    for last in summary_ends(messages, kept_from + 1):
        span = _span(messages, ctx, last)
        if span is None:
            continue
        chosen = span
        if fits(span):
            break
    return chosen


def _span(messages: Sequence[ChatMessage], ctx: ContextState, last: int) -> SummaryRange | None:
    """The messages a summary ending before `last` covers (None: there are none)."""
    first = max(head_end(messages), ctx.summary_until)
    if last <= first:
        return None
    markers = [i for i in ctx.markers if first <= i < last]
    count = sum(1 for i in range(first, last) if i not in markers and messages[i].role != "system")
    return SummaryRange(first, last, markers, count) if count else None


def summary_tokens(window: int) -> int:
    """The longest summary asked of the `summarize_conversation` activity for `window`."""
    return max(128, min(1_024, window // 8))


def longest_summary(window: int) -> str:
    """A stand-in as long as the longest summary that may come back (to plan a compaction
    before the activity answers)."""
    return "x" * min(MAX_SUMMARY_CHARS, summary_tokens(window) * SUMMARY_CHARS_PER_TOKEN)


def with_summary(ctx: ContextState, text: str, until: int, marker: int) -> ContextState:
    """The context once the summary of everything before `until` arrived (its marker at record
    index `marker`). Bookkeeping about the summarised part is dropped: it stays bounded."""
    return ctx.model_copy(
        update={
            "summary": text[:MAX_SUMMARY_CHARS],
            "summary_as_user": True,
            "summary_until": until,
            "dropped_until": max(ctx.dropped_until, until),
            "markers": [*(i for i in ctx.markers if i >= until), marker],
            "cut": {i: keep for i, keep in ctx.cut.items() if i >= until},
            "prompt_tokens": None,
        }
    )


def cut_to_fit(
    messages: Sequence[ChatMessage], ctx: ContextState, tools_bytes: int, target: float
) -> tuple[ContextState, int]:
    """Step 3: tool results still in full in the view, largest first, cut until the request
    fits `target` tokens (each keeps at least MIN_CUT_CHARS). Returns how many were cut."""
    start = max(head_end(messages), ctx.summary_until, ctx.dropped_until)
    results = [i for i in range(start, len(messages)) if messages[i].role == "tool"]
    cut = dict(ctx.cut)
    current = ctx.model_copy(update={"prompt_tokens": None})
    for _ in range(4 * len(results)):  # each pass shortens one result; a few passes suffice
        excess = estimate(messages, current, tools_bytes) - target
        shown = {i: cut.get(i, len(messages[i].content)) for i in results}
        longest = max(results, key=lambda i: shown[i], default=None)
        if excess <= 0 or longest is None or shown[longest] <= MIN_CUT_CHARS:
            break
        # Characters of text are at least bytes/4 of JSON: cut generously, the marker too.
        cut[longest] = max(MIN_CUT_CHARS, shown[longest] - int(excess * BYTES_PER_TOKEN) - 100)
        current = current.model_copy(update={"cut": dict(cut)})
    count = sum(1 for i in cut if cut[i] != ctx.cut.get(i))
    return current, count


@dataclass(frozen=True)
class Thresholds:
    """How a run compacts (its options): past `at` of the window; `to`: the share of the window
    a compaction brings the view down to; the last `keep_rounds` rounds are kept whole."""

    at: float
    to: float
    keep_rounds: int


Summarise = Callable[[SummaryRange, ContextState], Awaitable[str | None]]
"""Writes the summary of a range (the `summarize_conversation` activity); None: it could not."""


@dataclass(frozen=True)
class Compacted:
    """What one compaction did: the context after it, the request's size before and after, the
    counts of each step, and the marker to append to the record (when a summary was made)."""

    ctx: ContextState
    before: int
    after: int
    dropped: int = 0
    summarised: int = 0
    cut: int = 0
    marker: ChatMessage | None = None

    @property
    def changed(self) -> bool:
        return bool(self.dropped or self.summarised or self.cut)


async def compact(
    messages: Sequence[ChatMessage],
    ctx: ContextState,
    tools: int,
    rules: Thresholds,
    summarise: Summarise,
) -> Compacted | None:
    """Compact the view when the request passes `rules.at` of the window (None: it does not, and
    the view stays as it is, so the next request only adds to its end)."""
    assert ctx.window is not None
    before = estimate(messages, ctx, tools)
    if before <= rules.at * ctx.window:
        return None
    done = await make_room(messages, ctx, tools, rules, summarise)
    return replace(done, before=before, after=estimate(messages, done.ctx, tools))


async def make_room(
    messages: Sequence[ChatMessage],
    ctx: ContextState,
    tools: int,
    rules: Thresholds,
    summarise: Summarise,
) -> Compacted:
    """A compaction: tool results before the last rounds dropped, then the turns
    before them summarised (when that saves anything), until the view is under `rules.to` of
    the window. The last rounds are summarised or cut only when the request would still not fit
    the window, and then down to `rules.at`."""
    assert ctx.window is not None
    window, room = ctx.window, min(rules.to, rules.at)
    ctx, dropped = drop_old_results(messages, ctx, rules.keep_rounds)
    summarised, marker = 0, None
    if over(messages, ctx, tools, room):
        span = summary_range(messages, ctx, rules.keep_rounds)
        if not fits_once(messages, ctx, tools, rules.at, 1.0)(span):
            fits = fits_once(messages, ctx, tools, rules.at)
            span = summary_range(messages, ctx, rules.keep_rounds, fits)
        elif span is not None and not worth_summarising(messages, ctx, span):
            span = None
        text = None if span is None else await summarise(span, ctx)
        if span is not None and text is not None:
            marker = marker_message(span.first, span.last, text)
            ctx = with_summary(ctx, text, span.last, len(messages))
            summarised = span.count
    cut = 0
    if over(messages, ctx, tools, 1.0):
        ctx, cut = cut_to_fit(messages, ctx, tools, rules.at * window)
    return Compacted(ctx, 0, 0, dropped, summarised, cut, marker)


def fits_once(
    messages: Sequence[ChatMessage],
    ctx: ContextState,
    tools: int,
    cut_to: float,
    share: float | None = None,
) -> Callable[[SummaryRange | None], bool]:
    """Whether the view fits `share` of the window (default: `cut_to`) once `span` is
    summarised (at the longest summary that may come back, in the role it will have; None:
    nothing is) and results still too big are cut to `cut_to` of it."""
    assert ctx.window is not None
    window, stand_in = ctx.window, longest_summary(ctx.window)
    limit = cut_to if share is None else share

    def fits(span: SummaryRange | None) -> bool:
        trial = ctx
        if span is not None:
            trial = with_summary(ctx, stand_in, span.last, len(messages))
        trial, _ = cut_to_fit(messages, trial, tools, cut_to * window)
        return not over(messages, trial, tools, limit)

    return fits


def worth_summarising(
    messages: Sequence[ChatMessage], ctx: ContextState, span: SummaryRange
) -> bool:
    """Whether the part `span` covers takes more of the view than the longest summary that may
    replace it (a few short turns and placeholders are left as they are)."""
    assert ctx.window is not None
    part = with_summary(ctx, "", span.last, len(messages))
    saved = view_bytes(messages, ctx) - view_bytes(messages, part)
    return saved > len(longest_summary(ctx.window).encode())


def marker_message(first: int, last: int, summary: str) -> ChatMessage:
    """The record's note of a compaction: which messages the model now sees as a summary."""
    return ChatMessage(
        role="system",
        name=MARKER_NAME,
        content=(
            f"[compaction] messages {first}–{last - 1} are summarised for the model (this"
            f" record keeps them): {summary[:MAX_SUMMARY_CHARS]}"
        ),
    )


def learn(ctx: ContextState, prompt_tokens: int, record_length: int) -> ContextState:
    """After a request: the provider's own count of it (0: it gave none)."""
    if prompt_tokens <= 0:
        return ctx.model_copy(update={"prompt_tokens": None, "too_long": 0})
    return ctx.model_copy(
        update={
            "prompt_tokens": prompt_tokens,
            "prompt_messages": record_length,
            "too_long": 0,
        }
    )


def lowered(
    ctx: ContextState,
    estimated: int,
    record_length: int,
    *,
    window: int | None,
    prompt_tokens: int | None,
) -> ContextState:
    """After the provider said the request was too long: the window it named (else 3/4 of the
    estimate), and its count of the request when it gave one."""
    budget = window if window else (estimated * 3) // 4
    if ctx.window is not None:
        budget = min(budget, ctx.window)
    window_now = max(budget, 256)
    update: dict[str, object] = {
        "window": window_now,
        "reserve": min(ctx.reserve, window_now // 2),
        "too_long": ctx.too_long + 1,
    }
    if prompt_tokens:  # its count of what it was sent (the reserve comes on top)
        update.update(prompt_tokens=prompt_tokens, prompt_messages=record_length)
    return ctx.model_copy(update=update)
