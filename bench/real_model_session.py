"""A long `keep_alive` session against a real model server, driven as a user would drive it, with
per-turn and per-round figures: how many rounds each turn took, how long each round took before
and after each compaction, and how much of each prompt the server's cache already held.

    .venv/bin/python -m bench.real_model_session --llm-url http://127.0.0.1:8181/v1 \\
        --workdir /tmp/real-session

It starts its own Temporal dev server (the `temporal` binary beside this Python), a real worker
(`python worker.py`) whose `LLM_BASE_URL` is a small recording proxy on 127.0.0.1 in front of the
model server, and a workspace of a few files of a few KB. Then it sends the session's messages one
turn at a time (`send_message`), answers approvals like a person (read-only commands approved,
deletions rejected with a reason) through `tool_approval`, and reads the run's `events`. The proxy
keeps each chat request's messages, status, wall time and llama.cpp's `timings` (`cache_n`:
prompt tokens the server's cache held, `prompt_n`: prompt tokens it evaluated). A request whose
messages do not begin with the previous request's is where the model's view changed (a
compaction).

The figures it prints begin with the exact command that made them, every option with its value
(`command: .venv/bin/python -m bench.real_model_session --llm-url … --file-bytes 2400 …`), and
`figures.json` holds it as `command`: a report quotes what ran, not what was meant to.

Not part of the test suite (it needs a model server); see docs/real-model-servers.md. Every
process it starts (dev server, worker, proxy) it stops before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from temporalio.client import Client, WorkflowHandle

from bench.harness import start_server
from runtime.process import exit_now
from workflows import names
from workflows.contract.rules import PolicyRule
from workflows.gate.policy import evaluate
from workflows.model import (
    AgentEvent,
    AgentRunInput,
    AgentRunOptions,
    AgentStatus,
    ApprovalEvent,
    ChatMessage,
    CompactionEvent,
    ToolApprovalResponse,
    ToolCall,
    ToolCallEvent,
    ToolResultEvent,
    WarningEvent,
)

REPO = Path(__file__).resolve().parent.parent
READY_SECONDS = 120.0
TURN_SECONDS = 900.0

SYSTEM = (
    "You are a file manager assistant working in a workspace folder. You know nothing about its"
    " files except what your tools return in this turn: for every request, first call the tool"
    " it asks for, then answer from the tool's result. Tools: list_dir, read_file, run_command"
    " (needs a person's approval) and delete_path (needs approval). Call one tool at a time."
    " Once you have the result, answer in one or two short sentences."
)
LOOP_FOLDERS = [f"box{i}" for i in range(1, 9)]
TURNS = [
    "List the files in the workspace with list_dir.",
    "Read the file reports/pumps.txt and tell me what it is about.",
    "Read the file reports/wells.txt and tell me which site had the highest reading.",
    "Use run_command to run `ls -la reports` and tell me how many files there are.",
    "Read the file reports/tanks.txt and tell me the lowest reading it mentions.",
    "Delete the file old.txt. If the deletion is rejected, try delete_path on old.txt once more.",
    "Read the file reports/valves.txt and tell me what it is about.",
    "Read the files "
    + ", ".join(f"{folder}/item{n}.txt" for n, folder in enumerate(LOOP_FOLDERS, start=1))
    + ", one read_file call per file.",
    "Which of the reports you read so far mentions the most sites? One sentence.",
    "Read the file reports/meters.txt and tell me the highest reading it gives.",
    "Read the file reports/filters.txt and tell me which site needs attention first.",
    "Use run_command to run `wc -c reports/pumps.txt` and tell me the size.",
    "Read the file reports/crews.txt and tell me which crew checked site 7.",
    "Read the file reports/rain.txt and tell me which day had the highest reading.",
    "In one sentence: what did I ask you to delete earlier, and was it deleted?",
    "Read the file reports/power.txt and tell me the highest reading.",
    "Read the file reports/alarms.txt and tell me how many lines need attention.",
    "Use run_command to run `cat reports/index.txt`.",
    "Read the file reports/budget.txt and tell me the lowest reading.",
    "Read the file reports/audit.txt and tell me the first line.",
    "Read the file reports/pumps.txt again and tell me the reading for site 3.",
    "Thank you. In one sentence, list the reports you read today.",
]
REPORTS = "pumps wells tanks valves meters filters crews rain power alarms budget audit".split()

KEEP_REASON = "old.txt must stay: it is the only copy of last year's log"
READ_ONLY = ("ls", "ls *", "cat *", "wc *", "head *", "pwd")
APPROVER_RULES = [
    *(PolicyRule(tool="run_command", when={"command": c}, decision="allow") for c in READ_ONLY),
    PolicyRule(tool="delete_path", decision="deny", reason=KEEP_REASON),
]
"""What the person here approves, in the product's own rule language (docs/approval-policy.md)."""


