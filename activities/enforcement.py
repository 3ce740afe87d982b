"""The worker's last word on a call: its enforced rules, re-checked as the call runs.

The workflow decides every call by the rules it carries, but what a workflow carries can be
forged by whoever starts or answers a run. So `execute_tool` asks the worker's own enforced rules
(its `AGENT_POLICY_FILE`, loaded at start, never taken from a run) once more, with the
arguments that will run:

- a call they `deny` is answered `Rejected: {reason}` and the tool never runs;
- a call they `ask` about runs only when a person approved it (the request's `answered_by` is
  `person`): an answer a run's input seeded, a run rule or a remembered decision is not a
  person's. Found before the tool runs (a path that leads somewhere the run's view did not
  show, as a symlink does), the call is handed back to the run to wait for a person (a
  `NeedsPerson` failure); found as the tool opens the path (a link flipped since), it is
  answered `Rejected: …`;
- a call they `ask` about with `approvers` runs only when the request's signed votes of that
  many distinct people of those groups verify (`activities.quorum_check`).

A path argument is checked in every spelling that can name what the tool opens: as written, as
rules see it (`workflows.gate.paths.normal_path`), and as the tool will open it (the tool's
`opened_path`: an absolute path inside the workspace made relative, symlinks inside the
workspace followed as the tool follows them). That check comes before the tool runs; a tool
that opens workspace paths (`Tool.run_checked`) is checked once more with the path of what it
actually opened, read back from the kernel after opening and before it reads, lists or removes
anything (`opened_check`), so a link flipped between the first check and the open changes
nothing. A `deny` in any spelling decides first, then an `ask` in any.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from temporalio.exceptions import ApplicationError

from activities.quorum_check import Shortfall
from activities.tools.base import OpenedCheck, Refused, Tool, ToolError
from workflows import names
from workflows.contract.rules import PolicyRule
from workflows.contract.tool_results import rejection_message
from workflows.gate.policy import Verdict, evaluate
from workflows.model import ApprovalSource

log = logging.getLogger(__name__)

PERSON_ONLY = (
    "the worker's enforced rule {rule} sends this call to a person, and no person approved it"
)
"""The reason of a call an enforced `ask` decides that ran without a person's answer."""


def spellings(tool: Tool, arguments: dict[str, Any]) -> list[tuple[dict[str, Any], bool]]:
    """The call's arguments in each spelling to check, each with whether its path parameters
    are to be normalised: as written (normalised, and not), and with each path the tool opens
    in place of the path written (when the tool can say which)."""
    out: list[tuple[dict[str, Any], bool]] = [(arguments, False), (arguments, True)]
    if tool.opened_path is None or not tool.path_parameters:
        return out
    opened = dict(arguments)
    changed = False
    for name in tool.path_parameters:
        value = arguments.get(name)
        if not isinstance(value, str):
            continue
        try:
            path = tool.opened_path(value)
        except ToolError:  # the tool refuses this path itself
            continue
        except OSError:  # e.g. a folder it may not read: the tool says so itself
            continue
        if path != value:
            opened[name] = path
            changed = True
    if changed:
        out.append((opened, True))
    return out


def strictest(verdicts: Sequence[Verdict]) -> Verdict | None:
    """Of the enforced rules' verdicts on the spellings of one call: the first `deny`, else the
    first `ask`, else None (no enforced rule holds the call back)."""
    for decision in ("deny", "ask"):
        for verdict in verdicts:
            if verdict.decision == decision and verdict.rule is not None:
                return verdict
    return None


def _verdicts(
    enforced: Sequence[PolicyRule],
    tool: Tool,
    spelled: Sequence[tuple[dict[str, Any], bool]],
) -> list[Verdict]:
    return [
        evaluate(
            enforced,
            tool.name,
            arguments,
            requires_approval=False,
            path_parameters=tool.path_parameters if normalised else (),
            path_root=tool.path_root,
        )
        for arguments, normalised in spelled
    ]


def enforced_verdict(
    enforced: Sequence[PolicyRule], tool: Tool, arguments: dict[str, Any]
) -> Verdict | None:
    """The enforced rule's verdict that holds this call back as it will run (`strictest`)."""
    if not enforced:
        return None
    return strictest(_verdicts(enforced, tool, spellings(tool, arguments)))


def refusal_of(
    verdict: Verdict | None,
    answered_by: ApprovalSource | None,
    short: Shortfall | None = None,
    *,
    hand_back: bool = False,
) -> str | None:
    """What the call is answered instead of running: a `deny`'s `Rejected: {reason}`, or for an
    `ask`, unless a person approved the call, `Rejected:` naming the rule (with `hand_back`:
    the `NeedsPerson` failure that sends it back to wait for a person), and for an `ask` with
    approvers, unless enough of them did (`short`). None: it runs."""
    if verdict is None or verdict.rule is None:
        return None
    if verdict.decision == "deny":
        return rejection_message(verdict.reason)
    if verdict.decision == "ask" and answered_by != "person":
        if hand_back:
            raise ApplicationError(
                PERSON_ONLY.format(rule=verdict.rule) + ": it waits for one",
                {"rule": verdict.rule},
                type=names.ERROR_NEEDS_PERSON,
                non_retryable=True,
            )
        return rejection_message(PERSON_ONLY.format(rule=verdict.rule))
    if verdict.decision == "ask" and short is not None and (why := short(verdict)):
        return rejection_message(why)
    return None


def _logged(tool: Tool, verdict: Verdict | None, refusal: str | None) -> str | None:
    if refusal is not None and verdict is not None:
        log.warning(
            "execute_tool: %s refused by the worker's enforced rule %s (%s)",
            tool.name,
            verdict.rule,
            verdict.decision,
        )
    return refusal


async def enforced_refusal(
    enforced: Sequence[PolicyRule],
    tool: Tool,
    arguments: dict[str, Any],
    answered_by: ApprovalSource | None = None,
    short: Shortfall | None = None,
) -> str | None:
    """`Rejected: {reason}` when the worker's enforced rules hold the call back (`refusal_of`),
    else None; a call they send to a person that no person approved is handed back to the run
    (the `NeedsPerson` failure). Looking up where a path leads touches the file system, so it
    runs in a thread."""
    if not enforced:
        return None
    if tool.opened_path is not None and tool.path_parameters:
        verdict = await asyncio.to_thread(enforced_verdict, enforced, tool, arguments)
    else:
        verdict = enforced_verdict(enforced, tool, arguments)
    return _logged(tool, verdict, refusal_of(verdict, answered_by, short, hand_back=True))


def opened_check(
    enforced: Sequence[PolicyRule],
    tool: Tool,
    arguments: dict[str, Any],
    answered_by: ApprovalSource | None,
    short: Shortfall | None = None,
) -> OpenedCheck:
    """The check a tool runs with each path it has opened (`Tool.run_checked`): the enforced
    rules see the call with that path in place of the path written; `Refused` when they hold
    it back."""

    def check(parameter: str, opened: str) -> None:
        if not enforced:
            return
        spelled = [({**arguments, parameter: opened}, True)]
        verdict = strictest(_verdicts(enforced, tool, spelled))
        refusal = _logged(tool, verdict, refusal_of(verdict, answered_by, short))
        if refusal is not None:
            raise Refused(refusal)

    return check
