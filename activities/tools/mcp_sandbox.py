"""How an MCP stdio server is started: in the same kind of bubblewrap sandbox as a command.

A server's tools are the model's reach too: a read-only `git status` runs whatever hook or
`core.fsmonitor` a command planted in the workspace. So the server gets what a command gets and
no more: PATH, HOME (the workspace) and LANG plus its entry's `env`; the system folders, the
workspace (read-write, its working directory), its own program and installation, and the entry's
`read_only` paths; its own PID namespace and network namespace (with an uplink only when the
entry says `"network": true`); and, where the worker may create cgroups, a cgroup with the
commands' process and memory limits.

With `AGENT_SANDBOX=off` a server runs as before, unsandboxed, under `env -i` with PATH, HOME
and LANG of the worker plus its entry's `env`. Without a working sandbox and without that
setting, a stdio server does not start (the worker says so and does not start).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import mcp
from mcp.client.stdio import get_default_environment

from activities.tools.cgroups import CommandGroup, cgroup_support
from activities.tools.mcp_config import McpConfigError, McpServerConfig
from activities.tools.sandbox import CommandPolicy, bwrap_argv, command_env, require_uplink
from activities.tools.sandbox_layout import private_paths, program_paths
from activities.tools.uplink import NetworkUnavailable, launcher_argv

PASSED_ENVIRONMENT = ("PATH", "HOME", "LANG")
"""Unsandboxed (`AGENT_SANDBOX=off`): the worker's variables a stdio server gets."""


class ProgramNotFound(RuntimeError):
    """The entry's `command` is not on PATH (one line naming it)."""


@dataclass(frozen=True)
class ServerSandbox:
    """Where stdio servers run: the worker's command policy and its workspace."""

    policy: CommandPolicy
    workspace: Path

    @property
    def sandboxed(self) -> bool:
        return self.policy.sandbox == "bwrap" and self.policy.bwrap is not None

    def check(self, config: McpServerConfig) -> None:
        """McpConfigError when this server cannot run here as its entry says."""
        if config.command is None:
            return
        where = f"MCP server '{config.name}'"
        if not self.policy.runs_commands:
            raise McpConfigError(
                f"{where} must run in the sandbox, which does not work here"
                f" ({self.policy.reason}); set AGENT_SANDBOX=off to run MCP servers and commands"
                " unsandboxed"
            )
        if config.network and self.sandboxed:
            assert self.policy.bwrap is not None
            try:
                require_uplink(self.policy.bwrap, where)
            except NetworkUnavailable as err:
                raise McpConfigError(str(err)) from None

    def launch(
        self, config: McpServerConfig
    ) -> tuple[mcp.StdioServerParameters, CommandGroup | None]:
        """The process to start for this server, and the cgroup it joins (closed by the caller
        when the session ends)."""
        if not self.sandboxed:
            return unsandboxed_parameters(config), None
        return self._sandboxed(config)

    def _sandboxed(
        self, config: McpServerConfig
    ) -> tuple[mcp.StdioServerParameters, CommandGroup | None]:
        assert config.command is not None and self.policy.bwrap is not None
        workspace = self.workspace.resolve()
        env = {**command_env(workspace), **config.env}
        program = shutil.which(config.command, path=env["PATH"])
        if program is None:
            raise ProgramNotFound(f"{config.command!r} is not a program on PATH")
        private = private_paths(workspace, self.policy.private)
        shown = [*program_paths(program, env["PATH"], private), *config.read_only]
        unset = [name for name in get_default_environment() if name not in env]
        argv = bwrap_argv(
            self.policy.bwrap,
            workspace,
            [program, *config.args],
            private=self.policy.private,
            read_only=shown,
            unset_env=unset,
        )
        where = f"MCP server '{config.name}'"
        uplink = require_uplink(self.policy.bwrap, where) if config.network else None
        support = cgroup_support()
        group = None
        if support is not None:
            limits = self.policy.limits
            group = CommandGroup(support, limits.max_processes, limits.max_memory_mb)
        if group is not None or uplink is not None:
            joins = group.procs_files if group is not None else ()
            argv = launcher_argv(argv, uplink=uplink, cgroup_files=joins)
        parameters = mcp.StdioServerParameters(
            command=argv[0], args=argv[1:], env=env, cwd=str(workspace)
        )
        return parameters, group


def unsandboxed_parameters(config: McpServerConfig) -> mcp.StdioServerParameters:
    """Run the command under `env -i`: the SDK would pass on more of the worker's environment
    (LOGNAME, SHELL, TERM, USER); the server gets PATH, HOME, LANG and its entry's `env` only."""
    assert config.command is not None
    environment = {k: os.environ[k] for k in PASSED_ENVIRONMENT if k in os.environ}
    environment.update(config.env)
    program = shutil.which("env") or "/usr/bin/env"
    assignments = [f"{key}={value}" for key, value in environment.items()]
    return mcp.StdioServerParameters(
        command=program, args=["-i", *assignments, config.command, *config.args]
    )
