"""What-if over runs: read each run's record with no worker (`starter.run_state`: its current
generation's history replayed, the generations before it handed their state over in its start
event) and decide every recorded call again (`starter.what_if`).

Only the server's read APIs are used: a visibility listing (which runs), describe, and history
reads. No signal, update or query reaches any run, so nothing about them changes (their
histories keep their length). Histories are fetched a few at a time while two replayers replay
them, each its share of the runs.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory

from starter.run_state import NotReadable, StateReplayer, first_options, start_input
from starter.runs import BASE_QUERY
from starter.what_if import CallDecision, ProposedPolicy, decide_again, summary_line
from workflows.contract.arguments import arguments_value
from workflows.model import AgentRunOptions

DEFAULT_SINCE = timedelta(days=7)
MAX_RUNS = 10_000
"""The most runs one what-if reads (the listing stops there)."""
FETCHING = 8
"""Histories fetched at once while the replayers work."""
REPLAYING = 2
"""Replayers at once, each over a share of the runs: what one leaves to the SDK's core (in its
own threads) overlaps with the other's Python (measured: 1.2x over one, on 2 cores)."""

_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}


def parse_duration(text: str) -> timedelta:
    """`30s`, `90m`, `24h`, `7d`, `2w`; ValueError for anything else."""
    match = _DURATION.match(text)
    if match is None or int(match.group(1)) <= 0:
        raise ValueError(f"{text!r} is no duration: a whole number above 0 and s, m, h, d or w")
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])


def recent_query(since: timedelta, now: datetime | None = None) -> str:
    """The runs active within `since`: open now, or closed since then (one row per chain)."""
    cutoff = ((now or datetime.now(UTC)) - since).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f'{BASE_QUERY} AND (ExecutionStatus="Running" OR CloseTime >= "{cutoff}")'


async def recent_runs(client: Client, since: timedelta) -> list[str]:
    """The workflow ids of the runs active within `since`, newest first, each once."""
    ids: dict[str, None] = {}
    async for execution in client.list_workflows(recent_query(since)):
        ids.setdefault(execution.id, None)
        if len(ids) >= MAX_RUNS:
            break
    return list(ids)


@dataclass(frozen=True)
class RunDecisions:
    """One run's calls decided again."""

    workflow_id: str
    first_run_id: str
    open: bool
    calls: list[CallDecision]


@dataclass
class Report:
    runs: list[RunDecisions] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    """Runs that could not be read here (workflow id, why), left out of `runs`."""

    @property
    def calls(self) -> list[CallDecision]:
        return [decision for run in self.runs for decision in run.calls]

    def summary(self) -> str:
        return summary_line(self.calls)


@dataclass(frozen=True)
class _Fetched:
    workflow_id: str
    first_run_id: str
    open: bool
    history: WorkflowHistory
    options: AgentRunOptions


async def _fetch(client: Client, workflow_id: str) -> _Fetched:
    description = await client.get_workflow_handle(workflow_id).describe()
    run_id = description.run_id
    first_run_id = description.raw_description.workflow_execution_info.first_run_id or run_id
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    if not history.events:
        raise NotReadable("no history")
    if run_id == first_run_id:
        options = (await start_input(client, history.events[0])).options
    else:
        options = await first_options(client, workflow_id, first_run_id)
    is_open = description.status in {WorkflowExecutionStatus.RUNNING, None}
    return _Fetched(workflow_id, first_run_id, is_open, history, options)


async def what_if(
    client: Client,
    proposed: ProposedPolicy,
    workflow_ids: Sequence[str] | None = None,
    *,
    since: timedelta = DEFAULT_SINCE,
) -> Report:
    """Every recorded call of the runs named (default: every run active within `since`) decided
    again under `proposed`. A run named that cannot be read raises (RPCError NOT_FOUND for an
    unknown id, the codec's DecryptionError without its key, NotReadable); a run listed that
    cannot be read is reported in `unreadable`."""
    named = workflow_ids is not None
    if workflow_ids is not None:
        ids = list(dict.fromkeys(workflow_ids))
    else:
        ids = await recent_runs(client, since)
    report = Report()
    limit = asyncio.Semaphore(FETCHING)

    async def fetch(workflow_id: str) -> _Fetched | BaseException:
        async with limit:
            try:
                return await _fetch(client, workflow_id)
            except Exception as err:
                return err

    tasks = dict(zip(ids, [asyncio.create_task(fetch(w)) for w in ids], strict=True))
    fetched: dict[str, _Fetched] = {}
    done: dict[str, RunDecisions | str] = {}
    """Each run's calls decided again, or why it could not be read."""
    failed: list[BaseException] = []

    async def histories(share: list[str]) -> AsyncIterator[WorkflowHistory]:
        for workflow_id in share:
            item = await tasks[workflow_id]
            if failed:
                return
            if isinstance(item, BaseException):
                if named:  # raised once the replayers have stopped
                    failed.append(item)
                    return
                done[workflow_id] = _why(item)
                continue
            fetched[workflow_id] = item
            yield item.history

    async def replay(share: list[str]) -> None:
        async for history, state in StateReplayer(client).states(histories(share)):
            item = fetched.pop(history.workflow_id)
            if isinstance(state, NotReadable):
                if named:
                    failed.append(state)
                    return
                done[item.workflow_id] = _why(state)
                continue
            rules = item.options.approval_policy.rules if item.options.approval_policy else []
            calls = decide_again(state, rules, proposed, open_run=item.open)
            done[item.workflow_id] = RunDecisions(
                item.workflow_id, item.first_run_id, item.open, calls
            )

    try:
        await asyncio.gather(*(replay(ids[i::REPLAYING]) for i in range(REPLAYING)))
    finally:
        for task in tasks.values():
            task.cancel()
    if failed:
        raise failed[0]
    for workflow_id in ids:
        outcome = done.get(workflow_id, "not read")
        if isinstance(outcome, str):
            report.unreadable.append((workflow_id, outcome))
        else:
            report.runs.append(outcome)
    return report


def call_json(run: RunDecisions, decision: CallDecision) -> dict[str, object]:
    """One call as `--json` prints it."""
    then, now, call = decision.then, decision.now, decision.call
    return {
        "workflow_id": run.workflow_id,
        "run_id": run.first_run_id,
        "call_id": call.id,
        "tool": call.name,
        "arguments": arguments_value(call.arguments),
        "then": {
            "decision": then.decision,
            "by": then.text,
            "source": then.source,
            "rule": then.rule,
            "approver": then.approver,
        },
        "now": {
            "decision": now.decision,
            "by": now.text,
            "rule": now.rule,
            "origin": now.origin,
            "reason": now.reason,
        },
        "changed": decision.changed,
    }


def summary_json(report: Report) -> dict[str, object]:
    calls = report.calls
    changed = [d for d in calls if d.changed]
    return {
        "summary": report.summary(),
        "runs": len(report.runs),
        "calls": len(calls),
        "changed": len(changed),
        "would_ask": sum(1 for d in changed if d.now.decision == "ask"),
        "would_allow": sum(1 for d in changed if d.now.decision == "allow"),
        "would_deny": sum(1 for d in changed if d.now.decision == "deny"),
        "unchanged": sum(1 for d in calls if d.compared and not d.changed),
        "not_compared": sum(1 for d in calls if not d.compared),
        "unreadable": [{"workflow_id": w, "why": why} for w, why in report.unreadable],
    }


def _why(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__
