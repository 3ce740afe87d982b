"""The network a sandboxed process may have: none (its own empty network namespace, the default),
or its own namespace with an outside uplink through slirp4netns (`AGENT_COMMAND_NETWORK=true`, an
MCP server's `"network": true`). Never the host's: a shared network namespace would give the
command the host's loopback services (Temporal, the web inbox, the codec server).

slirp4netns (Debian/Ubuntu package `slirp4netns`) is attached by `sandbox_launch.py` with
`--disable-host-loopback`: from inside, 10.0.2.2 and 127.0.0.1 never reach the host's loopback;
other addresses are reached through the host's own sockets, as the worker's user. (pasta, from
`passt`, would do the same job; Debian 12's build crashes on the first TCP connection, so the
worker does not use it.)
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path

LAUNCHER = Path(__file__).with_name("sandbox_launch.py")
PROBE_TIMEOUT_SECONDS = 20.0


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


def _probe(bwrap: str, slirp: str) -> str | None:
    """Run a command with an uplink: None when its namespace came up with the tap device."""
    from activities.tools.sandbox import bwrap_argv, probe

    check = ["/bin/sh", "-c", "grep -q tap0: /proc/net/dev"]
    return probe(
        "slirp4netns",
        lambda ws: launcher_argv(bwrap_argv(bwrap, ws, check), uplink=slirp),
        seconds=PROBE_TIMEOUT_SECONDS,
    )


@cache
def uplink_status(bwrap: str) -> tuple[str | None, str]:
    """(the slirp4netns executable or None, why not): probed once per process."""
    slirp = shutil.which("slirp4netns")
    if slirp is None:
        return None, "slirp4netns is not installed (Debian/Ubuntu package: slirp4netns)"
    problem = _probe(bwrap, slirp)
    if problem is not None:
        return None, problem
    return slirp, ""


def require_uplink(bwrap: str, who: str) -> str:
    """The slirp4netns executable, or NetworkUnavailable naming `who` wanted it."""
    slirp, reason = uplink_status(bwrap)
    if slirp is None:
        raise NetworkUnavailable(
            f"{who} asks for the network, but sandboxed processes cannot get their own network"
            f" here ({reason}), and the host's network would expose its loopback services"
        )
    return slirp
