"""The worker: hosts AgentWorkflow and its activities (call_llm, execute_tool, list_tools).

    python worker.py
    python worker.py --processes 2     # or AGENT_WORKER_PROCESSES=2: two full workers

Connects the way every Temporal program does (`temporalio.envconfig`: TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE, TLS, API key, profiles; default localhost:7233), registers the search
attributes the approval inbox needs, and polls the task queue (AGENT_TASK_QUEUE, default `agent`)
until SIGINT or SIGTERM, then shuts down gracefully: in-flight activities are cancelled and
Temporal retries them elsewhere or later.

The LLM settings (LLM_BASE_URL, LLM_API_KEY, LLM_MODEL, LLM_STREAM), the tools' workspace
(AGENT_WORKSPACE), your own tools (AGENT_TOOLS, AGENT_BUILTIN_TOOLS) and the MCP servers
(AGENT_MCP_CONFIG) are read here only; none of them enters workflow input, events or history.

At start the worker checks once whether bubblewrap works here and says so in its ready line:
`sandbox=bwrap` or `sandbox=none`, `run_command=on` or `off` (without a sandbox, commands are
not offered unless AGENT_SANDBOX=off says to run them unsandboxed; AGENT_SANDBOX=required refuses
to start), and `limits=cgroup2`, `cgroup1` or `rlimit` (how the process and memory limits of a
command are enforced). AGENT_COMMAND_NETWORK=true without a working uplink (slirp4netns) stops
it. AGENT_METRICS_ADDRESS=HOST:PORT serves Prometheus metrics (the SDK's and the agent's) at
`http://HOST:PORT/metrics`, and the ready line names that URL; OTEL_EXPORTER_OTLP_ENDPOINT
exports traces over OTLP/HTTP (docs/operations.md). A tool that cannot be loaded, two tools with
one name, an MCP server that does not start, or a rule of AGENT_POLICY_FILE that matches none of
the tools (checked once the MCP servers' tools are known): one line saying which, and no start.
The ready line ends with what is on (`switched_on`): `policy=FILE(N rules)`, `encryption=`,
`notifications=` (scheme, host and port), `escalation=`, `budget_groups=`, `approvers=FILE(N
people)`. A bad line of AGENT_APPROVERS_FILE, or an enforced approver rule that no one in it
could meet: one line saying which, and no start. Before anything, one
warning line for each AGENT_*/LLM_* variable that is no setting (`AGENT_POLCY_FILE`), naming the
nearest; the worker starts without it.

`--processes N` (or AGENT_WORKER_PROCESSES=N) runs N copies of this worker, each a process of its
own with its own client, on the same task queue: one Python worker uses one core for its workflow
code (`runtime.worker_processes`). With AGENT_METRICS_ADDRESS=HOST:PORT, copy i serves its metrics
on PORT + i, and the ready line of the copies lists every address.

Everything but the reading of settings and the process's life lives in `activities.plugin`
(`AgentPlugin`, `run_worker`), so an application embeds the agent in its own worker instead.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

from temporalio.runtime import Runtime
from temporalio.service import RPCError

from activities.plugin import (
    AgentPlugin,
    command_policy,
    heartbeat_tuning,
    no_sandbox_warning,
    run_worker,
)
from activities.tools.limits import enforcement, enforcement_gap
from activities.tools.mcp import McpStartError
from activities.tools.sandbox import NetworkUnavailable, SandboxUnavailable
from runtime.connect import connect, connect_config, data_converter
from runtime.metrics_runtime import (
    METRICS_ADDRESS_ENV,
    copy_addresses,
    metrics_address,
    metrics_runtime,
)
from runtime.process import exit_now
from runtime.sealed_logs import seal_logged_failures
from runtime.search_attributes import ensure_search_attributes
from runtime.setting_error import SettingError
from runtime.settings import Settings, shown_notify_url, warn_unknown_settings
from runtime.shown_commands import worker_command
from runtime.tracing import WORKER_SERVICE, install_tracing
from runtime.worker_processes import FLAG, process_count, run_copies

__all__ = ["AgentPlugin", "Settings", "heartbeat_tuning", "run_worker"]


def _say(line: str) -> None:
    print(f"worker: {line}", file=sys.stderr, flush=True)


async def _main() -> int:
    warn_unknown_settings(prefix="worker: ")  # AGENT_POLCY_FILE: say so, and start without it
    try:
        settings = Settings.from_env()
    except ValueError as err:  # a bad setting: say which
        _say(str(err))
        return 2
    try:
        commands = command_policy(settings)
    except SandboxUnavailable as err:
        _say(
            f"AGENT_SANDBOX=required, but run_command cannot be sandboxed here ({err});"
            " not starting"
        )
        return 2
    except NetworkUnavailable as err:
        _say(f"{err}; not starting")
        return 2
    if commands.sandbox == "none":
        print(no_sandbox_warning(commands), file=sys.stderr, flush=True)
    gap = enforcement_gap()
    if gap is not None:
        _say(f"warning: {gap}")

    address = str(connect_config().get("target_host"))
    try:
        data_converter()
        metrics = metrics_address()  # AGENT_METRICS_ADDRESS
        install_tracing(WORKER_SERVICE)  # OTEL_EXPORTER_OTLP_ENDPOINT and the other OTEL_*
        seal_logged_failures(os.environ)  # with a key: no failure's message in the log
        runtime = metrics_runtime(metrics) if metrics is not None else None
    except SettingError as err:  # a key, a store, an address or a trace setting: say which
        _say(str(err))
        return 2
    try:
        plugin = AgentPlugin(settings=settings, commands=commands)
    except ValueError as err:  # a tool that cannot be loaded, a clash, a bad MCP config file
        _say(f"{err}; not starting")
        return 2
    try:
        await plugin.start()
    except McpStartError as err:
        _say(f"{err}; not starting")
        return 1
    except ValueError as err:  # an MCP tool whose name is taken, a rule that cannot match
        _say(f"{err}; not starting")
        return 2
    try:
        isolation = (
            f"run_command={'on' if commands.runs_commands else 'off'}"
            f" limits={enforcement()} sandbox={commands.sandbox}"
        )
        if metrics is not None:
            isolation += f" metrics=http://{metrics}/metrics"
        return await _serve(plugin, settings, address, isolation, runtime)
    finally:
        await plugin.aclose()


async def _serve(
    plugin: AgentPlugin, settings: Settings, address: str, isolation: str, runtime: Runtime | None
) -> int:
    try:
        client = await connect(runtime=runtime)
    except Exception as err:  # connection problems are the user's to fix: say so in one line
        _say(f"cannot reach Temporal at {address}: {err}")
        return 1
    try:
        await ensure_search_attributes(client)
    except RPCError as err:  # e.g. Temporal Cloud: workers may not add search attributes
        _say(
            f"could not register the search attributes AgentStatus and"
            f" AgentPendingApprovals ({err.message}); AgentWorkflow sets them, so create them"
            f" once for this namespace"
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    rules = len(plugin.policy.enforced) + len(plugin.policy.defaults)
    people = None if plugin.approvers is None else len(plugin.approvers)

    def ready(queue: str) -> None:
        print(
            f"worker ready task_queue={queue} address={address}"
            f" provider={settings.provider} workspace={settings.workspace}"
            f" tools={len(plugin.tool_names)} {isolation}"
            f" {switched_on(settings, rules, people)}",
            flush=True,
        )

    await run_worker(client, settings, stop=stop, ready=ready, plugin=plugin)
    print("worker stopped", flush=True)
    return 0


RUNS_OWN = "(run's)"
"""In the ready line, half of the escalation defaults left to each run's options."""


