"""Figure 11, the cost of metrics and traces: per-round time of AgentWorkflow on a real
`python worker.py` with AGENT_METRICS_ADDRESS and OTEL_EXPORTER_OTLP_ENDPOINT set, against an
identical worker process without them, on one server, in one run, interleaved. Both workers run
the real activities against the bench's instant fake model server and the real `list_dir`; the
traced runs are started by a client with the tracing interceptor (so the workflow's spans exist,
as they do for runs the starter starts), their spans go over OTLP/HTTP to a real receiver on
127.0.0.1 and the metrics endpoint is scraped after every run, as Prometheus would. Also
reported: the worker process's CPU seconds per round, each way (from /proc).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from temporalio.client import Client

from bench.fake_llm import FakeLlmServer
from bench.harness import Bench, median, new_id, new_queue, round_times
from bench.report import Figure
from runtime.connect import data_converter
from runtime.trace_interceptor import AgentTracingInterceptor
from tests.otlp_receiver import OtlpReceiver
from tests.prometheus_text import scrape, total
from workflows import names
from workflows.model import AgentRunInput, AgentRunOptions, ChatMessage
from workflows.run.agent import AgentWorkflow

REPO = Path(__file__).resolve().parents[2]
TICKS = os.sysconf("SC_CLK_TCK")
WARM_UP_ROUNDS = 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (utime and stime of /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class WorkerProcess:
    """`python worker.py` with `env`, until `stop`."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "worker.py",
            cwd=REPO,
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        assert self.proc.stdout is not None
        seen: list[str] = []
        while True:
            line = (await asyncio.wait_for(self.proc.stdout.readline(), 90)).decode()
            if not line:
                raise RuntimeError(f"worker exited before it was ready: {seen}")
            seen.append(line.rstrip())
            if line.startswith("worker ready "):
                break
        asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while await self.proc.stdout.readline():
            pass

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


async def one_run(client: Client, task_queue: str, rounds: int) -> list[float]:
    handle = await client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(
            messages=[ChatMessage.user("list the workspace")],
            options=AgentRunOptions(max_rounds=rounds, tools=["list_dir"]),
        ),
        id=new_id("bench-observability"),
        task_queue=task_queue,
    )
    result = await handle.result()
    if result.finish_reason != "max_rounds":
        raise RuntimeError(f"run ended {result.finish_reason}: {result.error}")
    return round_times(await handle.fetch_history(), names.ACTIVITY_CALL_LLM)


async def measure(b: Bench) -> list[Figure]:
    p = b.profile
    workspace = b.workdir / "observability" / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.txt").write_text("bench\n")
    metrics_address = f"127.0.0.1:{_free_port()}"
    with (
        FakeLlmServer(mode="instant", content_size=200, tool="list_dir") as llm,
        OtlpReceiver() as otlp,
    ):
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_", "OTEL_"))
        }
        base.update(
            TEMPORAL_ADDRESS=b.target_host,
            TEMPORAL_NAMESPACE=b.client.namespace,
            AGENT_WORKSPACE=str(workspace),
            AGENT_STATE_DIR=str(b.workdir / "observability" / "state"),
            LLM_BASE_URL=llm.base_url,
            LLM_MODEL="bench-model",
        )
        queues = {"off": new_queue("obs-off"), "on": new_queue("obs-on")}
        workers = {
            "off": WorkerProcess({**base, "AGENT_TASK_QUEUE": queues["off"]}),
            "on": WorkerProcess(
                {
                    **base,
                    "AGENT_TASK_QUEUE": queues["on"],
                    "AGENT_METRICS_ADDRESS": metrics_address,
                    "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
                }
            ),
        }
        provider = TracerProvider()
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(f"{otlp.endpoint}/v1/traces"))
        )
        traced = Client(
            b.client.service_client,
            namespace=b.client.namespace,
            data_converter=data_converter(),
            interceptors=[AgentTracingInterceptor(tracer=provider.get_tracer("bench"))],
        )
        clients = {"off": b.client, "on": traced}
        times: dict[str, list[float]] = {m: [] for m in workers}
        cpu: dict[str, list[float]] = {m: [] for m in workers}
        try:
            for w in workers.values():
                await w.start()
            for mode in workers:  # warm-up: imports, sandbox, pools
                await one_run(clients[mode], queues[mode], WARM_UP_ROUNDS)
            for i in range(p.overhead_pairs):
                order = ["off", "on"] if i % 2 == 0 else ["on", "off"]
                for mode in order:
                    before = _cpu_seconds(workers[mode].pid)
                    per_round = await one_run(clients[mode], queues[mode], p.overhead_rounds)
                    cpu[mode].append((_cpu_seconds(workers[mode].pid) - before) / len(per_round))
                    times[mode] += per_round
                    if mode == "on":
                        await scrape(f"http://{metrics_address}/metrics")
            samples = await scrape(f"http://{metrics_address}/metrics")
            rounds_counted = total(samples, "agent_rounds_total", task_queue=queues["on"])
        finally:
            for w in workers.values():
                await w.stop()
            provider.shutdown()
        spans = len(otlp.spans())
    expected = WARM_UP_ROUNDS + p.overhead_pairs * p.overhead_rounds
    if rounds_counted != expected or not spans:
        raise RuntimeError(
            f"the traced worker counted {rounds_counted} of {expected} rounds, sent {spans} spans"
        )
    b.details["observability"] = {
        "round_seconds": times,
        "worker_cpu_seconds_per_round": cpu,
        "rounds_counted": rounds_counted,
        "spans_received": spans,
    }
    note = (
        f"{p.overhead_pairs} interleaved pairs of {p.overhead_rounds}-round runs on two real"
        " worker processes (real activities, instant fake model, list_dir); on: Prometheus"
        f" endpoint scraped after each run, OTLP/HTTP to a local receiver ({spans} spans);"
        " per-round = time between successive call_llm schedulings (server clock)"
    )
    return [
        Figure(
            key="observability.per_round",
            label="11. per-round time, metrics+traces vs off",
            value=1000 * median(times["on"]),
            unit="ms",
            floor=1000 * median(times["off"]),
            floor_label="off",
            target_kind="ratio_max",
            target=1.05,
            note=note,
        ),
        Figure(
            key="observability.worker_cpu_per_round",
            label="11. worker CPU per round, metrics+traces vs off",
            value=1000 * median(cpu["on"]),
            unit="ms",
            floor=1000 * median(cpu["off"]),
            floor_label="off",
            note="user+system CPU of each worker process during a run, per round (/proc)",
        ),
    ]
