"""The `AGENT_MCP_CONFIG` file: the common `mcpServers` format, checked entry by entry so that a
mistake stops the worker's start with one line naming the server and the field.

    {"mcpServers": {
        "time": {"command": "mcp-server-time", "args": [], "env": {}},
        "fetch": {"command": "mcp-server-fetch", "network": true},
        "tools": {"command": "python3", "args": ["/srv/tools/server.py"],
                  "read_only": ["/srv/tools"]},
        "tickets": {"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "…"},
                    "approval": "always"}}}

A stdio server runs in the sandbox: `"network": true` gives it its own network with an uplink
(never the host's), `"read_only"` names absolute paths it may read besides the system folders,
the workspace and its own program.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Approval = Literal["always", "never", "annotations"]
APPROVALS: tuple[Approval, ...] = ("always", "never", "annotations")
SERVER_NAME = re.compile(r"[a-zA-Z0-9_-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class McpConfigError(ValueError):
    """The `AGENT_MCP_CONFIG` file cannot be used (one line saying why)."""


@dataclass(frozen=True)
class McpServerConfig:
    """One entry of `mcpServers`: a stdio `command`, or a streamable-HTTP `url`."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    approval: Approval = "annotations"
    network: bool = False
    """A stdio server's sandbox gets its own network with an uplink (default: no network)."""
    read_only: tuple[str, ...] = ()
    """Absolute paths a stdio server may read in its sandbox, besides what it always sees."""

    def __post_init__(self) -> None:
        where = f"MCP server '{self.name}'"
        if not SERVER_NAME.fullmatch(self.name):
            raise McpConfigError(
                f"MCP server name {self.name!r} must match ^[a-zA-Z0-9_-]+$ (letters, digits,"
                " '_' and '-')"
            )
        if (self.command is None) == (self.url is None):
            raise McpConfigError(f'{where} needs either "command" (stdio) or "url" (HTTP)')
        if self.command is not None and (not self.command.strip() or "=" in self.command):
            raise McpConfigError(f'{where}: "command" must name a program')
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise McpConfigError(f'{where}: "url" must start with http:// or https://')
        for key in self.env:
            if not _ENV_NAME.fullmatch(key):
                raise McpConfigError(f'{where}: {key!r} in "env" is not a variable name')
        if self.approval not in APPROVALS:
            raise McpConfigError(
                f'{where}: "approval" must be one of {", ".join(APPROVALS)}, got {self.approval!r}'
            )
        if self.url is not None and (self.network or self.read_only):
            raise McpConfigError(f'{where}: "network" and "read_only" are for stdio servers')
        for path in self.read_only:
            if not os.path.isabs(path):
                raise McpConfigError(f'{where}: "read_only" path {path!r} is not absolute')
            if not os.path.exists(path):
                raise McpConfigError(f'{where}: "read_only" path {path!r} does not exist')


def _strings(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise McpConfigError(f"{what} must be a list of strings")
    return tuple(value)


def _string_map(value: object, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise McpConfigError(f"{what} must be an object of strings")
    return dict(value)


def parse_config(document: object, source: str = "AGENT_MCP_CONFIG") -> list[McpServerConfig]:
    """The servers of an `mcpServers` document (already parsed from JSON)."""
    if not isinstance(document, dict) or not isinstance(document.get("mcpServers"), dict):
        raise McpConfigError(f'{source} must hold a JSON object with an "mcpServers" object')
    servers: list[McpServerConfig] = []
    for name, entry in document["mcpServers"].items():
        where = f"MCP server '{name}'"
        if not isinstance(entry, dict):
            raise McpConfigError(f"{where} must be a JSON object")
        command = entry.get("command")
        url = entry.get("url")
        if command is not None and not isinstance(command, str):
            raise McpConfigError(f'{where}: "command" must be a string')
        if url is not None and not isinstance(url, str):
            raise McpConfigError(f'{where}: "url" must be a string')
        approval = entry.get("approval", "annotations")
        if approval not in APPROVALS:
            raise McpConfigError(
                f'{where}: "approval" must be one of {", ".join(APPROVALS)}, got {approval!r}'
            )
        network = entry.get("network", False)
        if not isinstance(network, bool):
            raise McpConfigError(f'{where}: "network" must be true or false')
        servers.append(
            McpServerConfig(
                name=str(name),
                command=command,
                args=_strings(entry.get("args", []), f'{where}: "args"'),
                env=_string_map(entry.get("env", {}), f'{where}: "env"'),
                url=url,
                headers=_string_map(entry.get("headers", {}), f'{where}: "headers"'),
                approval=approval,
                network=network,
                read_only=_strings(entry.get("read_only", []), f'{where}: "read_only"'),
            )
        )
    return servers


def load_config(path: Path) -> list[McpServerConfig]:
    """Read and check the `AGENT_MCP_CONFIG` file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise McpConfigError(f"AGENT_MCP_CONFIG: cannot read {path} ({err.strerror})") from None
    try:
        document = json.loads(text)
    except ValueError as err:
        raise McpConfigError(f"AGENT_MCP_CONFIG: {path} is not JSON ({err})") from None
    return parse_config(document, f"AGENT_MCP_CONFIG ({path})")