# ---- the workspace ----


def report_text(topic: str, size: int) -> str:
    """A report of about `size` bytes whose lines differ (site, day and reading vary)."""
    lines: list[str] = [f"{topic.upper()} REPORT, week 48", ""]
    number = 0
    while sum(len(line) + 1 for line in lines) < size:
        number += 1
        site, day, reading = number % 11 + 1, number % 7 + 1, (number * 37 + len(topic)) % 97
        lines.append(
            f"{number:3d}. site {site}, day {day}: {topic} reading {reading}, checked by crew"
            f" {chr(65 + number % 5)}, status {'ok' if reading % 3 else 'needs attention'}."
        )
    return "\n".join(lines) + "\n"


def seed_workspace(workspace: Path, file_bytes: int) -> None:
    """The files the turns read: reports of about `file_bytes` each, an index, a file to keep,
    and the small folders the looping turn lists."""
    reports = workspace / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    for topic in REPORTS:
        (reports / f"{topic}.txt").write_text(report_text(topic, file_bytes))
    (reports / "index.txt").write_text("".join(f"{t}.txt\n" for t in REPORTS))
    (workspace / "old.txt").write_text("last year's log\n")
    for index, folder in enumerate(LOOP_FOLDERS, start=1):
        (workspace / folder).mkdir(exist_ok=True)
        (workspace / folder / f"item{index}.txt").write_text(f"item {index}\n")


# ---- the recording proxy ----


@dataclass
class Exchange:
    """One chat request as the proxy saw it."""

    turn: int
    tools: bool
    """Sent with tools: a round of the loop (a summary request has none)."""
    messages: list[Any]
    status: int = 0
    seconds: float = 0.0
    timings: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    kept_prefix: int | None = None
    """How many leading messages this request shares with the previous round's; None for the
    first round."""
    grew: bool = True
    """This round's messages begin with the previous round's, whole."""


def last_json(body: bytes, key: str) -> dict[str, Any]:
    """The last object named `key` in a reply's body (a stream's `data:` lines, or one JSON)."""
    for line in reversed(body.decode("utf-8", errors="replace").splitlines()):
        text = line.removeprefix("data:").strip()
        if f'"{key}"' not in text:
            continue
        with contextlib.suppress(ValueError):
            value = json.loads(text)
            if isinstance(value, dict) and isinstance(value.get(key), dict):
                return cast(dict[str, Any], value[key])
    return {}


def shared_prefix(before: Sequence[Any], after: Sequence[Any]) -> int:
    count = 0
    for old, new in zip(before, after, strict=False):
        if old != new:
            break
        count += 1
    return count


