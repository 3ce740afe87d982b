"""Figure 6, replay time: record a history of N rounds of AgentWorkflow (fake model and tool,
small messages, one generation) and of the bare workflow, then replay each with `Replayer`,
interleaved, several times; median wall time."""

from __future__ import annotations

import time

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from bench.bare_workflow import BareInput, BareWorkflow
from bench.harness import Bench, median, new_id, new_queue, worker
from bench.report import Figure
from bench.stubs import FakeAgent, Stamps, bare_activities
from runtime.connect import data_converter
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage
from workflows.run.agent import AgentWorkflow


async def record(b: Bench, rounds: int) -> tuple[WorkflowHistory, WorkflowHistory]:
    task_queue = new_queue("replay")
    fake = FakeAgent(content_size=100)
    async with worker(b.client, task_queue, [*fake.activities(), *bare_activities(Stamps())]):
        agent = await b.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(
                messages=[ChatMessage.user("go")],
                options=AgentRunOptions(max_rounds=rounds, tools=["list_dir"]),
            ),
            id=new_id("bench-replay-agent"),
            task_queue=task_queue,
        )
        bare = await b.client.start_workflow(
            BareWorkflow.run,
            BareInput(rounds=rounds),
            id=new_id("bench-replay-bare"),
            task_queue=task_queue,
        )
        result = await agent.result()
        await bare.result()
    if result.finish_reason != "max_rounds":
        raise RuntimeError(f"recording ended {result.finish_reason}: {result.error}")
    # The run's own id: if it continued as new, this is the last generation, shorter than asked.
    first = agent.first_execution_run_id
    agent_history = await b.client.get_workflow_handle(agent.id, run_id=first).fetch_history()
    return agent_history, await bare.fetch_history()


async def replay_seconds(replayer: Replayer, history: WorkflowHistory) -> float:
    began = time.perf_counter()
    await replayer.replay_workflow(history)
    return time.perf_counter() - began


async def measure(b: Bench) -> list[Figure]:
    p = b.profile
    agent_history, bare_history = await record(b, p.replay_rounds)
    agent_replayer = Replayer(workflows=[AgentWorkflow], data_converter=data_converter())
    bare_replayer = Replayer(workflows=[BareWorkflow], data_converter=data_converter())
    agent: list[float] = []
    bare: list[float] = []
    for i in range(p.replay_repeats):
        if i % 2 == 0:
            agent.append(await replay_seconds(agent_replayer, agent_history))
            bare.append(await replay_seconds(bare_replayer, bare_history))
        else:
            bare.append(await replay_seconds(bare_replayer, bare_history))
            agent.append(await replay_seconds(agent_replayer, agent_history))
    b.details["replay"] = {
        "rounds": p.replay_rounds,
        "agent_events": len(agent_history.events),
        "bare_events": len(bare_history.events),
        "agent_seconds": agent,
        "bare_seconds": bare,
    }
    small = "" if p.name == "full" else " (quick: fewer rounds)"
    return [
        Figure(
            key="replay.seconds",
            label=f"6. replay of a {p.replay_rounds}-round history{small}",
            value=median(agent),
            unit="s",
            floor=median(bare),
            floor_label="bare wf",
            note=(
                f"{len(agent_history.events)} vs {len(bare_history.events)} events; "
                f"median of {p.replay_repeats}, interleaved; report only"
            ),
        )
    ]
