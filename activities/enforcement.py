"""The worker's last word on a call: its enforced rules, re-checked as the call is about to run.

The workflow decides every call by the rules it carries, but what a workflow carries can be
forged by whoever starts or answers a run. So `execute_tool` asks the worker's own enforced rules
(its `AGENT_POLICY_FILE`, loaded at start, never taken from a run) once more, with the
arguments that will run: a call they deny is answered `Rejected: {reason}` and the tool never
runs. No workflow state can make a worker run what its enforced rules deny.

A path argument is checked in every spelling that can name what the tool opens: as written, as
rules see it (`workflows.paths.normal_path`), and as the tool will open it (the tool's
`opened_path`: symlinks inside the workspace followed as the tool follows them). A rule denies
the call when it is the first enforced rule to match any of them, so `read_file` of a link to
`.env` is refused by a deny on `*.env` as `.env` itself is. Only `deny` is re-checked here: an
`ask` was for a person, and the workflow records who answered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from activities.tools.base import Tool, ToolError
from workflows.policy import Verdict, evaluate
from workflows.rules import PolicyRule
from workflows.tool_results import rejection_message

log = logging.getLogger(__name__)


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


def enforced_denial(
    enforced: Sequence[PolicyRule], tool: Tool, arguments: dict[str, Any]
) -> Verdict | None:
    """The verdict of the enforced rule that denies this call as it will run, or None."""
    if not enforced:
        return None
    for spelling, normalised in spellings(tool, arguments):
        verdict = evaluate(
            enforced,
            tool.name,
            spelling,
            requires_approval=False,
            path_parameters=tool.path_parameters if normalised else (),
        )
        if verdict.decision == "deny" and verdict.rule is not None:
            return verdict
    return None


async def enforced_refusal(
    enforced: Sequence[PolicyRule], tool: Tool, arguments: dict[str, Any]
) -> str | None:
    """`Rejected: {reason}` when the worker's enforced rules deny the call, else None. Looking
    up where a path leads touches the file system, so it runs in a thread."""
    if not enforced:
        return None
    if tool.opened_path is not None and tool.path_parameters:
        verdict = await asyncio.to_thread(enforced_denial, enforced, tool, arguments)
    else:
        verdict = enforced_denial(enforced, tool, arguments)
    if verdict is None:
        return None
    log.warning(
        "execute_tool: %s refused by the worker's enforced rule %s", tool.name, verdict.rule
    )
    return rejection_message(verdict.reason)
