"""Figure 7, the sandbox's cost per command: `true` through the real `run_command` tool, in
bubblewrap and as a plain process group, interleaved in the same run; median wall time per
command. No Temporal in the loop: the subject is what the isolation adds to each command."""

from __future__ import annotations

import time

from activities.tools import Tool, build_default_registry
from activities.tools.sandbox import CommandPolicy, bwrap_status, choose_policy
from bench.harness import Bench, median
from bench.report import Figure

COMMANDS = {"quick": 10, "full": 30}
"""Commands per variant (each one a fork and exec of bwrap or sh)."""


def command_tool(b: Bench, policy: CommandPolicy) -> Tool:
    workspace = b.workdir / f"sandbox-{policy.sandbox}"
    workspace.mkdir(exist_ok=True)
    tool = build_default_registry(workspace, commands=policy).get("run_command")
    assert tool is not None
    return tool


async def seconds(tool: Tool) -> float:
    started = time.perf_counter()
    data = await tool.run({"command": "true"})
    elapsed = time.perf_counter() - started
    assert data["exit_code"] == 0, data
    return elapsed


async def measure(b: Bench) -> list[Figure]:
    count = COMMANDS.get(b.profile.name, COMMANDS["full"])
    policy = choose_policy("auto")
    plain = command_tool(b, choose_policy("off"))
    boxed = command_tool(b, policy) if policy.sandbox == "bwrap" else None
    sandboxed: list[float] = []
    unsandboxed: list[float] = []
    for tool in (boxed, plain):  # warm-up (page cache)
        if tool is not None:
            await seconds(tool)
    for i in range(count):
        if boxed is not None and i % 2 == 0:
            sandboxed.append(await seconds(boxed))
        unsandboxed.append(await seconds(plain))
        if boxed is not None and i % 2 == 1:
            sandboxed.append(await seconds(boxed))
    b.details["sandbox"] = {"bwrap_seconds": sandboxed, "plain_seconds": unsandboxed}
    note = f"{count} × `true` each, interleaved; report only"
    if boxed is None:
        note = f"no sandbox on this machine ({bwrap_status()[1]}); {note}"
    return [
        Figure(
            key="sandbox.per_command",
            label="7. run_command in bwrap, per command",
            value=1000 * median(sandboxed),
            unit="ms",
            floor=1000 * median(unsandboxed),
            floor_label="no sandbox",
            note=note,
        )
    ]
