"""Figure 7, the cost of encryption at rest: per-round time and history bytes per round of
AgentWorkflow with the AES-256-GCM codec against the same runs without it, on one server, in one
run, interleaved. The model and the tool are the bench's in-process fakes (1 KB of text and 1 KB
of tool output per round), so the figure isolates what the codec adds: sealing every payload,
and the nonce, tag and key id each one carries.
"""

from __future__ import annotations

import base64
import os

from temporalio.client import Client

from bench.harness import Bench, history_bytes, median, new_id, new_queue, round_times, worker
from bench.report import Figure
from bench.stubs import LIST_DIR, FakeAgent
from runtime.codec import ENV_KEY
from runtime.connect import data_converter
from workflows import names
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage
from workflows.run.agent import AgentWorkflow

CONTENT_SIZE = 1000


async def one_run(client: Client, task_queue: str, rounds: int) -> tuple[list[float], float]:
    """Per-round seconds and history bytes per round of one run."""
    handle = await client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(
            messages=[ChatMessage.user("list the workspace")],
            options=AgentRunOptions(max_rounds=rounds, tools=["list_dir"]),
        ),
        id=new_id("bench-encryption"),
        task_queue=task_queue,
    )
    result = await handle.result()
    if result.finish_reason != "max_rounds":
        raise RuntimeError(f"run ended {result.finish_reason}: {result.error}")
    history = await handle.fetch_history()
    return (
        round_times(history, names.ACTIVITY_CALL_LLM),
        history_bytes(history.events) / max(result.rounds, 1),
    )


async def measure(b: Bench) -> list[Figure]:
    p = b.profile
    plain = Client(
        b.client.service_client, namespace=b.client.namespace, data_converter=data_converter({})
    )
    key = base64.b64encode(os.urandom(32)).decode()
    sealed = Client(
        b.client.service_client,
        namespace=b.client.namespace,
        data_converter=data_converter({ENV_KEY: key}),
    )
    modes = {"plain": (plain, new_queue("enc-plain")), "encrypted": (sealed, new_queue("enc"))}
    times: dict[str, list[float]] = {m: [] for m in modes}
    sizes: dict[str, list[float]] = {m: [] for m in modes}
    fake = FakeAgent(content_size=CONTENT_SIZE, tool=LIST_DIR)
    async with (
        worker(plain, modes["plain"][1], fake.activities()),
        worker(sealed, modes["encrypted"][1], fake.activities()),
    ):
        for client, queue in modes.values():  # warm-up: imports, sandbox, pools
            await one_run(client, queue, 2)
        for i in range(p.overhead_pairs):
            order = ["plain", "encrypted"] if i % 2 == 0 else ["encrypted", "plain"]
            for mode in order:
                client, queue = modes[mode]
                per_round, bytes_per_round = await one_run(client, queue, p.overhead_rounds)
                times[mode] += per_round
                sizes[mode].append(bytes_per_round)
    b.details["encryption"] = {
        "content_size": CONTENT_SIZE,
        "round_seconds": times,
        "history_bytes_per_round": sizes,
    }
    note = (
        f"{p.overhead_pairs} interleaved pairs of {p.overhead_rounds}-round runs; bench fakes"
        f" (in-process), {CONTENT_SIZE} B of model text and {CONTENT_SIZE} B of tool output per"
        " round; per-round = time between successive call_llm schedulings (server clock)"
    )
    return [
        Figure(
            key="encryption.per_round",
            label="7. per-round time, encrypted vs plain",
            value=1000 * median(times["encrypted"]),
            unit="ms",
            floor=1000 * median(times["plain"]),
            floor_label="no key",
            target_kind="ratio_max",
            target=1.10,
            note=note,
        ),
        Figure(
            key="encryption.history_bytes_per_round",
            label="7. history bytes/round, encrypted vs plain",
            value=median(sizes["encrypted"]),
            unit="B",
            floor=median(sizes["plain"]),
            floor_label="no key",
            target_kind="ratio_max",
            target=1.15,
            note="every payload sealed whole: + nonce, tag and key id per payload",
        ),
    ]
