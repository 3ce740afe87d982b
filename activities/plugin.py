"""The agent as a Temporal worker plugin, and the worker every program of the project runs.

    plugin = AgentPlugin(tools=[my_tool], settings=Settings.from_env())
    client = await Client.connect("localhost:7233", plugins=[plugin])
    async with Worker(client, task_queue="agent", plugins=[plugin]): ...

`AgentPlugin` gives any `Worker` AgentWorkflow and AgentNotification, their activities
(`worker_setup`, `call_llm`, `summarize_conversation`, `execute_tool`, `notify`,
`verify_answer`) over the worker's tools (the built-ins,
`AGENT_TOOLS`, the plugin's `tools`, the `AGENT_MCP_CONFIG` servers' tools), the MCP servers
running for as long as the worker runs, and the heartbeat tuning that lets an immediate cancel
reach a running activity; and it gives any `Client` the project's data converter (pydantic, and
the encryption codec when a key is set) unless it has one of that kind already. For operators
(`activities.worker_telemetry`): the gauge of runs waiting for a person on the worker's metrics,
and with OTEL_EXPORTER_OTLP_ENDPOINT the tracing interceptor on the client and worker.
`run_worker` is the worker of `worker.py`, the demo and the tests, built through the plugin.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, TypedDict

from temporalio.activity import _Definition
from temporalio.client import Client, ClientConfig
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker, WorkerConfig

from activities.agent_activities import AgentActivities
from activities.policy_file import POLICY_FILE_ENV, load_policy_file
from activities.sandbox_runner import workflow_runner
from activities.tools import Tool, ToolRegistry, build_default_registry
from activities.tools.loading import ToolCatalog, load_tools
from activities.tools.mcp import McpServers
from activities.tools.mcp_sandbox import ServerSandbox
from activities.tools.sandbox import CommandLimits, CommandPolicy, choose_policy
from activities.worker_telemetry import (
    bind_worker_gauge,
    with_client_tracing,
    with_worker_telemetry,
)
from runtime.approvers import AnswerVerifier, ApproversFile, load_approvers
from runtime.codec import EncryptionCodec
from runtime.connect import data_converter, task_queue
from runtime.decryption_log import log_decryption_failures_once
from runtime.settings import Settings
from runtime.tracing import WORKER_SERVICE, install_tracing
from workflows import names
from workflows.contract.rules import WorkerPolicy
from workflows.converter import AgentPayloadConverter
from workflows.gate.quorum import unmeetable
from workflows.gate.rule_check import worker_policy_problem
from workflows.people.notifications import AgentNotification
from workflows.run.agent import AgentWorkflow

PLUGIN_NAME = "durable-agent.AgentPlugin"
GRACEFUL_SHUTDOWN_SECONDS = 10.0


class HeartbeatTuning(TypedDict):
    max_heartbeat_throttle_interval: timedelta
    default_heartbeat_throttle_interval: timedelta


def _activity_name(fn: Callable[..., Any]) -> str | None:
    """The name an activity function is registered under (None: not an activity)."""
    defn = _Definition.from_callable(fn)
    return None if defn is None else defn.name


def heartbeat_tuning() -> HeartbeatTuning:
    """Worker options for every worker that runs AgentWorkflow's activities. Cancellation
    reaches an activity only with a heartbeat the server answers; the SDK's default throttle (up
    to 80% of the heartbeat timeout) would delay an immediate cancel by many seconds."""
    return HeartbeatTuning(
        max_heartbeat_throttle_interval=timedelta(milliseconds=500),
        default_heartbeat_throttle_interval=timedelta(milliseconds=500),
    )


def command_policy(settings: Settings) -> CommandPolicy:
    """How `run_command` and the MCP stdio servers run on this machine (raises
    SandboxUnavailable when required, NetworkUnavailable when the network has no uplink)."""
    return choose_policy(
        settings.sandbox,
        network=settings.command_network,
        env_names=settings.command_env,
        limits=CommandLimits(settings.command_max_processes, settings.command_max_memory_mb),
        private=(settings.resolved_state_dir,),
    )


def no_sandbox_warning(policy: CommandPolicy) -> str:
    if not policy.runs_commands:
        return (
            f"worker: warning: commands cannot be sandboxed here ({policy.reason}), so"
            " run_command is not offered and MCP stdio servers do not start; install bubblewrap,"
            " or set AGENT_SANDBOX=off to run them unsandboxed with the worker's rights"
        )
    passed = ", ".join(["PATH", "HOME", "LANG", *policy.env_names])
    return (
        f"worker: warning: run_command is not sandboxed ({policy.reason}): commands run as this"
        f" user with only {passed} in their environment and are killed with their process group"
        " when they end, but can read and write whatever the worker can; install bubblewrap, or"
        " set AGENT_SANDBOX=required to refuse to start without it"
    )


def offered_builtins(registry: ToolRegistry, policy: CommandPolicy) -> list[Tool]:
    """The built-in tools the model is offered: `run_command` only where commands may run."""
    found = (registry.get(name) for name in registry.names)
    return [t for t in found if t is not None and (policy.runs_commands or t.name != "run_command")]


def is_agent_converter(converter: DataConverter) -> bool:
    """Whether `converter` is the agent's (`runtime.connect.data_converter()`'s kind)."""
    return issubclass(converter.payload_converter_class, AgentPayloadConverter) and isinstance(
        converter.payload_codec, EncryptionCodec
    )


def agent_converter(existing: DataConverter | None) -> DataConverter:
    """The converter the plugin gives a client or replayer: the one it has when that is the
    agent's already (e.g. built with a key of its own), else the agent's from the environment
    (SettingError: a key or store setting that cannot be used)."""
    if existing is not None and is_agent_converter(existing):
        return existing
    return data_converter()


class AgentPlugin(SimplePlugin):
    """AgentWorkflow and its activities for any Worker; the data converter for any Client.

    `tools`: your own `Tool`s, offered beside the built-ins (unless `settings.builtin_tools` is
    off), the `AGENT_TOOLS` ones and the MCP servers' (`settings.mcp_config`). Two tools with
    one name raise ToolLoadError here (or, for an MCP tool, when the servers start).
    `settings`: default `Settings.from_env()`. `commands`: how `run_command` runs (default: from
    the settings, probed now). `activities`: register these instead of the agent's own (a
    test's stand-ins); no tools are loaded then.

    Built from `SimplePlugin`'s parameters: the converter and the activities are callables
    applied when a client or worker is configured, and the MCP servers run as the `run_context`
    of each worker given the plugin: they start with `start()` (or when that worker runs) and
    stop with `aclose()` (or when that worker stops). Use one plugin per worker.
    """

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        settings: Settings | None = None,
        *,
        commands: CommandPolicy | None = None,
        activities: Sequence[Callable[..., Any]] | None = None,
    ) -> None:
        super().__init__(
            PLUGIN_NAME,
            data_converter=agent_converter,
            workflows=[AgentWorkflow, AgentNotification],
            workflow_runner=workflow_runner,
            activities=self._with_activities,
            run_context=self._running,
        )
        install_tracing(WORKER_SERVICE)  # OTEL_EXPORTER_OTLP_ENDPOINT: traces (once a process)
        self._given_activities = activities
        self._settings = settings
        self._catalog: ToolCatalog | None = None
        self._mcp: McpServers | None = None
        self._started = False
        self._mcp_tools_added = False
        self._agent_activities: list[AgentActivities] = []
        self._policy = WorkerPolicy()
        self._approvers: ApproversFile | None = None
        self.commands: CommandPolicy | None = None
        """How commands and MCP stdio servers run (None with `activities=…`)."""
        if activities is None:
            self._settings = settings = settings if settings is not None else Settings.from_env()
            if settings.approvers_file is not None:  # a bad line: ApproversFileError
                self._approvers = load_approvers(settings.approvers_file)
            if settings.policy_file is not None:  # a missing or invalid file: ValueError
                self._policy = load_policy_file(settings.policy_file)
                self._check_approver_rules(settings.policy_file)
            self._catalog = ToolCatalog()
            policy = commands if commands is not None else command_policy(settings)
            self.commands = policy
            if settings.builtin_tools:
                builtin = build_default_registry(
                    settings.workspace,
                    command_timeout_seconds=settings.command_timeout_seconds,
                    commands=policy,
                )
                self._catalog.add(offered_builtins(builtin, policy), "built-in")
            for spec, loaded in load_tools(settings.tools):
                self._catalog.add(loaded, f"AGENT_TOOLS {spec}")
            self._catalog.add(tools, "AgentPlugin(tools=…)")
            if settings.mcp_config is not None:
                sandbox = ServerSandbox(policy, settings.workspace)
                self._mcp = McpServers.from_file(settings.mcp_config, sandbox=sandbox)

    def _check_approver_rules(self, policy_file: object) -> None:
        """An enforced approver rule needs the approvers file, and people in its groups: one no
        one could meet is a ValueError naming the file and the rule."""
        rules = self._policy.enforced
        if not any(rule.approvers is not None for rule in rules):
            return
        if self._approvers is None:
            raise ValueError(
                f"{POLICY_FILE_ENV} {policy_file}: a rule names approvers, whose signed answers"
                " the worker verifies with their keys: set AGENT_APPROVERS_FILE"
            )
        problem = unmeetable(rules, self._approvers.group_sizes(), origin="enforced")
        if problem is not None:
            raise ValueError(
                f"{POLICY_FILE_ENV} {policy_file}: {problem} (AGENT_APPROVERS_FILE"
                f" {self._approvers.path})"
            )

    @property
    def approvers(self) -> ApproversFile | None:
        """The worker's people: `AGENT_APPROVERS_FILE`'s, none without one."""
        return self._approvers

    @property
    def policy(self) -> WorkerPolicy:
        """The worker's rules: `AGENT_POLICY_FILE`'s, none without one."""
        return self._policy

    @property
    def registry(self) -> ToolRegistry:
        """The worker's tools (the MCP ones once the servers have started)."""
        if self._catalog is None:
            raise RuntimeError("AgentPlugin(activities=…) holds no tools")
        return self._catalog.registry

    @property
    def tool_names(self) -> list[str]:
        """The names the model is offered (the MCP ones once the servers have started)."""
        return [] if self._catalog is None else self._catalog.registry.names

    async def start(self) -> None:
        """Start the MCP servers and add their tools (McpStartError names a server that did not
        start in time; ToolLoadError a name clash), then check the worker's rules against every
        tool (ValueError: a rule of `AGENT_POLICY_FILE` that can never match). Does nothing the
        second time."""
        if self._started:
            return
        if self._mcp is not None and self._catalog is not None:
            await self._mcp.start()
            if not self._mcp_tools_added:  # a second start (after aclose) reuses the Tools
                try:
                    self._catalog.add_groups(self._mcp.tools())
                except BaseException:
                    await self._mcp.aclose()
                    raise
                self._mcp_tools_added = True
        try:
            self._check_policy()
        except BaseException:
            if self._mcp is not None:
                await self._mcp.aclose()
            raise
        self._started = True

    def _check_policy(self) -> None:
        """The worker's rules against all its tools (the MCP ones are known only now): a rule
        that can never match is a ValueError naming the file and the rule."""
        if self._catalog is None or self._settings is None:
            return
        problem = worker_policy_problem(self._policy, self._catalog.registry.specs())
        if problem is not None:
            raise ValueError(f"{POLICY_FILE_ENV} {self._settings.policy_file}: {problem}")

    async def aclose(self) -> None:
        """Stop the MCP servers and close the activities' HTTP clients."""
        if self._mcp is not None:
            await self._mcp.aclose()
        for acts in self._agent_activities:
            await acts.aclose()
        self._agent_activities.clear()
        self._started = False

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        """Around a worker's run: the MCP servers up, and down again after, unless they were
        started before (`start()`), whose caller then stops them."""
        started_here = not self._started
        await self.start()
        try:
            yield
        finally:
            if started_here:
                await self.aclose()

    def _with_activities(
        self, existing: Sequence[Callable[..., Any]] | None
    ) -> list[Callable[..., Any]]:
        """A worker's activities with the agent's appended: the given stand-ins, or one
        `AgentActivities` per worker over the plugin's tools (closed by `aclose()`)."""
        if self._given_activities is not None:
            given = [*(existing or []), *self._given_activities]
            return [*given, *self._verifier(given)]
        assert self._catalog is not None and self._settings is not None
        acts = AgentActivities(
            None,
            self._settings,
            self._catalog.registry,
            policy=self._policy,
            approvers=self._approvers,
        )
        self._agent_activities.append(acts)
        return [*(existing or []), *acts.all(), *self._verifier(existing or [])]

    def _verifier(self, given: Sequence[Callable[..., Any]]) -> list[Callable[..., Any]]:
        """`verify_answer` over the worker's `AGENT_APPROVERS_FILE` (unless a stand-in of that
        name is given): the workflow checks each signed decision with it, as a local
        activity."""
        if any(_activity_name(fn) == names.ACTIVITY_VERIFY_ANSWER for fn in given):
            return []
        if self._approvers is None:
            settings = self._settings if self._settings is not None else Settings.read()
            if settings.approvers_file is not None:
                self._approvers = load_approvers(settings.approvers_file)
        return [AnswerVerifier(self._approvers).verify_answer]

    def configure_client(self, config: ClientConfig) -> ClientConfig:
        config = super().configure_client(config)
        config["interceptors"] = with_client_tracing(config.get("interceptors") or [])
        return config

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """What no `SimplePlugin` parameter can give: the converter guard and the telemetry,
        which need the worker's client and queue, and the heartbeat tuning (the workflows and
        activities come from the parameters, applied by `super()`)."""
        client = config["client"]
        if not is_agent_converter(client.data_converter):
            raise ValueError(
                "AgentPlugin: the worker's client does not use the agent's data converter;"
                " connect it with plugins=[AgentPlugin(...)] (or runtime.connect.connect())"
            )
        config = super().configure_worker(config)
        config["interceptors"] = with_worker_telemetry(client, config.get("interceptors") or [])
        bind_worker_gauge(client, config["task_queue"])
        tuning = heartbeat_tuning()
        for key in ("max_heartbeat_throttle_interval", "default_heartbeat_throttle_interval"):
            current: object = config.get(key)
            wanted = tuning[key]
            if not isinstance(current, timedelta) or current > wanted:
                config[key] = wanted
        return config


