"""The simulated-GPU contract shared by the SGLang stand-in and the remote agent (stdlib only, Python 3.8+).

Layout of the sim directory (``$MTPCONSOLE_SIM_DIR``)::

    gpus.json          [{"index": 0, "uuid": "GPU-...", "name": "...", "mem_total_mib": 97887,
                         "power_limit_w": 600.0}, ...]
                       each GPU may also carry what a rank of the SGLang stand-in takes on it (optional
                       non-negative integers, :data:`STANDIN_FIELDS`; console/sim/sglang_memory.py reads them
                       and says the defaults): the stand-in decides out-of-memory from these numbers
    alloc/<pid>.json   {"pid": int, "gpu": int, "mem_mib": int, "busy": float 0..1, "spec": bool,
                        "start_ticks": int|null, "updated_at": float}

Every process that holds GPU memory (the stand-in's schedulers, not its launcher) writes its own
alloc file atomically (tmp + rename), updates it as memory grows and as it serves, and removes it
on a clean exit. A killed process leaves its file behind: like a real driver, the reader keeps that
memory a moment after the pid is gone and then deletes the file (:func:`reap_stale_allocs`).

The power/utilisation model (:func:`power_w`, :func:`util_pct`, :class:`PowerRamp`), calibrated on a
real H200 (docs/gpu-validation.md): idle ~78-82 W; a process holding memory without work +~44 W;
serving without speculative decoding about 400 W; with EAGLE/MTP about 560-590 W; small noise; board
power ramps up in ~1 s and decays in ~3 s (NVML power is a 1 s average); the driver frees a dead
process's memory ~0.15 s after it exits; an idle GPU reports ~8 MiB used.

This file is the only GPU model: the remote agent runs it as shipped source for ``gpu_source=sim``.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from typing import Any, Callable, Dict, List, Optional

SIM_DIR_ENV = "MTPCONSOLE_SIM_DIR"
GPUS_FILE = "gpus.json"
ALLOC_DIR = "alloc"
STALE_GRACE_S = 0.15
"""How long a dead process's memory stays visible (driver teardown lag, measured 0.10-0.15 s on H200)."""

RTX_PRO_6000 = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
IDLE_W = 80.0
HOLDER_W = 44.0
"""Extra board power while a process holds memory on the GPU but does no work (H200: 82 -> 126 W)."""
SERVE_W = 400.0
SPEC_W = 575.0
RAMP_UP_S = 0.35
RAMP_DOWN_S = 1.0
BASE_USED_MIB = 8
"""What an idle GPU reports as used (driver reservation)."""
STANDIN_FIELDS = ("context_mib", "weights_mib", "draft_weights_mib", "kv_bytes_per_token", "mamba_bytes_per_slot",
                  "graph_mib")
"""Optional per-GPU numbers of gpus.json for the SGLang stand-in's memory (absent: its defaults)."""


def default_gpus(count: int = 4, *, name: str = RTX_PRO_6000, mem_total_mib: int = 97887,
                 power_limit_w: float = 600.0) -> List[Dict[str, Any]]:
    """A gpus.json list of ``count`` identical GPUs with stable fake UUIDs."""
    return [
        {"index": i, "uuid": "GPU-5e1f%04d-0000-4000-8000-%012d" % (i, i), "name": name,
         "mem_total_mib": int(mem_total_mib), "power_limit_w": float(power_limit_w)}
        for i in range(count)
    ]


def _atomic_write(path: str, data: Any) -> None:
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def write_gpus(sim_dir: str, gpus: List[Dict[str, Any]]) -> None:
    """Create the sim dir (and alloc/) and write gpus.json atomically."""
    os.makedirs(os.path.join(sim_dir, ALLOC_DIR), exist_ok=True)
    _atomic_write(os.path.join(sim_dir, GPUS_FILE), gpus)


