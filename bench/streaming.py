"""`python -m bench.streaming`: what live streaming costs and how live it is.

One round of a typical reply (500 tokens of 4 characters = 2,000 characters, streamed by a local
OpenAI-compatible server at a steady rate), through the real AgentWorkflow and AgentActivities on
a local Temporal dev server, in these configurations:

- `off`:             `AGENT_STREAM_DELTAS=false`, nobody following (the baseline);
- `off+follower`:    no deltas, one `starter.live.follow` subscriber (events only);
- `on`:              deltas published every `AGENT_STREAM_FLUSH_SECONDS`, nobody following;
- `on+follower`:     deltas and one live subscriber (the normal live view).

It prints the history events and bytes of each run, the difference from `off`, and, with a
follower, the delay from each token leaving the model server to the follower receiving it
(same process, same monotonic clock).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.tools import build_default_registry
from runtime.connect import data_converter
from runtime.search_attributes import ensure_search_attributes
from runtime.settings import Settings
from starter.live import follow
from tests.fake_openai import FakeOpenAI, FakeOpenAIServer, Slow, _chunk, _delta, _Handler
from workflows.model import AgentRunInput
from workflows.run.agent import AgentWorkflow

TOKEN_CHARS = 4


class _TimedHandler(_Handler):
    """`Slow` replies whose k-th token is the text `{k:04d}`, with its send time recorded."""

    def _slow(self, behaviour: Slow, streaming: bool) -> None:
        sent: dict[int, float] = self.server.sent  # type: ignore[attr-defined]
        self._start_stream()
        self._event(_chunk(_delta({"role": "assistant", "content": ""})))
        for k in range(behaviour.chunks):
            self._pause(behaviour.delay)
            sent[k] = time.monotonic()
            self._event(_chunk(_delta({"content": f"{k:0{TOKEN_CHARS}d}"})))
        self._event(_chunk(_delta({}, "stop")))
        self._event("[DONE]")
        self._end_stream()


@dataclass
class Outcome:
    name: str
    events: int
    bytes: int
    delays_ms: list[float]
    batches: int


def venv_binary(name: str) -> str:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else (shutil.which(name) or name)


async def one_run(
    client: Client,
    fake: FakeOpenAIServer,
    workspace: Path,
    http: httpx.AsyncClient,
    *,
    name: str,
    deltas: bool,
    follower: bool,
    tokens: int,
    token_seconds: float,
    flush_seconds: float,
) -> Outcome:
    fake.sent = {}  # type: ignore[attr-defined]
    fake.enqueue(Slow(chunks=tokens, delay=token_seconds))
    settings = Settings(
        llm_base_url=fake.base_url,
        llm_api_key="sk-bench",
        llm_model="fake-model",
        workspace=workspace,
        state_dir=workspace.parent / "state",
        stream_deltas=deltas,
        stream_flush_seconds=flush_seconds,
    )
    acts = AgentActivities(client, settings, build_default_registry(workspace), http)
    queue = f"bench-streaming-{uuid.uuid4()}"
    received: dict[int, float] = {}
    text: list[str] = []
    batches = 0

    def on_delta(round: int, piece: str) -> None:
        nonlocal batches
        now = time.monotonic()
        batches += 1
        before = len("".join(text))
        text.append(piece)
        whole = "".join(text)
        first = (before + TOKEN_CHARS - 1) // TOKEN_CHARS
        for k in range(first, len(whole) // TOKEN_CHARS):
            received.setdefault(int(whole[k * TOKEN_CHARS : (k + 1) * TOKEN_CHARS]), now)

    async with Worker(client, task_queue=queue, workflows=[AgentWorkflow], activities=acts.all()):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput.from_prompt("write 500 tokens"),
            id=f"bench-streaming-{name}-{uuid.uuid4()}",
            task_queue=queue,
        )
        if follower:
            await asyncio.wait_for(
                follow(client, handle.id, on_delta=on_delta, on_event=lambda e: None), 300
            )
        await handle.result()
        history = await handle.fetch_history()
    sent: dict[int, float] = fake.sent  # type: ignore[attr-defined]
    delays = [(received[k] - sent[k]) * 1000 for k in received if k in sent]
    return Outcome(
        name=name,
        events=len(history.events),
        bytes=sum(e.ByteSize() for e in history.events),
        delays_ms=delays,
        batches=batches,
    )


def report(outcomes: list[Outcome], tokens: int, token_seconds: float, flush: float) -> str:
    base = outcomes[0]
    lines = [
        f"one round: {tokens} tokens x {TOKEN_CHARS} chars = {tokens * TOKEN_CHARS} chars, "
        f"one token every {token_seconds * 1000:.0f} ms ({tokens * token_seconds:.1f} s); "
        f"AGENT_STREAM_FLUSH_SECONDS={flush}",
        f"{'run':<14} {'events':>7} {'+events':>8} {'bytes':>8} {'+bytes':>8} "
        f"{'batches':>8} {'delay p50':>10} {'p90':>7} {'max':>7}",
    ]
    for o in outcomes:
        if o.delays_ms:
            qs = statistics.quantiles(o.delays_ms, n=10)
            delay = f"{statistics.median(o.delays_ms):>8.0f}ms {qs[8]:>5.0f}ms "
            delay += f"{max(o.delays_ms):>5.0f}ms"
        else:
            delay = f"{'-':>10} {'-':>7} {'-':>7}"
        lines.append(
            f"{o.name:<14} {o.events:>7} {o.events - base.events:>+8} {o.bytes:>8} "
            f"{o.bytes - base.bytes:>+8} {o.batches or '-':>8} {delay}"
        )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=venv_binary("temporal"),
        data_converter=data_converter(),
        dev_server_extra_args=["--log-level", "error"],
    )
    try:
        await ensure_search_attributes(env.client)
        with tempfile.TemporaryDirectory() as tmp, FakeOpenAI() as fake:
            fake.RequestHandlerClass = _TimedHandler
            workspace = Path(tmp) / "ws"
            workspace.mkdir()
            async with httpx.AsyncClient() as http:
                runs: list[tuple[str, dict[str, Any]]] = [
                    ("off", {"deltas": False, "follower": False}),
                    ("off+follower", {"deltas": False, "follower": True}),
                    ("on", {"deltas": True, "follower": False}),
                    ("on+follower", {"deltas": True, "follower": True}),
                ]
                for flush in args.flush:
                    outcomes = [
                        await one_run(
                            env.client,
                            fake,
                            workspace,
                            http,
                            name=name,
                            tokens=args.tokens,
                            token_seconds=args.token_ms / 1000,
                            flush_seconds=flush,
                            **kw,
                        )
                        for name, kw in runs
                    ]
                    print(report(outcomes, args.tokens, args.token_ms / 1000, flush), flush=True)
                    print(flush=True)
    finally:
        await env.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.streaming", description=__doc__)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--token-ms", type=float, default=10.0, help="model speed")
    parser.add_argument(
        "--flush", type=float, nargs="+", default=[0.2, 0.1], help="flush intervals to try"
    )
    asyncio.run(main_async(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
