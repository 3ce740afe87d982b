"""Ports for the servers the tests start, chosen so that nothing else takes them first.

A port read from `bind(("127.0.0.1", 0))` comes from the kernel's ephemeral range, the range
every outgoing connection of the suite (gRPC to the dev server, httpx, browsers) also draws
from: between the probe and the server's own bind another test's connection may take it
("Address already in use"). These ports are below that range, in a slice of their own per
pytest-xdist worker, so neither the kernel nor another worker hands them out; within a worker,
tests run one at a time and each port is probed free before it is returned.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

SLICE = 1_500
"""Ports per xdist worker."""
LOWEST = 15_000
"""The first port used: above the well-known and registered services a test machine runs."""


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        low, _ = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low)
    except (OSError, ValueError):
        return 32_768


def _worker_index() -> int:
    """This xdist worker's number (`gw3` → 3); 0 without xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = name.removeprefix("gw")
    return int(digits) if digits.isdigit() else 0


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int = 1) -> int:
    """A port P such that P .. P + count - 1 are all free on 127.0.0.1 right now, from this
    worker's slice below the ephemeral range."""
    slices = max(1, (_ephemeral_low() - LOWEST) // SLICE)
    start = LOWEST + (_worker_index() % slices) * SLICE
    candidates = list(range(start, start + SLICE - count + 1))
    random.shuffle(candidates)
    for port in candidates[:200]:
        if all(_bindable(port + offset) for offset in range(count)):
            return port
    raise RuntimeError(f"no {count} consecutive free ports in {start}..{start + SLICE - 1}")


def free_port() -> int:
    """A port nobody listens on right now, that no other test or connection will be given."""
    return free_ports(1)
