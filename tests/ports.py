"""Ports for the servers tests start, chosen so they do not collide.

A port found by binding port 0 and closing the socket comes from the kernel's ephemeral
range (ip_local_port_range, 32768-60999 by default), the same range every outgoing
connection of the suite takes its local port from: between the pick and the server's
bind, a client of the API server, etcd or Prometheus could take it, and two picks could
return the same port. Ports below that range are never handed to outgoing connections,
and this process does not hand out one twice.
"""

from __future__ import annotations

import random
import socket

_LOW, _HIGH = 20000, 32767  # below the ephemeral range
_given: set[int] = set()
_random = random.Random()  # seeded from the OS: two test processes pick different ports


def free_port() -> int:
    """A 127.0.0.1 TCP port nothing listens on, not yet given out by this process."""
    for _ in range(1000):
        port = _random.randint(_LOW, _HIGH)
        if port in _given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given.add(port)
        return port
    raise RuntimeError(f"no free port in {_LOW}-{_HIGH} on 127.0.0.1")
