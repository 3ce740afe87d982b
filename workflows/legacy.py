"""The procedures only runs recorded by earlier releases need, kept apart from the core.

A current run never reaches this module: each procedure here is chosen by a field of the run's
`versions.Rules` that is False only when a history of an earlier release replays (or, for
`from_carried`, when a generation of the first release handed over). Each part names the patch
whose date (`versions.PATCHES`) ends it: past that date the patch is deprecated, and one release
later the part goes, with the recordings of that release (docs/design.md, "Old releases").

Pure: no Temporal and nothing runs at import (the workflow passes in the activities it calls).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from workflows.context import (
    Compacted,
    Rules,
    Summarise,
    cut_to_fit,
    drop_old_results,
    fits_once,
    marker_message,
    over,
    summary_range,
    with_summary,
)
from workflows.model import (
    AgentRunInput,
    AgentState,
    ApprovalSource,
    ApprovalWait,
    CarriedState,
    ChatMessage,
    ContextState,
    SessionWait,
    ToolApprovalResponse,
    ToolSpec,
)
from workflows.rules import WorkerPolicy

# ---- the first release's hand-over (until `hardened-loop-1`'s date)


def from_carried(run_input: AgentRunInput, carried: CarriedState) -> AgentState:
    """A hand-over written by the first release: flat fields beside the messages."""
    wait = None
    if carried.awaiting_announced and carried.awaiting_since is not None:
        wait = ApprovalWait(since=carried.awaiting_since, deadline=carried.approval_deadline)
    session = SessionWait(idle_deadline=carried.idle_deadline) if carried.between_turns else None
    return AgentState(
        messages=list(run_input.messages),
        options=run_input.options,
        round=carried.round,
        generation=carried.generation,
        events=list(carried.events),
        next_seq=carried.next_seq,
        answers=dict(carried.answers),
        approval_wait=wait,
        session_wait=session,
        cancel=carried.cancel,
        held_messages=list(carried.held_messages),
        usage=carried.usage,
        tool_specs=carried.tool_specs,
        seed_mode=carried.seed_mode,
        stream=carried.stream,
    )


# ---- the setup before the worker's setup (until `trust-and-time-1`'s date)


async def read_setup(
    state: AgentState,
    know_tools: Callable[[list[ToolSpec]], None],
    list_tools: Callable[[], Awaitable[list[ToolSpec]]],
    worker_policy: Callable[[], Awaitable[WorkerPolicy]] | None,
) -> None:
    """The worker's tools (`list_tools`) and, from the second release, its rules
    (`worker_policy`, None before), each read once and carried."""
    if state.tool_specs is None:
        know_tools(await list_tools())
    if worker_policy is not None and state.worker_policy is None:
        state.worker_policy = await worker_policy()


# ---- answers given at start, before the one door (until `trust-and-time-1`'s date)


def seed_as_person(
    responses: Sequence[ToolApprovalResponse],
    *,
    problem: Callable[[str], str | None],
    answer: Callable[[ToolApprovalResponse, ApprovalSource], None],
    warn: Callable[[str], None],
) -> None:
    """Answers given at start, recorded as a person's, checked only for the call they name."""
    for given in responses:
        why = problem(given.call_id)
        if why is not None:
            warn(f"tool_approval_responses: {why}; ignored")
            continue
        answer(given, "person")


# ---- shell safety by substring (until `trust-and-time-1`'s date)

LEGACY_SHELL_METACHARACTERS = ("\n", "\r", ";", "&", "|", "`", "$(", ">", "<")
"""The substring rule of runs recorded before shell safety by position: an `allow` pattern
never matched a value holding one of these unless the pattern held it anywhere."""


def legacy_value_text(value: Any) -> str:
    """A non-string argument as the earlier rules saw it: compact JSON, characters outside ASCII
    as `\\u` escapes."""
    return json.dumps(value, separators=(",", ":"))


def shell_safe(pattern: str, value: str) -> bool:
    """The earlier substring rule: False when `value` holds a metacharacter of
    `LEGACY_SHELL_METACHARACTERS` that `pattern` does not hold anywhere."""
    return not any(m in value and m not in pattern for m in LEGACY_SHELL_METACHARACTERS)


def metacharacters_in(text: str) -> frozenset[str]:
    """The metacharacters of the earlier substring rule that a value's text holds."""
    return frozenset(m for m in LEGACY_SHELL_METACHARACTERS if m in text)


@functools.lru_cache(maxsize=4096)
def listed(pattern: str) -> frozenset[str]:
    """The metacharacters of the earlier substring rule that a pattern holds anywhere."""
    return frozenset(m for m in LEGACY_SHELL_METACHARACTERS if m in pattern)


# ---- compaction before it made room (until `sound-seams-1`'s date)


async def make_fit(
    messages: Sequence[ChatMessage],
    ctx: ContextState,
    tools: int,
    rules: Rules,
    summarise: Summarise,
) -> Compacted:
    """The earlier releases' compaction: each step (drop, summarise, cut) stops as soon as the
    view is under `rules.at` of the window."""
    assert ctx.window is not None
    share = rules.at
    ctx, dropped = drop_old_results(messages, ctx, rules.keep_rounds)
    summarised, marker = 0, None
    if over(messages, ctx, tools, share):
        span = summary_range(
            messages, ctx, rules.keep_rounds, fits_once(messages, ctx, tools, share)
        )
        text = None if span is None else await summarise(span, ctx)
        if span is not None and text is not None:
            marker = marker_message(span.first, span.last, text)
            ctx = with_summary(ctx, text, span.last, len(messages))
            summarised = span.count
    cut = 0
    if ctx.window is not None and over(messages, ctx, tools, share):
        ctx, cut = cut_to_fit(messages, ctx, tools, share * ctx.window)
    return Compacted(ctx, 0, 0, dropped, summarised, cut, marker)
