"""Simulated host furniture: a sim GPU directory (the agent's ``SimGpus`` format) and an idle
serving stand-in process that holds memory on every simulated GPU.

The stand-in is ``/bin/sleep`` started with a chosen argv[0], so it costs no CPU and shows in
``/proc/<pid>/cmdline`` as whatever the benchmark needs (e.g. an SGLang launcher).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

from bench.procstat import stat


def write_sim_dir(sim_dir: Path, gpus: int = 8) -> Path:
    """gpus.json with ``gpus`` GPUs (RTX PRO 6000-like) and an empty alloc/ directory."""
    (sim_dir / "alloc").mkdir(parents=True, exist_ok=True)
    defs = [{"index": i, "uuid": f"GPU-bench-{i:04d}", "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
             "mem_total_mib": 97887, "power_limit_w": 600.0} for i in range(gpus)]
    (sim_dir / "gpus.json").write_text(json.dumps(defs))
    return sim_dir


def start_stand_in(argv0: str, sim_dir: Path | None = None, gpus: int = 8, mem_mib: int = 80_000,
                   busy: float = 0.8) -> subprocess.Popen:
    """An idle process titled ``argv0`` holding ``mem_mib`` on each of ``gpus`` simulated GPUs."""
    sleep = shutil.which("sleep") or "/bin/sleep"
    p = subprocess.Popen([argv0, "3600"], executable=sleep, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    if sim_dir is not None:
        st = None
        for _ in range(100):
            s = stat(p.pid)
            if s is not None:
                with open(f"/proc/{p.pid}/stat", "rb") as f:
                    raw = f.read().decode()
                st = int(raw[raw.rfind(")") + 2:].split()[19])
                break
        for i in range(gpus):
            (sim_dir / "alloc" / f"{p.pid}-{i}.json").write_text(json.dumps(
                {"pid": p.pid, "gpu": i, "mem_mib": mem_mib, "busy": busy, "spec": True, "start_ticks": st}))
    return p


def stop(p: subprocess.Popen) -> None:
    """End a process this benchmark started (its own session/group) and reap it."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        pass