def switched_on(settings: Settings, rules: int, people: int | None = None) -> str:
    """The end of the ready line: what is on, in its `key=value` style. The policy file and its
    number of `rules`, encryption, where notifications go (scheme, host and port: never the path,
    which may be a token), the escalation defaults, the groups who may grant tokens, the
    approvers file with its number of `people`, and whether runs may delegate to sub-agents (and
    how deep)."""
    policy = f"{settings.policy_file}({rules} rule{'' if rules == 1 else 's'})"
    approvers = "none"
    if settings.approvers_file is not None and people is not None:
        approvers = f"{settings.approvers_file}({people} {'person' if people == 1 else 'people'})"
    notify = settings.notify_url
    after, groups = settings.escalate_after_seconds, settings.escalate_to
    escalation = "off"  # a run's own options may still escalate (a default half set: theirs)
    if after is not None or groups:
        when = f"{after:g}s" if after is not None else RUNS_OWN
        escalation = f"after {when} to {','.join(groups) or RUNS_OWN}"
    fields = {
        "policy": policy if settings.policy_file is not None else "none",
        "encryption": "on" if settings.encryption_on else "off",
        "notifications": f"on({shown_notify_url(notify, rest=False)})" if notify else "off",
        "escalation": escalation,
        "budget_groups": ",".join(settings.budget_groups) or "any",
        "approvers": approvers,
        "sub_agents": f"on(depth {settings.max_depth})" if settings.sub_agents else "off",
    }
    return " ".join(f"{key}={value}" for key, value in fields.items())


def _copies_metrics(count: int) -> tuple[list[dict[str, str]], str]:
    """With AGENT_METRICS_ADDRESS=HOST:PORT, copy i's own address (PORT + i: one port is bound
    once) and the end of the ready line naming them all; else nothing."""
    address = metrics_address()
    if address is None:
        return [], ""
    addresses = copy_addresses(address, count)
    urls = " ".join(f"http://{each}/metrics" for each in addresses)
    return [{METRICS_ADDRESS_ENV: each} for each in addresses], f" metrics={urls}"


def _processes(argv: list[str]) -> int:
    """The number of worker processes to run (`--processes`, AGENT_WORKER_PROCESSES)."""
    parser = argparse.ArgumentParser(prog=worker_command(), description=__doc__.split("\n")[0])
    parser.add_argument(
        FLAG, metavar="N", help="run N copies of this worker, each a process of its own"
    )
    return process_count(parser.parse_args(argv).processes, os.environ)


if __name__ == "__main__":
    try:
        count = _processes(sys.argv[1:])
        own, note = _copies_metrics(count) if count > 1 else ([], "")
    except SettingError as err:
        _say(str(err))
        exit_now(2)
    command = [sys.executable, str(Path(__file__).resolve())]
    try:
        exit_code = asyncio.run(
            run_copies(count, command, os.environ, own, note) if count > 1 else _main()
        )
    except KeyboardInterrupt:
        exit_code = 130
    exit_now(exit_code)
