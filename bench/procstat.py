"""CPU time and memory of processes from /proc (no psutil): self, children, whole trees."""

from __future__ import annotations

import os
import resource

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def stat(pid: int) -> dict | None:
    """utime, stime, cutime, cstime (seconds), ppid, state, rss (bytes) of one process; None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    f = raw[raw.rfind(")") + 2:].split()
    return {"state": f[0], "ppid": int(f[1]), "utime": int(f[11]) / CLK_TCK, "stime": int(f[12]) / CLK_TCK,
            "cutime": int(f[13]) / CLK_TCK, "cstime": int(f[14]) / CLK_TCK, "rss": int(f[21]) * PAGE}


def children_map() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            s = stat(int(name))
            if s is not None:
                out.setdefault(s["ppid"], []).append(int(name))
    return out


def descendants(root: int, cmap: dict[int, list[int]] | None = None) -> list[int]:
    cmap = children_map() if cmap is None else cmap
    out, stack = [], list(cmap.get(root, []))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(cmap.get(p, []))
    return out


def tree_cpu(root: int, include_root: bool = True, cmap: dict[int, list[int]] | None = None) -> float:
    """CPU seconds of a process tree: every live member's own time plus what each reaped.

    Reaped children are folded into their parent's cutime/cstime, so the total only grows:
    a delta of two readings is the CPU the whole tree spent in between, including processes
    that started and ended in between (as long as their parent in the tree waited for them).
    """
    total = 0.0
    members = ([root] if include_root else []) + descendants(root, cmap)
    for p in members:
        s = stat(p)
        if s is not None:
            total += s["utime"] + s["stime"] + s["cutime"] + s["cstime"]
    return total


def tree_rss(root: int) -> int:
    return sum((stat(p) or {}).get("rss", 0) for p in [root] + descendants(root))


def self_cpu() -> float:
    """This process's CPU seconds (all threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def children_cpu() -> float:
    """CPU seconds of this process's reaped children (ssh clients and the like)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def self_rss() -> int:
    """Current resident set size of this process in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine from /proc/stat, for the load caveat."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    return float(sum(parts) - idle), float(sum(parts))