def read_gpus(sim_dir: str) -> List[Dict[str, Any]]:
    """The GPUs of a sim dir; raises ValueError when gpus.json is missing or malformed."""
    path = os.path.join(sim_dir, GPUS_FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read(1 << 20)
        data = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise ValueError("%s: no such file" % path)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError("%s: unreadable (%s)" % (path, e))
    if not isinstance(data, list):
        raise ValueError("%s: expected a JSON list" % path)
    out = []
    for g in data:
        if not isinstance(g, dict) or not isinstance(g.get("index"), int) or not isinstance(g.get("mem_total_mib"), int):
            raise ValueError("%s: each GPU needs integer 'index' and 'mem_total_mib'" % path)
        for k in STANDIN_FIELDS:
            v = g.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ValueError("%s: GPU %d: %r must be a non-negative integer, got %r" % (path, g["index"], k, v))
        out.append(g)
    return out


def alloc_path(sim_dir: str, pid: int) -> str:
    return os.path.join(sim_dir, ALLOC_DIR, "%d.json" % pid)


def proc_start_ticks(pid: int) -> Optional[int]:
    """Field 22 of /proc/<pid>/stat, or None when the process is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read().decode("utf-8", "replace")
        return int(stat[stat.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """True while /proc/<pid> exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read().decode("utf-8", "replace")
        return stat[stat.rindex(")") + 2:].split()[0] != "Z"
    except (OSError, ValueError, IndexError):
        return False


def write_alloc(sim_dir: str, pid: int, gpu: int, mem_mib: int, busy: float = 0.0, spec: bool = False) -> None:
    """Write (or update) this process's allocation atomically."""
    os.makedirs(os.path.join(sim_dir, ALLOC_DIR), exist_ok=True)
    _atomic_write(alloc_path(sim_dir, pid), {
        "pid": int(pid), "gpu": int(gpu), "mem_mib": int(max(0, mem_mib)),
        "busy": float(min(1.0, max(0.0, busy))), "spec": bool(spec),
        "start_ticks": proc_start_ticks(pid), "updated_at": time.time(),
    })


def remove_alloc(sim_dir: str, pid: int) -> None:
    """Remove this process's allocation file (clean exit); missing is fine."""
    try:
        os.unlink(alloc_path(sim_dir, pid))
    except FileNotFoundError:
        pass


def read_allocs(sim_dir: str) -> List[Dict[str, Any]]:
    """Every well-formed alloc file (dead or alive); malformed or half-written files are skipped."""
    d = os.path.join(sim_dir, ALLOC_DIR)
    try:
        names = os.listdir(d)
    except OSError:
        return []
    out = []
    for n in sorted(names):
        if not n.endswith(".json") or ".tmp." in n:
            continue
        try:
            with open(os.path.join(d, n), "rb") as f:
                a = json.loads(f.read(65536).decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if isinstance(a, dict) and isinstance(a.get("pid"), int) and isinstance(a.get("gpu"), int) \
                and isinstance(a.get("mem_mib"), int):
            out.append(a)
    return out


def alloc_owner_alive(a: Dict[str, Any]) -> bool:
    """The alloc's pid is alive and (when recorded) has the same start time (no PID reuse)."""
    pid = a["pid"]
    if not pid_alive(pid):
        return False
    st = a.get("start_ticks")
    return st is None or proc_start_ticks(pid) == st


def reap_stale_allocs(sim_dir: str, *, grace_s: float = STALE_GRACE_S, now: Optional[float] = None,
                      alive: Callable[[Dict[str, Any]], bool] = alloc_owner_alive) -> List[Dict[str, Any]]:
    """Mark allocs of dead processes, delete them ``grace_s`` after first seen dead; return the rest.

    The first time a dead owner is seen its file gets ``dead_since``; the memory stays counted until
    the grace period has passed (a real driver frees memory a little after the process is gone).
    """
    now = time.time() if now is None else now
    kept = []
    for a in read_allocs(sim_dir):
        if alive(a):
            kept.append(a)
            continue
        since = a.get("dead_since")
        path = alloc_path(sim_dir, a["pid"])
        if isinstance(since, (int, float)) and now - since >= grace_s:
            try:
                os.unlink(path)
            except OSError:
                pass
            continue
        if not isinstance(since, (int, float)):
            a = dict(a, dead_since=now)
            try:
                _atomic_write(path, a)
            except OSError:
                pass
        kept.append(a)
    return kept


def power_w(busy: float, spec: bool, power_limit_w: float = 600.0, *, holders: int = 0,
            rng: Optional[random.Random] = None) -> float:
    """Target board power: idle ~80 W, +44 W while memory is held, ~400 W serving, ~575 W with EAGLE (±2 %)."""
    r = rng or random
    busy = min(1.0, max(0.0, busy))
    if busy == 0:
        w = IDLE_W + r.uniform(-2.0, 2.0) + (HOLDER_W if holders else 0.0)
    else:
        base = IDLE_W + HOLDER_W
        w = (base + ((SPEC_W if spec else SERVE_W) - base) * busy) * (1.0 + r.uniform(-0.02, 0.02))
    return round(min(power_limit_w, max(0.0, w)), 1)


def util_pct(busy: float, spec: bool) -> float:
    """Simulated GPU utilisation: 0 when idle, ~97 % serving (EAGLE keeps it near 100 %)."""
    busy = min(1.0, max(0.0, busy))
    if busy == 0:
        return 0.0
    return round(min(100.0, (100.0 if spec else 96.0) * (0.35 + 0.65 * busy)), 1)


def temp_c(power: float, power_limit_w: float = 600.0) -> float:
    """Simulated temperature: ~33 °C idle up to ~57 °C at the power limit (H200: 54-58 °C at 690 W)."""
    return round(30.0 + 27.0 * min(1.0, power / max(1.0, power_limit_w)), 1)


class PowerRamp(object):
    """Board power follows its target with a lag: up in ~1 s, down in ~3 s (exponential)."""

    def __init__(self) -> None:
        self.state: Dict[Any, Any] = {}

    def step(self, key: Any, target: float, now: float) -> float:
        prev = self.state.get(key)
        if prev is None:
            self.state[key] = (target, now)
            return target
        p, t = prev
        tau = RAMP_UP_S if target > p else RAMP_DOWN_S
        p = p + (target - p) * (1.0 - math.exp(-max(0.0, now - t) / tau))
        self.state[key] = (p, now)
        return round(p, 1)


def sample_gpus(sim_dir: str, *, allocs: Optional[List[Dict[str, Any]]] = None,
                rng: Optional[random.Random] = None, ramp: Optional[PowerRamp] = None,
                now: Optional[float] = None) -> List[Dict[str, Any]]:
    """One sample per GPU (GpuSample-shaped dicts) from gpus.json and the given (or current) allocs.

    Pass ``allocs=reap_stale_allocs(sim_dir)`` to apply the stale-memory rule first, and a
    PowerRamp kept across calls for the power lag.
    """
    gpus = read_gpus(sim_dir)
    allocs = read_allocs(sim_dir) if allocs is None else allocs
    now = time.time() if now is None else now
    out = []
    for g in gpus:
        mine = [a for a in allocs if a.get("gpu") == g["index"]]
        used = BASE_USED_MIB + sum(int(a["mem_mib"]) for a in mine)
        live = [a for a in mine if "dead_since" not in a]
        busy = max([float(a.get("busy", 0.0)) for a in live] or [0.0])
        spec = any(a.get("spec") and float(a.get("busy", 0)) > 0 for a in live)
        limit = float(g.get("power_limit_w") or 600.0)
        p = power_w(busy, spec, limit, holders=len(live), rng=rng)
        if ramp is not None:
            p = ramp.step(g["index"], p, now)
        out.append({
            "index": g["index"], "uuid": g.get("uuid"), "name": g.get("name"),
            "power_w": p, "power_limit_w": limit, "util_pct": util_pct(busy, spec),
            "mem_used_mib": min(int(g["mem_total_mib"]), used), "mem_total_mib": int(g["mem_total_mib"]),
            "temp_c": temp_c(p, limit),
            "procs": [{"pid": a["pid"], "used_mib": int(a["mem_mib"]), "name": None} for a in mine],
            "errors": {},
        })
    return out


def physical_gpu(rank: int, cuda_visible_devices: Optional[str], gpus: Optional[List[Dict[str, Any]]] = None,
                 base_gpu_id: int = 0) -> int:
    """The physical GPU index a TP rank uses, from CUDA_VISIBLE_DEVICES (indices or UUIDs)."""
    logical = base_gpu_id + rank
    if not cuda_visible_devices:
        return logical
    items = [s.strip() for s in cuda_visible_devices.split(",") if s.strip()]
    if logical >= len(items):
        raise ValueError("CUDA_VISIBLE_DEVICES=%s has no device for rank %d" % (cuda_visible_devices, rank))
    item = items[logical]
    if item.isdigit():
        return int(item)
    for g in gpus or []:
        if g.get("uuid") == item:
            return int(g["index"])
    raise ValueError("CUDA_VISIBLE_DEVICES entry %r matches no GPU" % item)


def used_by_others_mib(sim_dir: str, gpu: int, *, exclude_pids: Optional[List[int]] = None) -> int:
    """Memory held on ``gpu`` by other processes: alive ones, and dead ones within the grace period."""
    ex = set(exclude_pids or [])
    return sum(int(a["mem_mib"]) for a in reap_stale_allocs(sim_dir) if a["gpu"] == gpu and a["pid"] not in ex)
