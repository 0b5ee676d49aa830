"""The stand-in's orphan fault (a scheduler outlives its launcher holding GPU memory) is found by the
same agent + session-view code the console uses, and its log classifies like SGLang's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from console.config import HostConfig
from console.core.classify import classify
from console.core.orphans import KNOWN_INIT
from console.core.sessions import derive_views
from console.link.link import HostLink
from console.link.ssh import HostSpec
from console.sim.demo import MODEL_CONFIG
from tests.conftest import free_port
from tests.helpers.rel_util import kill_quietly
from tests.helpers.wait import await_until


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
        await await_until(lambda: "ready to roll" in log.read_text(errors="replace"), 30, step=0.1)
        assert classify(log.read_text(errors="replace")).state == "ready"
        await link.open()  # the console watches the host before the kill: its agent sees the launcher die
        await link.request("snapshot", audit=False)
        os.kill(launcher.pid, signal.SIGKILL)  # the operator "killed the old server"
        launcher.wait(5)

        async def views_of(lk):
            """(the snapshot, its worker views) once the agent reports a worker (bounded: the last one read)."""
            last = []

            async def workers():
                snap = await lk.refresh()
                last[:] = [snap]
                views = [v for v in derive_views(snap, {}, time.time()) if "worker" in v.flags_summary]
                return (snap, views) if views else None
            return await await_until(workers, 8, step=0.2) or (last[0], [])

        snap, views = await views_of(link)
        assert views and views[0].flags_summary.startswith("orphaned worker"), snap
        orphans = [p for v in views for p in v.pids]
        (v,) = [v for v in views if v.gpus == [0]]
        assert v.state == "foreign" and "kill it by pid" in v.hint and "died while the agent watched" in v.hint
        assert any(p.pid in orphans for p in snap.gpus[0].procs)  # still holding GPU memory
        # A console that was not watching (a new agent) has no such proof for a scheduler that setsid'd itself:
        # unless pid 1 is a known init, pid 1 may be the process that started it, and it is not called an orphan.
        fresh = HostLink(HostSpec(name="local", local=True), HostConfig(
            python=sys.executable, runs_dir=str(tmp_path / "runs"), gpu_source="sim", sim_dir=str(sim)))
        await fresh.open()
        try:
            _, again = await views_of(fresh)
        finally:
            await fresh.close()
        init = open("/proc/1/cmdline", "rb").read().split(b"\0")[0].decode()
        if KNOWN_INIT.search(init):
            assert again[0].flags_summary.startswith("orphaned worker"), again
        else:
            assert again[0].flags_summary.startswith("server worker"), again
            assert "may be the process that started it" in (again[0].hint or ""), again
    finally:
        await link.close()
        kill_quietly(orphans, [launcher.pid])