async def run_worker(
    client: Client,
    settings: Settings,
    *,
    queue: str | None = None,
    stop: asyncio.Event | None = None,
    ready: Callable[[str], None] | None = None,
    commands: CommandPolicy | None = None,
    tools: Iterable[Tool] = (),
    plugin: AgentPlugin | None = None,
) -> None:
    """Run the agent's worker on `queue` (default: AGENT_TASK_QUEUE or `agent`) until `stop`.

    `ready(queue)` is called once the worker polls. Without `stop`, runs until cancelled.
    `commands`: how `run_command` runs (default: from the settings, probed now). `plugin`: one
    built already (its MCP servers may be running); else one is built from the settings,
    `commands` and `tools`. The plugin is closed (MCP servers stopped) when the worker stops.
    """
    queue = queue or task_queue()
    stop = stop or asyncio.Event()
    log_decryption_failures_once()
    if plugin is None:
        plugin = AgentPlugin(tools, settings, commands=commands)
    try:
        await plugin.start()
        worker = Worker(
            client,
            task_queue=queue,
            plugins=[plugin],
            graceful_shutdown_timeout=timedelta(seconds=GRACEFUL_SHUTDOWN_SECONDS),
        )
        async with worker:
            if ready is not None:
                ready(queue)
            await stop.wait()
    finally:
        await plugin.aclose()
