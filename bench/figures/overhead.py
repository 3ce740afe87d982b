"""Figure 1, per-round overhead: AgentWorkflow with the real activities against an instant fake
model and the `list_dir` tool, against the fair floor (the bare workflow making the agent's own
model request and `list_dir` per round, `bench.floor`) on the same worker and server,
interleaved. The in-process floor runs the same activity functions in a plain loop, without
Temporal, to show what the activities themselves cost."""

from __future__ import annotations

import time
from typing import Any

from temporalio.testing import ActivityEnvironment

from bench.agent_activities import agent_activities, model_client
from bench.bare_workflow import ACTIVITY_STEP_A, BareInput, BareWorkflow
from bench.fake_llm import FakeLlmServer
from bench.figures.scale import REPEATS
from bench.floor import FairFloor, save_record
from bench.harness import Bench, median, new_id, new_queue, round_times, worker
from bench.report import Figure
from workflows import names
from workflows.conversation.tail import ConversationTails
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    ChatMessage,
    LlmRequest,
    LlmResponse,
    ToolRequest,
)
from workflows.run.agent import AgentWorkflow


class LocalConversation:
    """Answers the conversation queries from a local list, as the workflow would: the in-process
    floor has no workflow."""

    def __init__(self, messages: list[ChatMessage]) -> None:
        self.messages = messages
        self._tails = ConversationTails()

    def get_workflow_handle(self, workflow_id: str, **_: Any) -> LocalConversation:
        return self

    async def query(self, name: str, *args: Any, **__: Any) -> Any:
        if name == names.QUERY_CONVERSATION_TAIL:
            return self._tails.answer(args[0], self.messages)
        return list(self.messages)


async def agent_run(
    b: Bench, task_queue: str, rounds: int
) -> tuple[list[float], list[ChatMessage]]:
    """Round times of one agent run, and its record."""
    options = AgentRunOptions(max_rounds=rounds, tools=["list_dir"], max_repeats=REPEATS)
    handle = await b.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(messages=[ChatMessage.user("list the workspace")], options=options),
        id=new_id("bench-overhead-agent"),
        task_queue=task_queue,
    )
    result = await handle.result()
    if result.finish_reason != "max_rounds":
        raise RuntimeError(f"agent run ended {result.finish_reason}: {result.error}")
    return round_times(await handle.fetch_history(), names.ACTIVITY_CALL_LLM), result.messages


async def agent_round_times(b: Bench, task_queue: str, rounds: int) -> list[float]:
    return (await agent_run(b, task_queue, rounds))[0]


async def bare_round_times(b: Bench, task_queue: str, rounds: int) -> list[float]:
    handle = await b.client.start_workflow(
        BareWorkflow.run,
        BareInput(rounds=rounds),
        id=new_id("bench-overhead-bare"),
        task_queue=task_queue,
    )
    await handle.result()
    return round_times(await handle.fetch_history(), ACTIVITY_STEP_A)


async def in_process_round_times(b: Bench, base_url: str, rounds: int) -> list[float]:
    """The agent's loop with the same activity functions called directly (no Temporal)."""
    conversation = LocalConversation([ChatMessage.user("list the workspace")])
    env = ActivityEnvironment()
    times: list[float] = []
    async with agent_activities(
        conversation,  # type: ignore[arg-type]
        base_url,
        b.workdir / "inproc",
        live_text=False,  # no workflow to publish to
    ) as (acts, _, __):
        by_name = {fn.__temporal_activity_definition.name: fn for fn in acts}  # type: ignore[attr-defined]
        for round_ in range(rounds):
            start = time.perf_counter()
            request = LlmRequest(
                workflow_id="local",
                run_id="local",
                message_count=len(conversation.messages),
                round=round_,
                tools=["list_dir"],
            )
            response: LlmResponse = await env.run(by_name[names.ACTIVITY_CALL_LLM], request)
            conversation.messages.append(response.message)
            for call in response.message.tool_calls or []:
                tool_request = ToolRequest(
                    workflow_id="local", call_id=call.id, name=call.name, arguments=call.arguments
                )
                content: str = await env.run(by_name[names.ACTIVITY_EXECUTE_TOOL], tool_request)
                conversation.messages.append(ChatMessage.tool(call, content))
            times.append(time.perf_counter() - start)
    return times


async def measure(b: Bench) -> list[Figure]:
    p = b.profile
    task_queue = new_queue("overhead")
    agent: list[float] = []
    bare: list[float] = []
    record = b.workdir / "overhead-record.json"
    with FakeLlmServer(mode="instant", content_size=200, tool="list_dir") as server:
        async with agent_activities(b.client, server.base_url, b.workdir / "overhead") as (
            acts,
            label,
            real,
        ):
            floor = FairFloor(real, model_client(real), record)
            async with worker(b.client, task_queue, [*acts, *floor.activities()]):
                # Warm-up (imports, sandbox, pools), and the record the floor sends.
                _, messages = await agent_run(b, task_queue, p.overhead_rounds)
                save_record(record, messages)
                await bare_round_times(b, task_queue, 2)
                for i in range(p.overhead_pairs):
                    # A, B, A, B … with the order flipped every pair, so drift hits both.
                    if i % 2 == 0:
                        agent += await agent_round_times(b, task_queue, p.overhead_rounds)
                        bare += await bare_round_times(b, task_queue, p.overhead_rounds)
                    else:
                        bare += await bare_round_times(b, task_queue, p.overhead_rounds)
                        agent += await agent_round_times(b, task_queue, p.overhead_rounds)
        in_process = await in_process_round_times(b, server.base_url, p.overhead_rounds)
    b.details["overhead"] = {
        "activities": label,
        "agent_round_seconds": agent,
        "bare_round_seconds": bare,
        "in_process_round_seconds": in_process,
    }
    agent_ms, bare_ms, local_ms = (1000 * median(x) for x in (agent, bare, in_process))
    note = (
        f"{p.overhead_pairs} interleaved pairs of {p.overhead_rounds}-round runs; {label}; "
        "fake OpenAI server answering at once; tool list_dir; the floor makes the same model "
        "request and list_dir per round; per-round = time between successive call_llm "
        "schedulings (server clock)"
    )
    return [
        Figure(
            key="overhead.per_round",
            label="1. per-round time, agent vs bare",
            value=agent_ms,
            unit="ms",
            floor=bare_ms,
            floor_label="fair floor",
            target_kind="ratio_max",
            target=1.05,
            note=note,
        ),
        Figure(
            key="overhead.in_process",
            label="1. per-round time, agent vs in-process",
            value=agent_ms,
            unit="ms",
            floor=local_ms,
            floor_label="no Temporal",
            note="the same activity functions called in a plain loop (ActivityEnvironment)",
        ),
    ]
