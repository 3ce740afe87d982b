"""Where `run_command` (and every MCP stdio server) runs: inside bubblewrap when it works on this
machine; without it, commands are not offered unless `AGENT_SANDBOX=off` says to run them as a
plain process group. Either way with an allow-listed environment and resource limits (`limits`).

Approval decides whether a command runs; this module decides what it can reach. In the sandbox
a process sees its own processes only (a new PID namespace and its own `/proc`, so never the
worker or its environment), sees only the system folders and the workspace (`sandbox_layout`:
never the state folder, the workspace's parent, the worker's working directory or a home
folder), can write only the workspace and its private `/tmp`, has its own network namespace
(empty, or with an uplink that keeps the host's loopback out: `uplink`), and everything it
started ends when it ends.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

from activities.tools.limits import (
    ADDRESS_SPACE_BYTES,
    FILE_SIZE_BYTES,
    OPEN_FILES,
    CommandLimits,
    limits_preexec,
)
from activities.tools.sandbox_layout import mask_args, private_paths, system_args, visible_sources
from activities.tools.uplink import NetworkUnavailable, launcher_argv
from runtime.modes import SandboxMode

__all__ = [
    "ADDRESS_SPACE_BYTES",
    "FILE_SIZE_BYTES",
    "OPEN_FILES",
    "CommandLimits",
    "CommandPolicy",
    "NetworkUnavailable",
    "SandboxUnavailable",
    "bwrap_argv",
    "bwrap_status",
    "choose_policy",
    "command_env",
    "limits_preexec",
]

SandboxKind = Literal["bwrap", "none"]

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_LANG = "C.UTF-8"
ALWAYS_PASSED = ("PATH", "HOME", "LANG")
"""The variables every command gets (HOME is the workspace); AGENT_COMMAND_ENV adds names."""
SHELL = "/bin/sh"
"""The one shell every command runs with (the sandbox's), never the worker's `$SHELL`: a rule
means the same command on every machine."""

PROBE_TIMEOUT_SECONDS = 15.0
UPLINK_PROBE_TIMEOUT_SECONDS = 20.0
"""slirp4netns takes longer to come up than bwrap alone."""


class SandboxUnavailable(RuntimeError):
    """`AGENT_SANDBOX=required`, and bubblewrap does not work on this machine."""


@dataclass(frozen=True)
class CommandPolicy:
    """How commands run: the isolation, the network, the extra environment names, the limits."""

    sandbox: SandboxKind
    network: bool = False
    """Sandboxed: the process's own network namespace gets an uplink (never the host's)."""
    env_names: tuple[str, ...] = ()
    bwrap: str | None = field(default=None, repr=False)
    """The bwrap executable (with `sandbox="bwrap"`)."""
    reason: str = ""
    """Without a sandbox: why (for the worker's warning)."""
    runs_commands: bool = True
    """False when there is no sandbox and nobody said `AGENT_SANDBOX=off`: `run_command` is not
    offered, refuses to run, and MCP stdio servers do not start."""
    limits: CommandLimits = field(default_factory=CommandLimits)
    uplink: str | None = field(default=None, repr=False)
    """slirp4netns, when `network` (found at start; looked up at first use otherwise)."""
    private: tuple[Path, ...] = ()
    """More of the worker's places never shown (the state folder), besides the folder the
    workspace sits in, the working directory and the home folder."""

    def uplink_tool(self) -> str | None:
        """slirp4netns for a sandboxed process with the network on; None without the network.
        Raises NetworkUnavailable rather than ever sharing the host's network."""
        if not self.network or self.sandbox != "bwrap" or self.bwrap is None:
            return None
        return self.uplink or require_uplink(self.bwrap, "AGENT_COMMAND_NETWORK=true")


# ---- environment ----


def command_env(
    workspace: Path, names: Sequence[str] = (), environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment a command gets: PATH, HOME (the workspace), LANG, and the variables
    `names` lists, taken from the worker's environment where it has them. Nothing else: the
    worker's secrets (LLM key, Temporal credentials, cloud keys) are not in it by construction."""
    env = os.environ if environ is None else environ
    chosen = {
        "PATH": env.get("PATH") or DEFAULT_PATH,
        "HOME": str(workspace),
        "LANG": env.get("LANG") or DEFAULT_LANG,
    }
    for name in names:
        if name not in ALWAYS_PASSED and name in env:
            chosen[name] = env[name]
    return chosen


# ---- bubblewrap ----


def bwrap_argv(
    bwrap: str,
    workspace: Path,
    argv: Sequence[str],
    *,
    private: Sequence[Path] = (),
    read_only: Sequence[str] = (),
    unset_env: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """The bubblewrap command line that runs `argv` in `workspace`.

    A new user, PID, IPC, UTS, cgroup and network namespace; all capabilities dropped; a root
    that holds only the system folders (read-only, `/etc` without its private files), its own
    `/proc`, `/dev`, `/tmp` and `/run`, the `read_only` paths, and the workspace read-write at
    its own path; an empty folder over the worker's places that lie in a shown folder
    (`private`, the workspace's parent, the working directory, HOME). `--die-with-parent` and the
    PID namespace end every process the command started when bwrap ends, which it does when the
    command exits.
    """
    ws = os.path.realpath(workspace)
    places = private_paths(Path(ws), private, environ)
    extra = [os.path.realpath(p) for p in read_only]
    system = system_args()
    masks = mask_args(places, visible_sources(), ws)
    extra_masks = mask_args(places, extra, ws)
    args = [
        bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--unshare-net",
        "--cap-drop",
        "ALL",
        *system,
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/run",
        *masks,
    ]
    for path in extra:
        args += ["--ro-bind", path, path]
    args += extra_masks
    for name in unset_env:
        args += ["--unsetenv", name]
    args += ["--bind", ws, ws, "--remount-ro", "/"]
    empty = [system[i + 1] for i, arg in enumerate(system) if arg == "--tmpfs"]
    for mask in [*empty, *masks[1::2], *extra_masks[1::2]]:  # the empty folders stay empty
        args += ["--remount-ro", mask]
    return [*args, "--chdir", ws, "--", *argv]


def probe(
    what: str,
    argv_in: Callable[[Path], list[str]],
    expect: str | None = None,
    seconds: float = PROBE_TIMEOUT_SECONDS,
) -> str | None:
    """Run a probe command (`argv_in(workspace)`, in a throwaway workspace): None when it
    exited 0 (and printed `expect`, if given), else why `what` does not work here."""
    with tempfile.TemporaryDirectory(prefix="agent-sandbox-probe-") as folder:
        workspace = Path(folder).resolve()
        try:
            done = subprocess.run(
                argv_in(workspace),
                capture_output=True,
                text=True,
                timeout=seconds,
                env=command_env(workspace),
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"{what} could not run: {err}"
    if done.returncode != 0 or (expect is not None and done.stdout.strip() != expect):
        detail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return f"{what} does not work here: {detail[:200]}"
    return None


def probe_bwrap(bwrap: str) -> str | None:
    """Run a trivial command in the sandbox: None when it works, else why not (bwrap fails in
    containers that do not allow user namespaces, for example)."""
    return probe("bwrap", lambda ws: bwrap_argv(bwrap, ws, [SHELL, "-c", "echo ok"]), "ok")


@cache
def bwrap_status() -> tuple[str | None, str]:
    """(the bwrap executable or None, why not): probed once per process."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "bwrap is not installed (Debian/Ubuntu package: bubblewrap)"
    problem = probe_bwrap(bwrap)
    if problem is not None:
        return None, problem
    return bwrap, ""


# ---- the uplink (slirp4netns) ----


def _probe_uplink(bwrap: str, slirp: str) -> str | None:
    """Run a command with an uplink: None when its namespace came up with the tap device."""
    check = ["/bin/sh", "-c", "grep -q tap0: /proc/net/dev"]
    return probe(
        "slirp4netns",
        lambda ws: launcher_argv(bwrap_argv(bwrap, ws, check), uplink=slirp),
        seconds=UPLINK_PROBE_TIMEOUT_SECONDS,
    )


@cache
def uplink_status(bwrap: str) -> tuple[str | None, str]:
    """(the slirp4netns executable or None, why not): probed once per process."""
    slirp = shutil.which("slirp4netns")
    if slirp is None:
        return None, "slirp4netns is not installed (Debian/Ubuntu package: slirp4netns)"
    problem = _probe_uplink(bwrap, slirp)
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


def choose_policy(
    mode: SandboxMode = "auto",
    *,
    network: bool = False,
    env_names: Sequence[str] = (),
    limits: CommandLimits | None = None,
    private: Sequence[Path] = (),
) -> CommandPolicy:
    """The policy for this machine. `auto`: bwrap when it works, else no commands; `required`:
    bwrap or SandboxUnavailable; `off`: never (commands run as a plain process group). With
    `network` and bwrap, the uplink must work too (else NetworkUnavailable)."""
    names, chosen, places = tuple(env_names), limits or CommandLimits(), tuple(private)
    if mode == "off":
        return CommandPolicy(
            "none", network, names, reason="AGENT_SANDBOX=off", limits=chosen, private=places
        )
    bwrap, reason = bwrap_status()
    if bwrap is None:
        if mode == "required":
            raise SandboxUnavailable(reason)
        return CommandPolicy(
            "none",
            network,
            names,
            reason=reason,
            runs_commands=False,
            limits=chosen,
            private=places,
        )
    uplink = require_uplink(bwrap, "AGENT_COMMAND_NETWORK=true") if network else None
    return CommandPolicy(
        "bwrap", network, names, bwrap=bwrap, uplink=uplink, limits=chosen, private=places
    )
