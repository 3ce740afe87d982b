"""Figure 4, approval latency: `tool_approval` signal sent → the tool activity started
(timestamped inside the activity, same process and clock), against the bare workflow's
signal → activity time. Interleaved pairs; fake model and tool in-process, since the subject is
how fast the workflow reacts to the signal."""

from __future__ import annotations

import time

from bench.bare_workflow import SIGNAL_GO, BareInput, BareWorkflow
from bench.harness import Bench, median, new_id, new_queue, poll, worker
from bench.report import Figure
from bench.stubs import RUN_COMMAND, FakeAgent, bare_activities
from workflows import names
from workflows.model import AgentRunInput, AgentRunOptions, AgentStatus, ChatMessage
from workflows.run.agent import AgentWorkflow


async def agent_latency(b: Bench, fake: FakeAgent, task_queue: str) -> float:
    handle = await b.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(messages=[ChatMessage.user("run it")], options=AgentRunOptions()),
        id=new_id("bench-approval-agent"),
        task_queue=task_queue,
    )

    async def paused() -> bool:
        status: AgentStatus = await handle.query(names.QUERY_STATUS, result_type=AgentStatus)
        return status.phase == "awaiting_approval"

    await poll(paused)
    call_id = "call_0"  # the fake model's call of round 0
    sent = time.monotonic()
    await handle.signal(names.SIGNAL_TOOL_APPROVAL, {"call_id": call_id, "approved": True})
    await handle.result()
    return fake.stamps.tool_started[handle.id] - sent


async def bare_latency(b: Bench, fake: FakeAgent, task_queue: str) -> float:
    handle = await b.client.start_workflow(
        BareWorkflow.run,
        BareInput(rounds=1, pause_for_signal=True),
        id=new_id("bench-approval-bare"),
        task_queue=task_queue,
    )
    await poll(lambda: handle.query(BareWorkflow.paused))
    sent = time.monotonic()
    await handle.signal(SIGNAL_GO)
    await handle.result()
    return fake.stamps.tool_started[handle.id] - sent


async def measure(b: Bench) -> list[Figure]:
    fake = FakeAgent(tool=RUN_COMMAND, stop_after_first=True)
    task_queue = new_queue("approval")
    agent: list[float] = []
    bare: list[float] = []
    async with worker(b.client, task_queue, [*fake.activities(), *bare_activities(fake.stamps)]):
        await agent_latency(b, fake, task_queue)  # warm-up
        await bare_latency(b, fake, task_queue)
        for i in range(b.profile.approval_pairs):
            if i % 2 == 0:
                agent.append(await agent_latency(b, fake, task_queue))
                bare.append(await bare_latency(b, fake, task_queue))
            else:
                bare.append(await bare_latency(b, fake, task_queue))
                agent.append(await agent_latency(b, fake, task_queue))
    b.details["approval"] = {"agent_seconds": agent, "bare_seconds": bare}
    return [
        Figure(
            key="approval.signal_to_tool",
            label="4. approval signal → tool start",
            value=1000 * median(agent),
            unit="ms",
            floor=1000 * median(bare),
            floor_label="bare wf",
            note=(
                f"{b.profile.approval_pairs} interleaved pairs; fake model/tool in-process; "
                "no target (report only)"
            ),
        )
    ]
