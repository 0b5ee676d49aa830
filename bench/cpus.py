"""CPU affinity for the fleet benchmark: the console on CPUs of its own, the simulated hosts on the others.

On a real fleet the agents and their SSH servers run on N other machines. Simulated on one box, they share its
cores with the console: the scheduler puts an agent on the console's core or on its SMT sibling (which shares the
core's execution units and caches), and the console's cost per sample then reads the agents' load as much as its
own. Pinning gives the console a core (with its SMT siblings, or a second CPU where the kernel reports none) that
no simulated host may run on.
"""

from __future__ import annotations

import os
from pathlib import Path

MIN_CPUS = 8
"""Fewer CPUs than this: no pinning (the hosts would lose too large a share of the machine)."""


def _siblings(cpu: int) -> set[int]:
    """The CPUs sharing ``cpu``'s core (itself included), as the kernel reports them (just ``cpu`` if it does not)."""
    try:
        text = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
    except OSError:
        return {cpu}
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.strip().isdigit():
            out.update(range(int(lo), int(hi or lo) + 1))
    return out or {cpu}


def split(cpus: set[int]) -> tuple[set[int], set[int]] | None:
    """(the console's CPUs, the hosts' CPUs) from ``cpus``; None below :data:`MIN_CPUS`. The console gets the first
    CPU's core: its SMT siblings, or the first two CPUs where the core reports no sibling."""
    if len(cpus) < MIN_CPUS:
        return None
    first = min(cpus)
    mine = _siblings(first) & cpus
    if len(mine) < 2:
        mine = set(sorted(cpus)[:2])
    return mine, cpus - mine


def pin(pid: int, cpus: set[int]) -> bool:
    """``pid`` (0: this thread) may run on ``cpus`` only; False where the kernel refused it."""
    try:
        os.sched_setaffinity(pid, cpus)
        return True
    except OSError:
        return False


def describe(cpus: set[int]) -> str:
    """``0-1,8`` for {0, 1, 8}."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)