class Proxy:
    """Passes every request through to the model server, recording chat requests."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        """The server's root: the worker's paths (`/v1/chat/completions`, and llama.cpp's
        `/props`, where the worker reads the model's window) are passed on as they are."""
        self.turn = 0
        self.exchanges: list[Exchange] = []
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0))
        self.app = Starlette(routes=[Route("/{path:path}", self.forward, methods=["GET", "POST"])])

    async def forward(self, request: Request) -> Response:
        body = await request.body()
        path = request.url.path
        record = self._record(body) if path.endswith("/chat/completions") else None
        headers = {
            k: v for k, v in request.headers.items() if k.lower() in ("content-type", "accept")
        }
        started = time.monotonic()
        upstream = self._http.build_request(
            request.method, f"{self.upstream}{path}", content=body, headers=headers
        )
        response = await self._http.send(upstream, stream=True)

        async def relay() -> AsyncIterator[bytes]:
            seen = bytearray()
            try:
                async for chunk in response.aiter_raw():
                    seen.extend(chunk)
                    yield chunk
            finally:
                await response.aclose()
                if record is not None:
                    record.status = response.status_code
                    record.seconds = time.monotonic() - started
                    record.timings = last_json(bytes(seen), "timings")
                    record.usage = last_json(bytes(seen), "usage")

        kept = {k: v for k, v in response.headers.items() if k.lower() == "content-type"}
        return StreamingResponse(relay(), status_code=response.status_code, headers=kept)

    def _record(self, body: bytes) -> Exchange:
        sent = json.loads(body)
        record = Exchange(self.turn, bool(sent.get("tools")), list(sent.get("messages") or []))
        rounds = [e for e in self.exchanges if e.tools]
        if record.tools and rounds:
            previous = rounds[-1].messages
            record.kept_prefix = shared_prefix(previous, record.messages)
            record.grew = record.kept_prefix == len(previous)
        self.exchanges.append(record)
        return record

    async def aclose(self) -> None:
        await self._http.aclose()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class QuietServer(uvicorn.Server):
    """uvicorn without its own signal handlers: Ctrl-C stops the whole session (and every
    process it started), not only the proxy."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def proxy_server(upstream: str) -> AsyncIterator[tuple[Proxy, str]]:
    proxy = Proxy(upstream)
    port = free_port()
    config = uvicorn.Config(
        proxy.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
    )
    server = QuietServer(config)
    task = asyncio.create_task(server.serve())
    for _ in range(200):
        if server.started:
            break
        await asyncio.sleep(0.05)
    try:
        yield proxy, f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        server.force_exit = True  # a round still in flight must not hold the exit
        await task
        await proxy.aclose()


# ---- the worker ----


@contextlib.asynccontextmanager
async def worker_process(
    target: str, queue: str, llm_url: str, workdir: Path
) -> AsyncIterator[int]:
    """`python worker.py` as a user starts it; stopped by its process id."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": target,
        "AGENT_TASK_QUEUE": queue,
        "LLM_BASE_URL": llm_url,
        "LLM_MODEL": "local",
        "LLM_MAX_TOKENS": "512",
        "LLM_TIMEOUT_SECONDS": "600",
        "AGENT_WORKSPACE": str(workdir / "ws"),
        "AGENT_STATE_DIR": str(workdir / "state"),
    }
    path = workdir / "worker.log"
    with path.open("w") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "worker.py", cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            for _ in range(int(READY_SECONDS / 0.2)):
                if process.returncode is not None or "worker ready" in path.read_text():
                    break
                await asyncio.sleep(0.2)
            if process.returncode is not None or "worker ready" not in path.read_text():
                raise RuntimeError(f"the worker did not start: see {path}")
            yield process.pid
        finally:
            if process.returncode is None:
                os.kill(process.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(process.wait(), 30)
                except TimeoutError:
                    os.kill(process.pid, signal.SIGKILL)
                    await process.wait()


# ---- the session ----


@dataclass
class Turn:
    index: int
    prompt: str
    seconds: float = 0.0
    rounds: int = 0
    calls: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    reply: str = ""


async def status_of(handle: WorkflowHandle[Any, Any]) -> AgentStatus:
    answer: AgentStatus = await handle.query(names.QUERY_STATUS, result_type=AgentStatus)
    return answer


async def events_after(handle: WorkflowHandle[Any, Any], after: int) -> list[AgentEvent]:
    log: list[AgentEvent] = await handle.query(
        names.QUERY_EVENTS, after, result_type=list[AgentEvent]
    )
    return log


async def record_of(handle: WorkflowHandle[Any, Any]) -> list[ChatMessage]:
    record: list[ChatMessage] = await handle.query(
        names.QUERY_MESSAGES, result_type=list[ChatMessage]
    )
    return record


def decide(call: ToolCall) -> ToolApprovalResponse:
    verdict = evaluate(APPROVER_RULES, call.name, call.arguments, requires_approval=True)
    approved = verdict.decision == "allow"
    reason = None if approved else verdict.reason or "only read-only commands are approved here"
    return ToolApprovalResponse(
        call_id=call.id, approved=approved, reason=reason, approver="real-model-session"
    )


async def run_turn(handle: WorkflowHandle[Any, Any], before: int) -> None:
    """Answer approvals until the turn ends: the record grew past the user's message and the
    session waits for the next one."""
    answered: set[str] = set()
    deadline = time.monotonic() + TURN_SECONDS
    while time.monotonic() < deadline:
        current = await status_of(handle)
        if current.phase == "finished":
            raise RuntimeError(f"the session finished: {current.finish_reason}")
        for call in current.pending_approvals:
            if call.id not in answered:
                answered.add(call.id)
                await handle.signal(names.SIGNAL_TOOL_APPROVAL, decide(call))
        if current.phase == "waiting_for_message" and len(await record_of(handle)) > before + 1:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"a turn took longer than {TURN_SECONDS:.0f} s")


