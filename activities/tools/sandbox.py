"""Where `run_command` runs: inside bubblewrap when it works on this machine, else as a plain
process group. Either way with an allow-listed environment and resource limits.

Approval decides whether a command runs; this module decides what it can reach. In the sandbox
a command sees its own processes only (a new PID namespace and its own `/proc`, so never the
worker or its environment), can write only the workspace (everything else is read-only, `/tmp`
is private, the worker's home folder and `/run` are hidden), has no network unless asked for,
and everything it started ends when it ends.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

SandboxKind = Literal["bwrap", "none"]
SandboxMode = Literal["auto", "required", "off"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "required", "off")

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_LANG = "C.UTF-8"
ALWAYS_PASSED = ("PATH", "HOME", "LANG")
"""The variables every command gets (HOME is the workspace); AGENT_COMMAND_ENV adds names."""

PROCESS_BUDGET = 256
"""How many processes a command may add to those the worker's user already has (the kernel
counts processes per user, so the limit is set relative to the count at start)."""
ADDRESS_SPACE_BYTES = 4 * 1024**3
"""Virtual memory per process (generous: runtimes such as node or the JVM reserve a lot)."""
FILE_SIZE_BYTES = 1024**3
"""The largest file a command may write."""
OPEN_FILES = 1024

PROBE_TIMEOUT_SECONDS = 15.0


class SandboxUnavailable(RuntimeError):
    """`AGENT_SANDBOX=required`, and bubblewrap does not work on this machine."""


@dataclass(frozen=True)
class CommandPolicy:
    """How commands run: the isolation, the network, the extra environment names."""

    sandbox: SandboxKind
    network: bool = False
    env_names: tuple[str, ...] = ()
    bwrap: str | None = field(default=None, repr=False)
    """The bwrap executable (with `sandbox="bwrap"`)."""
    reason: str = ""
    """Without a sandbox: why (for the worker's warning)."""


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


# ---- resource limits ----


def _user_processes() -> int:
    """How many processes this user has now (the kernel's RLIMIT_NPROC counts all of them)."""
    uid = os.getuid()
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat(follow_symlinks=False).st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


def limits_preexec(cpu_seconds: float) -> Callable[[], None]:
    """A function that sets the command's rlimits in the child, just before exec. It only calls
    `setrlimit` (no locks, no imports), which is what makes it safe in a threaded worker."""
    cpu = max(1, int(cpu_seconds) + 1)
    processes = _user_processes() + PROCESS_BUDGET
    wanted = [
        (resource.RLIMIT_NPROC, processes),
        (resource.RLIMIT_AS, ADDRESS_SPACE_BYTES),
        (resource.RLIMIT_FSIZE, FILE_SIZE_BYTES),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_NOFILE, OPEN_FILES),
    ]
    # Never raise a hard limit the worker already has lower (that would fail in the child).
    plan: list[tuple[int, int]] = []
    for which, value in wanted:
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        plan.append((which, value))

    def apply() -> None:
        for which, value in plan:
            resource.setrlimit(which, (value, value))

    return apply


# ---- bubblewrap ----


def _hidden_home(environ: Mapping[str, str]) -> list[str]:
    """Mount an empty folder over the worker's home (its dotfiles hold credentials: ssh keys,
    cloud and Temporal profiles). The workspace is bound afterwards, so one inside it stays."""
    home = environ.get("HOME") or ""
    real = os.path.realpath(home) if os.path.isabs(home) else ""
    if real in ("", "/") or not os.path.isdir(real):
        return []
    return ["--tmpfs", real]


def _resolver_folder() -> list[str]:
    """With the network on, keep DNS working when /etc/resolv.conf points into the hidden
    /run (systemd-resolved)."""
    target = os.path.realpath("/etc/resolv.conf")
    if target.startswith("/run/") and os.path.exists(target):
        folder = os.path.dirname(target)
        return ["--ro-bind", folder, folder]
    return []


def bwrap_argv(
    bwrap: str,
    workspace: Path,
    argv: Sequence[str],
    *,
    network: bool = False,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """The bubblewrap command line that runs `argv` in `workspace`.

    A new user, PID, IPC, UTS and cgroup namespace (and network, unless `network`); all
    capabilities dropped; the root file system read-only with its own `/proc`, `/dev` and `/tmp`;
    `/run` (local service sockets) and the worker's home hidden; the workspace bound read-write
    at the same path. `--die-with-parent` and the PID namespace end every process the command
    started when bwrap ends, which it does when the command exits.
    """
    env = os.environ if environ is None else environ
    ws = str(workspace)
    args = [
        bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    if not network:
        args.append("--unshare-net")
    args += [
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/run",
    ]
    if network:
        args += _resolver_folder()
    args += _hidden_home(env)
    args += ["--bind", ws, ws, "--chdir", ws, "--", *argv]
    return args


def probe_bwrap(bwrap: str) -> str | None:
    """Run a trivial command in the sandbox: None when it works, else why not (bwrap fails in
    containers that do not allow user namespaces, for example)."""
    with tempfile.TemporaryDirectory(prefix="agent-sandbox-probe-") as folder:
        workspace = Path(folder).resolve()
        argv = bwrap_argv(bwrap, workspace, ["/bin/sh", "-c", "echo ok"])
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=PROBE_TIMEOUT_SECONDS,
                env=command_env(workspace),
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"bwrap could not run: {err}"
    if done.returncode != 0 or done.stdout.strip() != "ok":
        detail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return f"bwrap does not work here: {detail[:200]}"
    return None


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


def choose_policy(
    mode: SandboxMode = "auto", *, network: bool = False, env_names: Sequence[str] = ()
) -> CommandPolicy:
    """The policy for this machine. `auto`: bwrap when it works; `required`: bwrap or
    SandboxUnavailable; `off`: never (commands run as a plain process group)."""
    names = tuple(env_names)
    if mode == "off":
        return CommandPolicy("none", network, names, reason="AGENT_SANDBOX=off")
    bwrap, reason = bwrap_status()
    if bwrap is None:
        if mode == "required":
            raise SandboxUnavailable(reason)
        return CommandPolicy("none", network, names, reason=reason)
    return CommandPolicy("bwrap", network, names, bwrap=bwrap)
