"""Ports for the servers tests start, chosen so they do not collide.

A port found by binding port 0 and closing the socket comes from the kernel's ephemeral
range (ip_local_port_range, 32768-60999 by default), the same range every outgoing
connection of the suite takes its local port from: between the pick and the server's
bind, a client of the API server, etcd or Prometheus could take it, and two picks could
return the same port. Ports below that range are never handed to outgoing connections,
and this process does not hand out one twice. Under pytest-xdist each worker process
picks from a slice of its own, so that two workers never pick the same port between one's
pick and its server's bind.
"""

from __future__ import annotations

import os
import random
import socket

_LOW, _HIGH = 20000, 32767  # below the ephemeral range
_given: set[int] = set()
_random = random.Random()  # seeded from the OS: two test processes pick different ports


def _slice() -> tuple[int, int]:
    """[low, high] of this process: all of it, or its worker's share under pytest-xdist
    (PYTEST_XDIST_WORKER gw0, gw1... of PYTEST_XDIST_WORKER_COUNT)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if count <= 1 or not worker.startswith("gw") or not worker[2:].isdigit():
        return _LOW, _HIGH
    size = (_HIGH - _LOW + 1) // count
    low = _LOW + (int(worker[2:]) % count) * size
    return low, low + size - 1


def free_port() -> int:
    """A 127.0.0.1 TCP port nothing listens on, not yet given out by this process."""
    low, high = _slice()
    for _ in range(1000):
        port = _random.randint(low, high)
        if port in _given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given.add(port)
        return port
    raise RuntimeError(f"no free port in {low}-{high} on 127.0.0.1")