def note_events(turn: Turn, log: Sequence[AgentEvent]) -> None:
    for event in log:
        if isinstance(event, ToolCallEvent):
            turn.calls.append(f"{event.name} {json.dumps(event.arguments)}")
        elif isinstance(event, ApprovalEvent):
            verdict = "approved" if event.approved else f"rejected ({event.reason})"
            turn.answers.append(f"{event.source}: {verdict}")
        elif isinstance(event, ToolResultEvent):
            turn.results.append(f"{event.name}: {event.content[:120]!r}")
        elif isinstance(event, WarningEvent):
            turn.warnings.append(event.message)
        elif isinstance(event, CompactionEvent):
            turn.compactions.append(event.model_dump(exclude={"type"}))


async def session(
    client: Client,
    queue: str,
    proxy: Proxy,
    max_rounds: int,
    turns: Sequence[str],
    done: list[Turn],
) -> None:
    """Play the turns; each one finished is added to `done` (kept when the session is cut
    short)."""
    options = AgentRunOptions(keep_alive=True, max_rounds=max_rounds, temperature=0.0)
    first = AgentRunInput(
        messages=[ChatMessage.system(SYSTEM), ChatMessage.user(turns[0])], options=options
    )
    started = time.monotonic()
    handle = await client.start_workflow(
        names.WORKFLOW_TYPE,
        first,
        id=f"real-session-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
    )
    seen = -1
    for index, prompt in enumerate(turns):
        turn = Turn(index, prompt)
        proxy.turn = index
        before = 1 if index == 0 else len(await record_of(handle))
        if index:
            started = time.monotonic()
            await handle.signal(names.SIGNAL_SEND_MESSAGE, ChatMessage.user(prompt))
        await run_turn(handle, before)
        turn.seconds = time.monotonic() - started
        log = await events_after(handle, seen)
        seen = max([seen, *(e.seq for e in log)])
        note_events(turn, log)
        turn.rounds = sum(1 for e in proxy.exchanges if e.turn == index and e.tools)
        last = (await record_of(handle))[-1]
        turn.reply = last.content if last.role == "assistant" else f"({last.role} message last)"
        done.append(turn)
        print(one_turn_line(turn, proxy), flush=True)
    await handle.signal(names.SIGNAL_CANCEL, {"reason": "the session's turns are done"})


# ---- the figures ----


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def one_turn_line(turn: Turn, proxy: Proxy) -> str:
    rounds = [e for e in proxy.exchanges if e.turn == turn.index and e.tools]
    seconds = ", ".join(f"{e.seconds:.1f}" for e in rounds)
    line = (
        f"turn {turn.index:2d}: {turn.rounds} rounds in {turn.seconds:6.1f} s (rounds {seconds});"
        f" calls {turn.calls or '-'}"
    )
    if turn.answers:
        line += f"; answers {turn.answers}"
    if turn.results:
        line += f"; results {[r[:90] for r in turn.results]}"
    if turn.warnings:
        line += f"; warnings {turn.warnings}"
    for compaction in turn.compactions:
        line += f"; compaction {compaction}"
    return line + f"; reply {turn.reply[:100]!r}"


def request_lines(proxy: Proxy) -> list[str]:
    lines = []
    for number, e in enumerate(proxy.exchanges):
        t = e.timings
        kind = "round" if e.tools else "summary"
        view = "" if e.kept_prefix is None else f" kept {e.kept_prefix} msgs"
        view += "" if e.grew else " VIEW CHANGED"
        lines.append(
            f"request {number:2d} turn {e.turn:2d} {kind:7s} HTTP {e.status} {e.seconds:6.1f} s"
            f" msgs {len(e.messages):3d}{view}; cache_n {t.get('cache_n')} prompt_n"
            f" {t.get('prompt_n')} ({t.get('prompt_per_second', 0):.0f} tok/s) predicted_n"
            f" {t.get('predicted_n')} ({t.get('predicted_per_second', 0):.1f} tok/s)"
        )
    return lines


def compaction_lines(proxy: Proxy, window: int) -> list[str]:
    """Seconds per round in the `window` rounds before each view change and from it on."""
    rounds = [e for e in proxy.exchanges if e.tools]
    lines = []
    for at, e in enumerate(rounds):
        if e.grew:
            continue
        before = [r.seconds for r in rounds[max(0, at - window) : at]]
        after = [r.seconds for r in rounds[at : at + window]]
        lines.append(
            f"view change at round {at} (turn {e.turn}): {window} rounds before"
            f" {mean(before):.1f} s/round, from it on {mean(after):.1f} s/round, ratio"
            f" {mean(after) / mean(before):.2f}; first round after {e.seconds:.1f} s (cache_n"
            f" {e.timings.get('cache_n')}, prompt_n {e.timings.get('prompt_n')})"
        )
    return lines


