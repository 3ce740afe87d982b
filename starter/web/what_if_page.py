"""What-if on the web: `/what-if` (paste a policy, see every recorded call decided again beside
what was decided then) and `POST /api/what-if` (the same as JSON), for signed-in people. The
runs are only read (`starter.what_if_runs`): nothing is sent to any of them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from runtime.codec import find_decryption_error
from starter.run_state import NotReadable
from starter.what_if import PolicyFileError, parse_policy
from starter.what_if_runs import (
    DEFAULT_SINCE,
    Report,
    call_json,
    parse_duration,
    summary_json,
    what_if,
)

POLICY_NAME = "the policy"
"""How a pasted policy is named in a refusal (`the policy: line 3: …`)."""
MAX_RUNS_NAMED = 200


@dataclass
class Asked:
    """What the page's form (or the API's body) asks for."""

    policy: str = ""
    runs: list[str] = field(default_factory=list)
    since: str = "7d"


@dataclass
class Answered:
    """What the page shows: a report, or why there is none."""

    asked: Asked
    report: Report | None = None
    error: str | None = None
    code: int = 200


def runs_of(text: str) -> list[str]:
    """Workflow ids separated by spaces, commas or new lines."""
    return [w for w in re.split(r"[\s,]+", text.strip()) if w]


async def answer(client: Client, asked: Asked) -> Answered:
    try:
        proposed = parse_policy(asked.policy, POLICY_NAME)
    except PolicyFileError as err:
        return Answered(asked, error=str(err), code=400)
    try:
        since = parse_duration(asked.since) if asked.since.strip() else DEFAULT_SINCE
    except ValueError as err:
        return Answered(asked, error=f"since: {err}", code=400)
    if len(asked.runs) > MAX_RUNS_NAMED:
        return Answered(asked, error=f"at most {MAX_RUNS_NAMED} runs at once", code=400)
    try:
        report = await what_if(client, proposed, asked.runs or None, since=since)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return Answered(asked, error="no run with one of the ids named", code=404)
        return Answered(asked, error=f"Temporal refused: {err.message}", code=502)
    except NotReadable as err:
        return Answered(asked, error=f"cannot read a run: {err}", code=502)
    except Exception as err:
        undecryptable = find_decryption_error(err)
        if undecryptable is None:
            raise
        return Answered(asked, error=str(undecryptable), code=502)
    return Answered(asked, report=report)


def asked_by_json(body: Any) -> Asked | str:
    """`{"policy": {…} or "text", "runs"?: [ids], "since"?: "7d"}`, or why it is not that."""
    if not isinstance(body, dict):
        return 'the body must be a JSON object: {"policy": {…}, "runs"?: [ids], "since"?: "7d"}'
    unknown = sorted(set(body) - {"policy", "runs", "since"})
    if unknown:
        return f"unknown field '{unknown[0]}' (what-if takes policy, runs and since)"
    policy, runs, since = body.get("policy"), body.get("runs") or [], body.get("since") or "7d"
    if isinstance(policy, dict):
        policy = json.dumps(policy, indent=1)
    if not isinstance(policy, str):
        return "'policy' must be a JSON object (or its text)"
    if not isinstance(runs, list) or not all(isinstance(r, str) and r for r in runs):
        return "'runs' must be a list of workflow ids"
    if not isinstance(since, str):
        return "'since' must be a duration such as 7d"
    return Asked(policy, list(runs), since)


def answered_json(answered: Answered) -> tuple[int, dict[str, Any]]:
    report = answered.report
    if report is None:
        return answered.code, {"error": answered.error}
    calls = [call_json(run, decision) for run in report.runs for decision in run.calls]
    return 200, {"calls": calls, "summary": summary_json(report)}
