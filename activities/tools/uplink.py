"""The network a sandboxed process may have: none (its own empty network namespace, the default),
or its own namespace with an outside uplink through slirp4netns (`AGENT_COMMAND_NETWORK=true`, an
MCP server's `"network": true`). Never the host's: a shared network namespace would give the
command the host's loopback services (Temporal, the web inbox, the codec server).

slirp4netns (Debian/Ubuntu package `slirp4netns`) is attached by `sandbox_launch.py` with
`--disable-host-loopback`: from inside, 10.0.2.2 and 127.0.0.1 never reach the host's loopback;
other addresses are reached through the host's own sockets, as the worker's user. (pasta, from
`passt`, would do the same job; Debian 12's build crashes on the first TCP connection, so the
worker does not use it.)

This module only builds the launcher's command line; whether an uplink works here is probed
by `sandbox.py` (`require_uplink`), which runs the probe in its own sandbox.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

LAUNCHER = Path(__file__).with_name("sandbox_launch.py")


class NetworkUnavailable(RuntimeError):
    """A sandbox should get an uplink, and no tool for it works here (one line saying why)."""


def launcher_argv(
    bwrap_argv: Sequence[str], *, uplink: str | None, cgroup_files: Sequence[str] = ()
) -> list[str]:
    """The command line that starts `bwrap_argv` through the launcher: joining `cgroup_files`
    first, with an uplink when `uplink` names slirp4netns."""
    argv = [sys.executable, "-I", "-S", str(LAUNCHER)]
    for path in cgroup_files:
        argv += ["--cgroup", path]
    if uplink is not None:
        argv += ["--slirp4netns", uplink]
    return [*argv, "--", *bwrap_argv]
