"""Fork a run: a new run whose conversation is a run's record up to the end of one of its rounds,
then (optionally) a user message, with the original's options and rules and none of its answers.

Rounds are counted by the model's replies in the record (its assistant messages), from 0,
across the whole run: a session's `round` starts again at 0 every turn, these never do. The end
of round N is its reply followed by the tool messages of that reply's calls when the record has
them; when it does not (the original still waits for them, or ended first), the fork ends with
the reply and its calls go through the gate again in the fork (a rule may decide them, else a
person is asked).

What the fork carries of the original: its options as its first generation was started with
them (so its own rules, `approval_policy`, as they were given), never an answer: no answer
given at start (`tool_approval_responses`), no rule a person remembered or set while it ran,
no recorded answer. Compaction markers (the record's notes) are left out. The fork's options
name where it comes from (`forked_from`: the original's workflow id, the first run id of its
chain, the round), which its `status` and first event show. The original is only read
(`starter.run_state`): nothing is sent to it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from temporalio.client import Client

from starter.handle import start_run
from starter.run_state import RunState, read_run
from workflows.conversation.window import is_marker
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage, ForkedFrom
from workflows.shown import visible


class ForkRefused(Exception):
    """A fork that cannot be made as asked (a round the run does not have, a message after
    calls that wait): the message says why, for the person who asked."""


def reply_indices(messages: Sequence[ChatMessage]) -> list[int]:
    """Where each round's model reply is in the record: round N's is `reply_indices(...)[N]`."""
    return [i for i, message in enumerate(messages) if message.role == "assistant"]


def round_end(messages: Sequence[ChatMessage], reply: int) -> tuple[int, list[str]]:
    """The end (exclusive) of the round whose reply is at `reply`: after its calls' tool messages
    that follow it; and the ids of its calls that have none there (they would wait again)."""
    calls = [call.id for call in messages[reply].tool_calls or []]
    end = reply + 1
    answered: set[str] = set()
    while end < len(messages):
        message = messages[end]
        if message.role == "tool" and message.tool_call_id in calls:
            answered.add(message.tool_call_id)
            end += 1
        elif is_marker(message):
            end += 1
        else:
            break
    return end, [call for call in calls if call not in answered]


def rounds_text(count: int) -> str:
    if count == 0:
        return "no rounds yet"
    return "round 0" if count == 1 else f"rounds 0 to {count - 1}"


@dataclass(frozen=True)
class ForkPlan:
    """What a fork starts with."""

    messages: list[ChatMessage]
    round: int | None
    """The last round the fork holds (None: the original had no reply yet)."""
    waiting: list[str]
    """The calls of that round that have no result: they go through the gate again."""


def plan_fork(
    workflow_id: str, record: Sequence[ChatMessage], round: int | None, say: str | None
) -> ForkPlan:
    """The fork's messages: the record up to the end of `round` (None: all of it), compaction
    markers left out, then `say` as a user message. ForkRefused for a round the record does not
    have, or a message after calls that have no result yet."""
    replies = reply_indices(record)
    if round is not None and not 0 <= round < len(replies):
        raise ForkRefused(
            f"run '{visible(workflow_id)}' has {rounds_text(len(replies))}; no round {round}"
        )
    last = (len(replies) - 1 if replies else None) if round is None else round
    end, waiting = len(record), list[str]()
    if last is not None:
        end, waiting = round_end(record, replies[last])
        if round is None:  # all of it: what came after the last round too (a user message)
            waiting = waiting if end == len(record) else []
            end = len(record)
    messages = [m for m in record[:end] if not is_marker(m)]
    if say is not None:
        if not say.strip():
            raise ForkRefused("the message to add is empty")
        if waiting:
            ids = ", ".join(visible(call) for call in waiting)
            raise ForkRefused(
                f"round {last} of '{visible(workflow_id)}' ends with calls that have no result"
                f" ({ids}): they wait again in the fork before anything else, so a message cannot"
                " follow them yet; fork without a message and send it (say) once they are answered"
            )
        messages.append(ChatMessage.user(say))
    return ForkPlan(messages, last, waiting)


def fork_options(original: AgentRunOptions, forked_from: ForkedFrom) -> AgentRunOptions:
    """The original's first options, less every answer given at start, every option the
    workflow does not know and a sub-agent's parent (a fork is a run of its own: it reports to
    no one), naming where the fork comes from."""
    known = original.model_dump(exclude=set(original.model_extra or {}))
    known["tool_approval_responses"] = []
    known["parent"] = None
    known["forked_from"] = forked_from.model_dump()
    return AgentRunOptions.model_validate(known)


@dataclass(frozen=True)
class Forked:
    workflow_id: str
    run_id: str | None
    forked_from: ForkedFrom
    messages: int
    waiting: list[str]


def new_fork_id() -> str:
    return f"fork-{uuid.uuid4().hex[:12]}"


async def fork_run(
    client: Client,
    workflow_id: str,
    *,
    task_queue: str,
    round: int | None = None,
    say: str | None = None,
    new_id: str | None = None,
    original: RunState | None = None,
) -> Forked:
    """Start the fork (see the module). Raises ForkRefused, and what reading the original raises
    (`starter.run_state.read_run`: RPCError NOT_FOUND for an unknown id, NotReadable), and the
    SDK's errors for the start (an id in use)."""
    if original is None:
        original = await read_run(client, workflow_id)
    plan = plan_fork(workflow_id, original.messages, round, say)
    provenance = ForkedFrom(workflow_id=workflow_id, run_id=original.first_run_id, round=plan.round)
    run_input = AgentRunInput(
        messages=plan.messages, options=fork_options(original.first_options, provenance)
    )
    fork_id = new_id or new_fork_id()
    handle = await start_run(client, run_input, workflow_id=fork_id, task_queue=task_queue)
    return Forked(fork_id, handle.run_id, provenance, len(plan.messages), plan.waiting)
