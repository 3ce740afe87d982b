"""`AGENT_COMMAND_NETWORK=true`: a command gets its own network namespace with an uplink
(slirp4netns), never the host's, so the host's loopback services stay out of reach.

Tried from outside: a real `python worker.py` with the setting on, and an approved command that
tries Temporal's port and a TCP server of the test on 127.0.0.1. The uplink itself is shown in a
network namespace the test makes to stand for the host (this machine has no internet): the
command reaches a server on that host's non-loopback address, and not its 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.reliability.processes import ROOT, FakeLLMProcess, stopping
from tests.sandbox_support import (
    deployment,
    deployment_env,
    run_approving,
    start_deployed_worker,
    tool_data,
)

needs_tools = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("slirp4netns") is None,
    reason="bubblewrap and slirp4netns are not installed (.ci/run installs them)",
)


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on the host's 127.0.0.1 that records what each connection sends."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    received: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    received.append(conn.recv(100))
                except OSError:
                    received.append(b"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], received
    finally:
        stop.set()
        thread.join(5)
        server.close()


def reach(host: str, port: int, label: str) -> str:
    """Shell text that prints `LABEL=reached` or `LABEL=refused` for one TCP connection."""
    attempt = f"exec 3<>/dev/tcp/{host}/{port}; echo hello >&3"
    return (
        f"if timeout 5 bash -c '{attempt}' 2>/dev/null; then echo {label}=reached;"
        f" else echo {label}=refused; fi"
    )


@needs_tools
async def test_a_networked_command_cannot_reach_the_host_s_loopback_services(
    client: Client, task_queue: str, listener: tuple[int, list[bytes]]
) -> None:
    port, received = listener
    temporal_host, temporal_port = client.service_client.config.target_host.rsplit(":", 1)
    with deployment() as place:
        fake = FakeLLMProcess(place.base / "logs")
        try:
            await fake.ready()
            env = deployment_env(
                place,
                address=client.service_client.config.target_host,
                task_queue=task_queue,
                llm_base_url=fake.base_url,
                AGENT_COMMAND_NETWORK="true",
            )
            worker = await start_deployed_worker(place, env)
            with stopping(worker):
                probe = "; ".join(
                    [
                        reach("127.0.0.1", port, "listener"),
                        reach(temporal_host, int(temporal_port), "temporal"),
                        reach("10.0.2.2", port, "gateway"),  # slirp4netns's name for the host
                        "grep -o 'tap0' /proc/net/dev",
                    ]
                )
                arguments = json.dumps({"command": probe})
                await fake.enqueue(
                    {"kind": "tool_calls", "calls": [["call_1", "run_command", arguments]]},
                    {"kind": "text", "text": "done"},
                )
                result = await run_approving(client, task_queue, "probe", approvals=1)
        finally:
            fake.stop()
    lines = tool_data(result, "call_1")["data"]["stdout"].split()
    assert lines == ["listener=refused", "temporal=refused", "gateway=refused", "tap0"], lines
    assert received == []


UPLINK_SCRIPT = r"""
import asyncio, json, socket, sys, threading
from pathlib import Path
from activities.tools import build_default_registry
from activities.tools.sandbox import choose_policy

def serve(host):
    server = socket.create_server((host, 0))
    def loop():
        while True:
            conn, _ = server.accept()
            with conn:
                conn.sendall(f"hello from {host}\n".encode())
    threading.Thread(target=loop, daemon=True).start()
    return server.getsockname()[1]

outside, loopback = serve("10.88.0.1"), serve("127.0.0.1")
registry = build_default_registry(
    Path(sys.argv[1]), commands=choose_policy("required", network=True)
)
command = (
    f"timeout 5 bash -c 'exec 3<>/dev/tcp/10.88.0.1/{outside} && cat <&3' 2>&1;"
    f" timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{loopback} && cat <&3' 2>/dev/null"
    " || echo loopback-refused"
)
result = asyncio.run(registry.get("run_command").run({"command": command}))
print(json.dumps(result))
"""

HOST_NETWORK = (
    "ip tuntap add dev uplink0 mode tap && ip link set uplink0 up"
    " && ip addr add 10.77.0.1/24 dev uplink0 && ip link set lo up"
    " && ip addr add 10.88.0.1/32 dev lo"
    " && ip route add default via 10.77.0.254 dev uplink0 onlink"
)
"""A stand-in host: an interface with a default route (what slirp4netns needs to find a way
out) and a second, non-loopback address on it where the test's outside server listens."""


@needs_tools
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None,
    reason="making a stand-in host's network namespace needs root, unshare and ip",
)
def test_the_uplink_reaches_the_outside_and_still_not_the_host_s_loopback(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = f'{HOST_NETWORK} && exec "$0" -c "$1" "$2"'
    done = subprocess.run(
        [
            "unshare",
            "--net",
            "--",
            "/bin/sh",
            "-c",
            script,
            sys.executable,
            UPLINK_SCRIPT,
            str(workspace),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["stdout"].splitlines() == ["hello from 10.88.0.1", "loopback-refused"], result


def test_the_worker_refuses_the_network_without_an_uplink_tool(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("sh", "bwrap"):
        found = shutil.which(name)
        if found is None:
            pytest.skip(f"{name} is not installed")
        (tools / name).symlink_to(found)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "LLM_", "AGENT_"))}
    env.update(
        PATH=str(tools),
        TEMPORAL_ADDRESS="127.0.0.1:1",  # never reached: the worker stops before connecting
        AGENT_WORKSPACE=str(tmp_path / "ws"),
        AGENT_STATE_DIR=str(tmp_path / "state"),
        AGENT_COMMAND_NETWORK="true",
    )
    done = subprocess.run(
        [sys.executable, "worker.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line == (
        "worker: AGENT_COMMAND_NETWORK=true asks for the network, but sandboxed processes cannot"
        " get their own network here (slirp4netns is not installed (Debian/Ubuntu package:"
        " slirp4netns)), and the host's network would expose its loopback services; not starting"
    )
    assert done.stdout == ""
