"""Free TCP ports that stay free until a server binds them: chosen below the kernel's ephemeral range.

A port from ``bind(("", 0))`` lies in ``net.ipv4.ip_local_port_range`` (32768-60999 by default), the range every
outgoing connection takes its local port from. Between the check and the server's own ``bind`` any ``connect()``
on the machine may take it -- or take ``port + 1`` (Linux's ``connect()`` prefers even ports, ``bind(0)`` odd ones),
the very ports SGLang derives from a dist-init port (``+1 ... +5``) and this console gives a second rank on one
machine. Below the ephemeral range only another listener can take a port. Stdlib only, Python >= 3.8: the group
probe ships this file's text to the node it checks.
"""

import random
import socket

RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST = 10000
"""No port below this is offered (well-known and registered services live there)."""


def ephemeral_range(path=RANGE_FILE):
    """The kernel's ``(low, high)`` range for outgoing connections' local ports; Linux's default when unreadable."""
    try:
        with open(path) as f:
            lo, hi = (int(x) for x in f.read().split()[:2])
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def bindable(port, host=""):
    """Whether ``port`` can be bound on ``host`` now (a listener or a lingering socket says no)."""
    try:
        with socket.socket() as s:
            s.bind((host, port))
        return True
    except OSError:
        return False


def listen_port(offsets=(0,), host="", tries=200, rng=None):
    """A random port ``p`` with every ``p + offset`` bindable, outside the ephemeral range (below it when there is
    room, else above it); one from ``bind(0)`` with its offsets free only when neither has room. None if none found."""
    rng = rng or random.Random()
    span = max(offsets) if offsets else 0
    lo, hi = ephemeral_range()
    ranges = [(LOWEST, lo - 1 - span), (hi + 1, 65535 - span)]
    ranges = [(a, b) for a, b in ranges if b - a > 100]
    for _ in range(tries):
        if ranges:
            a, b = ranges[0]
            p = rng.randint(a, b)
        else:
            with socket.socket() as s:
                s.bind((host, 0))
                p = s.getsockname()[1]
            if p + span > 65535:
                continue
        if all(bindable(p + d, host) for d in offsets):
            return p
    return None
