"""Preflight after a kill reads a snapshot taken after the kill (issue 24, item 6).

`relaunch` printed `✓ kill: no orphans … memory back to baseline` and then `✓ preflight … orphan pid N holding
83,781 MiB on GPU 0`: the pid it had just killed, read from a sample taken before the kill. Here, on simulated
GPUs with the SGLang stand-in: a server started by hand is killed, its scheduler (escaped from the group) keeps
GPU 0's memory; the operator relaunches that orphan by pid as a managed session on GPU 0. The link's last sample
is put back to one taken before the kill (as a sample that was in flight during the kill would leave it): the
launch's preflight must still name no process the kill reported gone, and the new server must come up there.
"""

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
    return make_sim(tmp_path, 2, tag="p")


@pytest.fixture(autouse=True)
def _private_audit_log(tmp_path, monkeypatch):
    monkeypatch.setenv("MTPCONSOLE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))


@pytest.fixture
async def link(sim, runs_dir):
    async with sim_link(runs_dir, sim[0]) as lk:
        yield lk


def _by_hand_orphan(d: Path, model: Path, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / "by_hand.log"
    env = {**os.environ, "MTPCONSOLE_SIM_DIR": str(d), "MTPCONSOLE_SIM_SPEED": "20", "MTPCONSOLE_SIM_FAULT": "orphan",
           "CUDA_VISIBLE_DEVICES": "0", "PYTHONPATH": str(REPO)}
    with open(log, "wb") as f:
        p = subprocess.Popen([sys.executable, "-m", "console.sim.sglang", "--model-path", str(model), "--port",
                              str(free_port()), *FIXED_FLAGS], stdout=f, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
    return p, log


async def test_preflight_after_a_kill_never_names_what_the_kill_reported_gone(link, sim, tmp_path):
    d, model = sim
    by_hand, log = _by_hand_orphan(d, model, tmp_path)
    held: list[int] = []
    try:
        assert await await_until(lambda: "ready to roll" in log.read_text(errors="replace"), 30)
        os.kill(by_hand.pid, signal.SIGKILL)  # the incident: the launcher killed, its scheduler keeps GPU 0
        by_hand.wait(5)

        async def holders():
            s = await lifecycle.fresh_snapshot(link)
            return [p for p in s.servers if p.alive and p.pid != by_hand.pid and p.gpu_mem_mib.get(0)]
        held = [p.pid for p in await await_until(holders, 10, step=0.2)]
        assert held, "the orphaned scheduler should hold GPU 0"
        before = link.sample  # a sample taken before the kill, naming the orphan on GPU 0
        assert any(p["pid"] == held[0] for p in before["servers"])

        def late_sample() -> None:  # the kill is confirmed: a sample from before it lands now
            link.take_sample(before)

        (orphan,) = [p for p in await holders() if p.pid == held[0]]
        req = LaunchRequest(host="local", command=[sys.executable, "-m", "console.sim.sglang"],
                            flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=free_port())
        r = await lifecycle.relaunch(link, KillTarget(host="local", pid=orphan.pid, start_ticks=orphan.start_ticks),
                                     req, timeout=60, grace=5, on_launch=late_sample)
        kill = {s.name: s for s in r.steps if s.name.startswith("kill: ")}
        assert kill["kill: exited"].state == "ok" and kill["kill: GPU released"].state == "ok", kill
        gone = str(orphan.pid)
        pre = next(s for s in r.steps if s.name == "preflight")
        assert f"pid {gone}" not in (pre.evidence or "") and "orphan pid" not in (pre.evidence or ""), pre
        assert r.ok and r.state == "ready", r
        held = []
        k = await lifecycle.kill(link, KillTarget(host="local", session_id=r.session_id), grace=5)
        assert k.ok, k
    finally:
        kill_quietly(held, [by_hand.pid])
