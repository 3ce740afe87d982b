"""A run and its sub-agents as a tree (`starter history W --tree`): each run's phase or how it
ended, and for each sub-agent the `delegate` call that started it, its task and its tokens.

A run's sub-agents are found two ways, so none is missed: Temporal's `ParentWorkflowId` (the
child workflows it started, from visibility, which may lag a moment behind) and the run's own
`sub_agent_started` events (which a long run may have let go of after continue-as-new), in the
order of their `delegate` calls. Each
run's state comes from its `status` query while it is open, from its history when it has closed
(no worker needed, `starter.record`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from starter.handle import AgentHandle
from starter.render import one_line, visible
from starter.runs import quotable
from workflows import names
from workflows.model import (
    AgentEvent,
    AgentStatus,
    SubAgentFinishedEvent,
    SubAgentStartedEvent,
    ToolCallEvent,
)

MAX_DEPTH = 10
"""The deepest a tree is read (the worker's AGENT_MAX_DEPTH is far below it)."""
MAX_CHILDREN = 200
"""The most sub-agents of one run a tree lists."""
WORKER_SECONDS = 3.0
"""How long an open run's worker has to answer its `status` (as for `pending`)."""


@dataclass
class Node:
    """One run of the tree."""

    workflow_id: str
    status: AgentStatus | None
    """Its status (from its history once closed); None when no worker answered."""
    closed: str | None = None
    """How Temporal closed it (`completed`, `terminated`, …); None while it is open."""
    call_id: str | None = None
    """The parent's `delegate` call that started it (None for the tree's root)."""
    task: str = ""
    tokens: int | None = None
    """The tokens it used, as its parent counted them when it ended."""
    children: list[Node] = field(default_factory=list)

    @property
    def state(self) -> str:
        """`finished stop`, `awaiting_approval`, `terminated`, … as a line says it."""
        status = self.status
        if status is None:
            return "open (no worker answered)"
        if status.phase == "finished":
            return f"finished {status.finish_reason}"
        if self.closed is not None and self.closed != "completed":
            return self.closed
        return status.phase

    def as_json(self, depth: int = 0, parent: str | None = None) -> list[dict[str, Any]]:
        """The node and its descendants, depth first, one object each (`--json`)."""
        status = self.status
        one: dict[str, Any] = {
            "workflow_id": self.workflow_id,
            "parent_workflow_id": parent,
            "call_id": self.call_id,
            "depth": depth,
            "task": self.task or None,
            "phase": status.phase if status else None,
            "finish_reason": status.finish_reason if status else None,
            "closed": self.closed,
            "tokens": self.tokens,
        }
        rows = [one]
        for child in self.children:
            rows += child.as_json(depth + 1, self.workflow_id)
        return rows

    def lines(self, prefix: str = "", last: bool = True, root: bool = True) -> list[str]:
        """The tree as text: the root, then each sub-agent under its parent."""
        if root:
            head = f"{visible(self.workflow_id)}  {self.state}"
            below = ""
        else:
            branch = "└─ " if last else "├─ "
            tokens = f", {self.tokens:,} tokens" if self.tokens is not None else ""
            task = f": {one_line(self.task, 120)}" if self.task else ""
            call = f" (call {visible(self.call_id or '?')})"
            head = f"{prefix}{branch}{visible(self.workflow_id)}{call}  {self.state}{tokens}{task}"
            below = prefix + ("   " if last else "│  ")
        lines = [head]
        for index, child in enumerate(self.children):
            lines += child.lines(below, index == len(self.children) - 1, root=False)
        return lines


async def read_tree(client: Client, workflow_id: str, *, depth: int = 0) -> Node:
    """The run `workflow_id` and its sub-agents, to MAX_DEPTH. An open run whose worker does
    not answer within WORKER_SECONDS is listed without its state."""
    handle = AgentHandle(client, workflow_id, worker_wait=WORKER_SECONDS)
    record = await handle.record()
    events: list[AgentEvent]
    if record is not None:
        node = Node(workflow_id, record.status, record.closed)
        events = record.events
    else:
        try:
            status = await handle.status()
            events = await handle.events(-1)
        except Exception:  # no worker answered: the run is still listed, without its state
            status, events = None, []
        node = Node(workflow_id, status)
    if depth >= MAX_DEPTH:
        return node
    started = {e.workflow_id: e for e in events if isinstance(e, SubAgentStartedEvent)}
    ended = {e.workflow_id: e for e in events if isinstance(e, SubAgentFinishedEvent)}
    asked = {e.call_id: e.seq for e in events if isinstance(e, ToolCallEvent)}
    ids = sorted(started, key=lambda i: asked.get(started[i].call_id, started[i].seq))
    ids += [i for i in await listed_children(client, workflow_id) if i not in started]
    children = await asyncio.gather(
        *(read_tree(client, child, depth=depth + 1) for child in ids[:MAX_CHILDREN])
    )
    for child in children:
        began = started.get(child.workflow_id)
        parent = child.status.parent if child.status is not None else None
        child.call_id = began.call_id if began else (parent.call_id if parent else None)
        child.task = began.task if began else (parent.task if parent else "")
        if child.workflow_id in ended:
            child.tokens = ended[child.workflow_id].tokens
    node.children = list(children)
    return node


async def listed_children(client: Client, workflow_id: str) -> list[str]:
    """The runs Temporal started as this run's sub-agents (its child `AgentWorkflow`s), oldest
    first; one id for a chain that continued as new. None are listed for an id visibility
    cannot match as it is, or when the listing fails: the run's events still name its
    sub-agents."""
    if not quotable(workflow_id):
        return []
    query = (
        f'WorkflowType="{names.WORKFLOW_TYPE}" AND ParentWorkflowId="{workflow_id}"'
        ' AND ExecutionStatus!="ContinuedAsNew"'
    )
    try:
        found = [e async for e in client.list_workflows(query, limit=MAX_CHILDREN)]
    except RPCError:
        return []
    found.sort(key=lambda e: e.start_time)
    ids: list[str] = []
    for execution in found:
        if execution.id not in ids:
            ids.append(execution.id)
    return ids
