"""Starts one bubblewrap sandbox for the worker: joins the command's cgroups, and gives the
sandbox's own network namespace an uplink through slirp4netns when asked. A standalone script
(the standard library only), run as `python -I -S sandbox_launch.py [options] -- BWRAP_ARGV`.

    --cgroup FILE        write this process's pid to FILE (a cgroup.procs) first; repeatable
    --slirp4netns PATH   attach slirp4netns to the sandbox's network namespace before the
                         command starts

Without --slirp4netns it becomes bwrap (exec). With it, it starts bwrap with `--info-fd` (to
learn the namespace's process) and a resolv.conf naming slirp4netns's DNS, and the command waits
inside, at a prelude of /bin/sh, until slirp4netns says the network is up: the prelude first
tells the launcher that bwrap's own set-up of the namespace is over (slirp4netns must not change
the namespace while bwrap still configures its loopback). slirp4netns runs with
`--disable-host-loopback` (the host's 127.0.0.1 and its other loopback services stay out of reach),
its own sandbox and seccomp filter. The launcher dies with its parent (the worker); slirp4netns
ends when the launcher closes its exit pipe, bwrap's sandbox when the launcher goes.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import sys

READY_SECONDS = 15.0
DNS = "10.0.2.3"
"""slirp4netns's DNS forwarder, in its default network 10.0.2.0/24."""
PRELUDE = (
    'printf x >&{ready} && exec {ready}>&- && read -r go <&{go} && exec {go}<&- && [ "$go" = go ]'
    ' && exec "$@"; echo "sandbox: its network did not start" >&2; exit 125'
)
FAILED = 125


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent was gone already
        sys.exit(FAILED)


def _read_until(fd: int, want: bytes, seconds: float) -> bytes:
    data = b""
    while want not in data:
        ready, _, _ = select.select([fd], [], [], seconds)
        if not ready:
            raise TimeoutError
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data


def _fail(message: str) -> int:
    print(f"sandbox: {message}", file=sys.stderr, flush=True)
    return FAILED


def _networked(slirp: str, bwrap: list[str]) -> int:
    split = bwrap.index("--")
    options, command = bwrap[1:split], bwrap[split + 1 :]
    info_r, info_w = os.pipe()
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    resolv = os.memfd_create("resolv.conf", 0)
    os.write(resolv, f"nameserver {DNS}\n".encode())
    os.lseek(resolv, 0, os.SEEK_SET)
    if max(ready_w, go_r) > 9:  # /bin/sh redirects only single-digit descriptors
        return _fail("too many open descriptors to start the network")
    target = os.path.realpath("/etc/resolv.conf")
    prelude = PRELUDE.format(ready=ready_w, go=go_r)
    argv = [
        bwrap[0],
        "--info-fd",
        str(info_w),
        *options,
        "--ro-bind-data",
        str(resolv),
        target if target.startswith(("/etc/", "/run/")) else "/etc/resolv.conf",
        "--",
        "/bin/sh",
        "-c",
        prelude,
        "sandbox",
        *command,
    ]
    sandbox = subprocess.Popen(argv, pass_fds=(info_w, ready_w, go_r, resolv))
    for fd in (info_w, ready_w, go_r, resolv):
        os.close(fd)
    exit_r, exit_w = os.pipe()
    slirp_ready_r, slirp_ready_w = os.pipe()
    uplink: subprocess.Popen[bytes] | None = None
    try:
        info = json.loads(_read_until(info_r, b"}", READY_SECONDS) or b"{}")
        pid = int(info["child-pid"])
        if _read_until(ready_r, b"x", READY_SECONDS) != b"x":
            return sandbox.wait()  # bwrap failed before the command: it said why
        uplink = subprocess.Popen(
            [
                slirp,
                "--configure",
                "--mtu=65520",
                "--disable-host-loopback",
                "--enable-sandbox",
                "--enable-seccomp",
                f"--ready-fd={slirp_ready_w}",
                f"--exit-fd={exit_r}",
                f"--userns-path=/proc/{pid}/ns/user",
                str(pid),
                "tap0",
            ],
            pass_fds=(slirp_ready_w, exit_r),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(slirp_ready_w)
        os.close(exit_r)
        if _read_until(slirp_ready_r, b"1", READY_SECONDS) != b"1":
            sandbox.kill()
            sandbox.wait()
            return _fail(f"slirp4netns did not start (exit code {uplink.wait()})")
        os.write(go_w, b"go\n")
        os.close(go_w)
        code = sandbox.wait()
        return code if code >= 0 else 128 - code
    except (TimeoutError, ValueError, KeyError, OSError) as err:
        sandbox.kill()
        sandbox.wait()
        return _fail(f"its network did not start ({type(err).__name__})")
    finally:
        os.close(exit_w)  # slirp4netns ends
        if uplink is not None:
            try:
                uplink.wait(5)
            except subprocess.TimeoutExpired:
                uplink.kill()


def main(args: list[str]) -> int:
    _die_with_parent()
    cgroups: list[str] = []
    slirp: str | None = None
    while args and args[0] != "--":
        option, value, args = args[0], args[1], args[2:]
        if option == "--cgroup":
            cgroups.append(value)
        elif option == "--slirp4netns":
            slirp = value
        else:
            return _fail(f"unknown option {option}")
    bwrap = args[1:]
    for path in cgroups:
        with open(path, "w", encoding="ascii") as handle:
            handle.write(str(os.getpid()))
    if slirp is None:
        os.execv(bwrap[0], bwrap)
    return _networked(slirp, bwrap)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