def summary_lines(turns: Sequence[Turn], proxy: Proxy) -> list[str]:
    rounds = [e for e in proxy.exchanges if e.tools]
    grew = [e for e in rounds[1:] if e.grew]
    return [
        f"turns completed {len(turns)}; rounds {len(rounds)}; rounds per turn"
        f" {[t.rounds for t in turns]}",
        f"summary requests {sum(1 for e in proxy.exchanges if not e.tools)}; statuses"
        f" {sorted({e.status for e in proxy.exchanges})}",
        f"rounds whose prompt began with the previous round's: {len(grew)} of {len(rounds) - 1};"
        f" their cache_n/prompt tokens {sum(e.timings.get('cache_n', 0) for e in grew)}/"
        f"{sum(e.timings.get('cache_n', 0) + e.timings.get('prompt_n', 0) for e in grew)}",
        f"mean s/round {mean([e.seconds for e in rounds]):.1f}",
    ]


# ---- main ----


def prepare(args: argparse.Namespace) -> Path:
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    seed_workspace(workdir / "ws", args.file_bytes)
    return workdir


def write_figures(workdir: Path, figures: dict[str, Any]) -> None:
    (workdir / "figures.json").write_text(json.dumps(figures, indent=1))


def report(
    workdir: Path, done: Sequence[Turn], proxy: Proxy, window: int, command: str = ""
) -> None:
    """Print the figures and write them to figures.json (also for a session cut short), after
    the `command` that made them."""
    lines = [
        f"command: {command}",
        *summary_lines(done, proxy),
        *compaction_lines(proxy, window),
        *request_lines(proxy),
    ]
    print("\n".join(lines), flush=True)
    figures = {
        "command": command,
        "turns": [asdict(t) for t in done],
        "requests": [{**asdict(e), "messages": len(e.messages)} for e in proxy.exchanges],
    }
    write_figures(workdir, figures)


async def main(args: argparse.Namespace) -> None:
    workdir = prepare(args)
    turns = TURNS[: args.turns]
    env = await start_server()
    done: list[Turn] = []
    try:
        target = env.client.service_client.config.target_host
        queue = f"real-session-{uuid.uuid4().hex[:8]}"
        async with (
            proxy_server(args.llm_url) as (proxy, url),
            worker_process(target, queue, url, workdir) as pid,
        ):
            command = command_line(args)
            print(f"command: {command}")
            print(f"dev server {target}, worker pid {pid}, proxy {url} -> {args.llm_url}")
            try:
                await session(env.client, queue, proxy, args.max_rounds, turns, done)
            finally:
                report(workdir, done, proxy, args.window, command)
    finally:
        await env.shutdown()


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--llm-url", default="http://127.0.0.1:8181/v1")
    parser.add_argument("--workdir", required=True, help="workspace, logs and figures.json")
    parser.add_argument("--turns", type=int, default=len(TURNS), help="at most %(default)s")
    parser.add_argument("--max-rounds", type=int, default=4, help="rounds per turn")
    parser.add_argument("--file-bytes", type=int, default=2400, help="size of each report")
    parser.add_argument("--window", type=int, default=3, help="rounds compared at a view change")
    return parser


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return parser().parse_args(argv)


def command_line(args: argparse.Namespace) -> str:
    """The command that runs this session again: every option with the value it had (defaults
    too), so the figures can be made again from what a report quotes."""
    words = [".venv/bin/python", "-m", "bench.real_model_session"]
    for action in parser()._actions:
        if action.option_strings and action.dest != "help":
            words += [action.option_strings[0], str(getattr(args, action.dest))]
    return shlex.join(words)


async def until_stopped(args: argparse.Namespace) -> None:
    """`main`, cancelled by SIGTERM as by Ctrl-C, so that it stops what it started."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    await main(args)


if __name__ == "__main__":
    asyncio.run(until_stopped(parse()))
    # The SDK's core threads must not be torn down by the interpreter's finalisation (seen:
    # "PyGILState_Release ... finalizing" after the figures were written): leave as the
    # project's other entry points do.
    exit_now(0)
