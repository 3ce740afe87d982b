"""Figure 3, cancel latency while the model streams: the real `call_llm` against a fake server
streaming for `cancel_stream_seconds`. Plain `cancel` keeps its between-iterations semantics
(the run ends after the response), `{"immediate": true}` cancels the in-flight activity.
Each pair runs side by side; latency = signal sent → `handle.result()` returned. The time until
the fake server saw the HTTP request aborted is recorded too (it depends on heartbeat delivery,
not on the workflow).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio.client import WorkflowHandle

from bench.agent_activities import agent_activities
from bench.fake_llm import FakeLlmServer
from bench.harness import Bench, median, new_id, new_queue, poll, worker
from bench.report import Figure
from workflows import names
from workflows.model import AgentRunInput, AgentRunOptions, AgentRunResult, ChatMessage
from workflows.run.agent import AgentWorkflow


async def _true(value: bool) -> bool:
    return value


async def cancel_after_start(
    handle: WorkflowHandle[Any, AgentRunResult], payload: dict[str, Any]
) -> tuple[float, float, str]:
    """Send the cancel; return (sent at, seconds until the run finished, finish reason)."""
    sent = time.monotonic()
    await handle.signal(names.SIGNAL_CANCEL, payload)
    result = await handle.result()
    return sent, time.monotonic() - sent, result.finish_reason


async def measure(b: Bench) -> list[Figure]:
    p = b.profile
    task_queue = new_queue("cancel")
    pairs = p.cancel_pairs
    with FakeLlmServer(mode="slow", stream_seconds=p.cancel_stream_seconds) as server:
        async with agent_activities(b.client, server.base_url, b.workdir / "cancel") as (
            acts,
            label,
            _,
        ):
            async with worker(b.client, task_queue, acts):
                handles = [
                    await b.client.start_workflow(
                        AgentWorkflow.run,
                        AgentRunInput(
                            messages=[ChatMessage.user("stream for a while")],
                            options=AgentRunOptions(max_rounds=3),
                        ),
                        id=new_id(f"bench-cancel-{i}"),
                        task_queue=task_queue,
                    )
                    for i in range(2 * pairs)
                ]
                await poll(lambda: _true(server.requests >= 2 * pairs), limit=30)
                await asyncio.sleep(1.0)  # well inside the stream
                payloads = [{"reason": "bench", "immediate": i % 2 == 1} for i in range(2 * pairs)]
                outcomes = await asyncio.gather(
                    *(cancel_after_start(h, pl) for h, pl in zip(handles, payloads, strict=True))
                )
                await asyncio.sleep(0.5)
    plain = [o[1] for i, o in enumerate(outcomes) if i % 2 == 0]
    immediate = [o[1] for i, o in enumerate(outcomes) if i % 2 == 1]
    first_immediate = min(o[0] for i, o in enumerate(outcomes) if i % 2 == 1)
    aborts = [d - first_immediate for d in server.disconnects]
    b.details["cancel"] = {
        "activities": label,
        "stream_seconds": p.cancel_stream_seconds,
        "plain_seconds": plain,
        "immediate_seconds": immediate,
        "finish_reasons": [o[2] for o in outcomes],
        "http_abort_after_immediate_seconds": aborts,
    }
    abort_text = (
        f"HTTP stream aborted {median(aborts):.2f} s after the immediate cancel"
        if aborts
        else "the fake server never saw the HTTP stream aborted (activity not interrupted)"
    )
    return [
        Figure(
            key="cancel.immediate",
            label="3. cancel latency, immediate vs plain",
            value=median(immediate),
            unit="s",
            floor=median(plain),
            floor_label="plain cancel",
            target_kind="value_max",
            target=1.0,
            note=(
                f"{pairs} pair(s) side by side; the model streams for "
                f"{p.cancel_stream_seconds:g} s (a minute's stream, shortened to bound time); "
                f"cancel sent ~1 s in; {label}; "
                f"finish reasons {[o[2] for o in outcomes]}; {abort_text}"
            ),
        )
    ]
