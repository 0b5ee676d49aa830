"""Servers that do not die cleanly, on simulated GPUs (the agent's one GPU model) with the SGLang stand-in:
a scheduler that escapes the process group (MTPCONSOLE_SIM_FAULT=orphan), a launcher that ignores SIGTERM,
and an orphan of a server killed by hand that keeps its GPU memory. Kill reports exactly what it found and
what is left; a relaunch onto a GPU still held is refused with the holder named until it is cleared."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from console.model import KillTarget, LaunchRequest
from console.ops import lifecycle
from console.sim.demo import FIXED_FLAGS
from tests.conftest import free_port
from tests.helpers.rel_util import REPO, kill_quietly
from tests.helpers.sim_files import make_sim, sim_link
from tests.helpers.wait import await_until


@pytest.fixture
def sim(tmp_path):
    return make_sim(tmp_path, 2, tag="r")


@pytest.fixture
async def link(sim, runs_dir):
    async with sim_link(runs_dir, sim[0]) as lk:
        yield lk


def sim_req(model, port, fault=None, gpus=(0,)) -> LaunchRequest:
    return LaunchRequest(host="local", command=[sys.executable, "-m", "console.sim.sglang"],
                         flags=["--model-path", str(model), *FIXED_FLAGS], gpus=list(gpus), port=port,
                         env={"MTPCONSOLE_SIM_FAULT": fault} if fault else {})


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_escaped_scheduler_is_found_killed_and_gpu_released(link, sim):
    _, model = sim
    r = await lifecycle.launch(link, sim_req(model, free_port(), fault="orphan"), timeout=60)
    assert r.ok, r
    snap = await lifecycle.fresh_snapshot(link)
    members = [p for p in snap.servers if p.session_id == r.session_id and p.role != "supervisor"]
    launcher = next(p for p in members if p.role == "launcher")
    escaped = [p for p in members if p.pgid != launcher.pgid]
    assert escaped and any(p.gpu_mem_mib for p in escaped), members  # out of the group, holding GPU memory
    k = await lifecycle.kill(link, KillTarget(host="local", session_id=r.session_id), grace=5)
    assert k.ok, k
    steps = {s.name: s for s in k.steps}
    assert all(str(p.pid) in steps["target"].evidence for p in members)  # every member named up front
    assert steps["no orphans"].state == "ok" and steps["GPU released"].state == "ok", k.steps
    assert not any(_alive(p.pid) for p in members)


async def test_launcher_ignoring_sigterm_is_escalated_and_reported(link, sim):
    _, model = sim
    r = await lifecycle.launch(link, sim_req(model, free_port(), fault="ignore_sigterm"), timeout=60)
    assert r.ok, r
    k = await lifecycle.kill(link, KillTarget(host="local", session_id=r.session_id), grace=1.0)
    assert k.ok, k
    steps = {s.name: s for s in k.steps}
    assert steps["exited"].state == "failed" and "still running after 1 s grace" in steps["exited"].evidence
    assert steps["SIGKILL"].state == "ok" and steps["GPU released"].state == "ok"


async def test_orphan_holding_gpu_blocks_relaunch_until_cleared(link, sim, tmp_path):
    d, model = sim
    # The incident: a server started by hand, its launcher killed, its scheduler left holding GPU 0.
    port0 = free_port()
    log = tmp_path / "by_hand.log"
    env = {**os.environ, "MTPCONSOLE_SIM_DIR": str(d), "MTPCONSOLE_SIM_SPEED": "20",
           "MTPCONSOLE_SIM_FAULT": "orphan", "CUDA_VISIBLE_DEVICES": "0", "PYTHONPATH": str(REPO)}
    with open(log, "wb") as f:
        by_hand = subprocess.Popen([sys.executable, "-m", "console.sim.sglang", "--model-path", str(model), "--port",
                                    str(port0), *FIXED_FLAGS], stdout=f, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
    orphans: list[int] = []
    try:
        assert await await_until(lambda: "ready to roll" in log.read_text(errors="replace"), 30)
        os.kill(by_hand.pid, signal.SIGKILL)
        by_hand.wait(5)

        async def holders():
            s = await lifecycle.fresh_snapshot(link)
            return [p.pid for p in s.gpus[0].procs if p.pid != by_hand.pid and _alive(p.pid)]
        orphans = await await_until(holders, 10, step=0.2)
        assert orphans, "the orphan should hold GPU 0"

        # A session on GPU 1 ...
        r = await lifecycle.launch(link, sim_req(model, free_port(), gpus=(1,)), timeout=60)
        assert r.ok, r
        # ... relaunched onto GPU 0: the old session is confirmed gone, the new one refused, the holder named.
        rr = await lifecycle.relaunch(link, KillTarget(host="local", session_id=r.session_id),
                                      sim_req(model, free_port()), timeout=60, grace=5)
        assert not rr.ok and rr.session_id is None, rr
        assert "GPU 0 has compute processes" in rr.error and str(orphans[0]) in rr.error, rr.error
        assert all(s.state in ("ok", "skipped") for s in rr.steps if s.name.startswith("kill: ")
                   and s.name != "kill: exited")
        # Clearing the orphan by pid is confirmed (memory back), then the relaunch goes through.
        k = await lifecycle.kill(link, KillTarget(host="local", pid=orphans[0]), grace=5)
        assert k.ok, k
        assert next(s for s in k.steps if s.name == "GPU released").state == "ok"
        r2 = await lifecycle.launch(link, sim_req(model, free_port()), timeout=60)
        assert r2.ok, r2
        k2 = await lifecycle.kill(link, KillTarget(host="local", session_id=r2.session_id), grace=5)
        assert k2.ok, k2
    finally:
        kill_quietly(orphans, [by_hand.pid])
