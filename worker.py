"""The worker: hosts AgentWorkflow and its activities (call_llm, execute_tool, list_tools).

    python worker.py

Connects the way every Temporal program does (`temporalio.envconfig`: TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE, TLS, API key, profiles; default localhost:7233), registers the search
attributes the approval inbox needs, and polls the task queue (AGENT_TASK_QUEUE, default `agent`)
until SIGINT or SIGTERM, then shuts down gracefully: in-flight activities are cancelled and
Temporal retries them elsewhere or later.

The LLM settings (LLM_BASE_URL, LLM_API_KEY, LLM_MODEL, LLM_STREAM) and the tools' workspace
(AGENT_WORKSPACE) are read here only; none of them enters workflow input, events or history.

At start the worker checks once whether bubblewrap works here and says so (`sandbox=bwrap` or
`sandbox=none` in its ready line); without it, it warns, and with AGENT_SANDBOX=required it
refuses to start.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from contextlib import suppress
from datetime import timedelta
from typing import TypedDict

import httpx
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.agent_activities import AgentActivities
from activities.settings import Settings
from activities.tools import build_default_registry
from activities.tools.sandbox import CommandPolicy, SandboxUnavailable, choose_policy
from starter.codec import KeyConfigError
from starter.connect import connect, connect_config, data_converter, task_queue
from starter.decryption_log import log_decryption_failures_once
from starter.search_attributes import ensure_search_attributes
from workflows.agent import AgentWorkflow

GRACEFUL_SHUTDOWN_SECONDS = 10.0


def command_policy(settings: Settings) -> CommandPolicy:
    """How `run_command` runs on this machine (raises SandboxUnavailable when required)."""
    return choose_policy(
        settings.sandbox, network=settings.command_network, env_names=settings.command_env
    )


def no_sandbox_warning(policy: CommandPolicy) -> str:
    passed = ", ".join(["PATH", "HOME", "LANG", *policy.env_names])
    return (
        f"worker: warning: run_command is not sandboxed ({policy.reason}): commands run as this"
        f" user with only {passed} in their environment and are killed with their process group"
        " when they end, but can read and write whatever the worker can; install bubblewrap, or"
        " set AGENT_SANDBOX=required to refuse to start without it"
    )


def provider_name(settings: Settings) -> str:
    """`scripted` (the rule-based stand-in) unless LLM_BASE_URL points at a real endpoint."""
    return "openai-compatible" if settings.llm_base_url else "scripted"


class HeartbeatTuning(TypedDict):
    max_heartbeat_throttle_interval: timedelta
    default_heartbeat_throttle_interval: timedelta


def heartbeat_tuning() -> HeartbeatTuning:
    """Worker options for every worker that runs AgentWorkflow's activities (this one, the
    benchmark's, the tests'). Cancellation reaches an activity only with a heartbeat the server
    answers; the SDK's default throttle (up to 80% of the heartbeat timeout) would delay an
    immediate cancel by many seconds."""
    return HeartbeatTuning(
        max_heartbeat_throttle_interval=timedelta(milliseconds=500),
        default_heartbeat_throttle_interval=timedelta(milliseconds=500),
    )


async def run_worker(
    client: Client,
    settings: Settings,
    *,
    queue: str | None = None,
    stop: asyncio.Event | None = None,
    ready: Callable[[str], None] | None = None,
    commands: CommandPolicy | None = None,
) -> None:
    """Run a worker on `queue` (default: AGENT_TASK_QUEUE or `agent`) until `stop` is set.

    `ready(queue)` is called once the worker polls. Without `stop`, runs until cancelled.
    `commands`: how `run_command` runs (default: from the settings, probed now).
    The demo and the tests host the worker in-process through this function.
    """
    queue = queue or task_queue()
    stop = stop or asyncio.Event()
    log_decryption_failures_once()
    registry = build_default_registry(
        settings.workspace,
        command_timeout_seconds=settings.command_timeout_seconds,
        commands=commands if commands is not None else command_policy(settings),
    )
    async with httpx.AsyncClient() as http:
        acts = AgentActivities(client, settings, registry, http)
        worker = Worker(
            client,
            task_queue=queue,
            workflows=[AgentWorkflow],
            activities=acts.all(),
            graceful_shutdown_timeout=timedelta(seconds=GRACEFUL_SHUTDOWN_SECONDS),
            **heartbeat_tuning(),
        )
        async with worker:
            if ready is not None:
                ready(queue)
            await stop.wait()


async def _main() -> int:
    try:
        settings = Settings.from_env()
    except ValueError as err:  # a bad setting: say which
        print(f"worker: {err}", file=sys.stderr, flush=True)
        return 2
    try:
        commands = command_policy(settings)
    except SandboxUnavailable as err:
        print(
            f"worker: AGENT_SANDBOX=required, but run_command cannot be sandboxed here ({err});"
            " not starting",
            file=sys.stderr,
            flush=True,
        )
        return 2
    if commands.sandbox == "none":
        print(no_sandbox_warning(commands), file=sys.stderr, flush=True)

    address = str(connect_config().get("target_host"))
    try:
        data_converter()
    except KeyConfigError as err:  # an encryption key that cannot be used: say which variable
        print(f"worker: {err}", file=sys.stderr, flush=True)
        return 2
    try:
        client = await connect()
    except Exception as err:  # connection problems are the user's to fix: say so in one line
        print(f"worker: cannot reach Temporal at {address}: {err}", file=sys.stderr, flush=True)
        return 1
    try:
        await ensure_search_attributes(client)
    except RPCError as err:  # e.g. Temporal Cloud: workers may not add search attributes
        print(
            f"worker: could not register the search attributes AgentStatus and"
            f" AgentPendingApprovals ({err.message}); AgentWorkflow sets them, so create them"
            f" once for this namespace",
            file=sys.stderr,
            flush=True,
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    def ready(queue: str) -> None:
        print(
            f"worker ready task_queue={queue} address={address}"
            f" provider={provider_name(settings)} workspace={settings.workspace}"
            f" sandbox={commands.sandbox}",
            flush=True,
        )

    await run_worker(client, settings, stop=stop, ready=ready, commands=commands)
    print("worker stopped", flush=True)
    return 0


def _exit(code: int) -> None:
    # Known SDK wart (temporalio/sdk-python issue 300): a process that used a Temporal client can
    # crash (SIGSEGV/SIGABRT) during interpreter shutdown, after all its work is done, when the
    # Rust core is torn down. We flush and leave with os._exit so the exit code is ours.
    with suppress(Exception):
        sys.stdout.flush()
    with suppress(Exception):
        sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    try:
        exit_code = asyncio.run(_main())
    except KeyboardInterrupt:
        exit_code = 130
    _exit(exit_code)
