"""The stand-in's orphan fault (a scheduler outlives its launcher holding GPU memory) is found by the
same agent + session-view code the console uses, and its log classifies like SGLang's."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

from console.config import HostConfig
from console.ops.classify import classify
from console.ops.sessions import derive_views
from console.remote.link import HostLink
from console.remote.ssh import HostSpec
from console.sim.demo import MODEL_CONFIG
from tests.conftest import free_port
from tests.helpers.rel_util import kill_quietly


async def test_orphaned_scheduler_is_reported_with_its_gpu_memory(tmp_path):
    sim = tmp_path / "sim"
    (sim / "alloc").mkdir(parents=True)
    (sim / "gpus.json").write_text(json.dumps([{"index": 0, "uuid": "GPU-t", "name": "Sim", "mem_total_mib": 97887,
                                                "power_limit_w": 600.0}]))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(MODEL_CONFIG))
    log = tmp_path / "server.log"
    env = {**os.environ, "MTPCONSOLE_SIM_DIR": str(sim), "MTPCONSOLE_SIM_SPEED": "20", "MTPCONSOLE_SIM_FAULT": "orphan",
           "CUDA_VISIBLE_DEVICES": "0"}
    port = free_port()
    with open(log, "wb") as f:
        launcher = subprocess.Popen([sys.executable, "-m", "console.sim.sglang", "--model-path", str(model), "--port",
                                     str(port), "--max-running-requests", "8"], stdout=f, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)
    link = HostLink(HostSpec(name="local", local=True),
                    HostConfig(python=sys.executable, runs_dir=str(tmp_path / "runs"), gpu_source="sim", sim_dir=str(sim)))
    orphans = []
    try:
        deadline = time.monotonic() + 30
        while "ready to roll" not in log.read_text(errors="replace") and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert classify(log.read_text(errors="replace")).state == "ready"
        os.kill(launcher.pid, signal.SIGKILL)  # the operator "killed the old server"
        launcher.wait(5)
        await link.open()
        snap = None
        for _ in range(20):
            link.sample = await link.request("snapshot", audit=False)
            link.received_at, link._snapshot = time.time(), None
            snap = link.snapshot()
            views = [v for v in derive_views(snap, {}, time.time()) if v.flags_summary.startswith("orphaned worker")]
            if views:
                break
            await asyncio.sleep(0.2)
        assert views, snap
        orphans = [p for v in views for p in v.pids]
        (v,) = [v for v in views if v.gpus == [0]]
        assert v.state == "foreign" and "kill it by pid" in v.hint
        assert any(p.pid in orphans for p in snap.gpus[0].procs)  # still holding GPU memory
    finally:
        await link.close()
        kill_quietly(orphans, [launcher.pid])
