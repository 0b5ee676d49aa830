"""Advice only from live evidence, on real processes (issue 24, item 5).

The incident: a hand-started server on simulated GPU 0 (the SGLang stand-in writing to a file), busy with
8 queued requests as its log's last ``Decode batch`` line says; its launcher is SIGKILLed and its scheduler,
escaped from the process group, keeps holding the GPU's memory. The panel advised speculative decoding from
the dead launcher's "8 queued" and the "memory held by no live session" rule did not fire. Now: no advice
from the dead server's figures, and the orphaned memory is advised, in ``status``'s path and the TUI's.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.config import HostConfig
from console.core.flags.sources import bundled_schema
from console.link.link import HostLink
from console.link.ssh import HostSpec
from console.ops import lifecycle
from console.ops.advice_host import advise_link, schema_validator
from console.sim.demo import FIXED_FLAGS
from tests.conftest import free_port
from tests.helpers.rel_util import REPO, cleanup_runs, kill_quietly
from tests.helpers.sim_files import make_sim
from tests.helpers.wait import await_until


@pytest.fixture
def sim(tmp_path):
    return make_sim(tmp_path, 1, tag="a")


@pytest.fixture
async def link(sim, runs_dir):
    d, _ = sim
    lk = HostLink(HostSpec(name="local", local=True),
                  HostConfig(python=sys.executable, runs_dir=str(runs_dir), gpu_source="sim", sim_dir=str(d),
                             launch_env={"MTPCONSOLE_SIM_DIR": str(d), "PYTHONPATH": str(REPO)}), interval=0.3)
    await lk.open()
    yield lk
    await lk.close()
    cleanup_runs(runs_dir)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _decode_line(queue: int) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    return (f"[{stamp} TP0] Decode batch, #running-req: 48, #token: 90000, token usage: 0.40, cuda graph: True, "
            f"gen throughput (token/s): 27.00, #queue-req: {queue}, \n")


async def test_a_dead_launchers_last_queue_gives_no_advice_and_its_orphan_is_advised(link, sim, tmp_path):
    d, model = sim
    log = tmp_path / "by_hand.log"
    env = {**os.environ, "MTPCONSOLE_SIM_DIR": str(d), "MTPCONSOLE_SIM_SPEED": "20", "MTPCONSOLE_SIM_FAULT": "orphan",
           "CUDA_VISIBLE_DEVICES": "0", "PYTHONPATH": str(REPO)}
    with open(log, "ab") as f:
        by_hand = subprocess.Popen([sys.executable, "-m", "console.sim.sglang", "--model-path", str(model), "--port",
                                    str(free_port()), *FIXED_FLAGS], stdout=f, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
    orphans: list[int] = []
    try:
        assert await await_until(lambda: "ready to roll" in log.read_text(errors="replace"), 30)
        with open(log, "a") as f:  # what the server last printed before it died: busy, 8 queued
            f.write(_decode_line(8))
        os.kill(by_hand.pid, signal.SIGKILL)
        by_hand.wait(5)

        async def holders():
            s = await lifecycle.fresh_snapshot(link)
            return [p.pid for p in s.gpus[0].procs if p.pid != by_hand.pid and _alive(p.pid)]
        orphans = await await_until(holders, 10, step=0.2)
        assert orphans, "the escaped scheduler should hold GPU 0"

        seen: list = []
        figures: list = []

        async def proven() -> bool:  # the orphan is proven once the agent saw its parent die
            snap = await lifecycle.fresh_snapshot(link)
            advice, figures[:] = await advise_link(link, snap, now=time.time(),
                                                   validate=schema_validator(bundled_schema()))
            seen.append(advice)
            return any(a.kind == "orphan_memory" for a in advice)
        await await_until(proven, 15, step=0.2)
        advice = seen[-1]
        # nothing, ever, from the dead launcher's "8 queued"
        assert not any(a.kind == "gpu_underused" or "queued" in a.message for adv in seen for a in adv), seen
        orphan = [a for a in advice if a.kind == "orphan_memory"]
        assert [a.pid for a in orphan] == orphans[:1] and orphan[0].gpu == 0, advice
        assert "belongs to no live session" in orphan[0].message and orphan[0].evidence
        assert not any(f["figures"] for f in figures), figures  # no live server: no serving figures shown

        from console.ops.tracker import HostTracker

        views: list = []
        tracker = HostTracker(link, interval=0.3, on_view=views.append, on_log=lambda *a: None)
        run = asyncio.ensure_future(link.run())
        try:
            def orphan_advised():
                return next((v for v in views[-3:] if any(a.kind == "orphan_memory" for a in v.advice)), None)
            view = await await_until(orphan_advised, 20)
            assert view is not None, "the TUI's view should advise the orphaned memory"
            n = len(views)
            assert await await_until(lambda: len(views) >= n + 2, 10)  # two more views: still no advice from the dead
            assert not any(a.kind == "gpu_underused" for v in views for a in v.advice)
        finally:
            run.cancel()
        assert tracker is not None
    finally:
        kill_quietly(orphans, [by_hand.pid])


async def test_a_managed_sessions_killed_launcher_leaves_only_orphan_advice(link, sim):
    """A stand-in session (its scheduler escapes the process group) whose supervisor and launcher are SIGKILLed:
    the escaped worker keeps the GPU's memory and the session's log ends in "8 queued"."""
    from console.model import LaunchRequest

    d, model = sim
    req = LaunchRequest(host="local", command=[sys.executable, "-m", "console.sim.sglang"],
                        flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=free_port(),
                        env={"MTPCONSOLE_SIM_FAULT": "orphan"})
    r = await lifecycle.launch(link, req, timeout=60)
    assert r.ok and r.session_id, r
    snap = await lifecycle.fresh_snapshot(link)
    info = next(x for x in snap.sessions if x.session_id == r.session_id)
    assert info.record is not None
    with open(Path(info.run_dir) / "output.log", "a") as f:
        f.write(_decode_line(8))
    os.kill(info.record.supervisor_pid, signal.SIGKILL)  # nobody left to kill the leftovers
    os.kill(info.record.pid, signal.SIGKILL)
    left: list[int] = []
    try:
        seen: list = []

        async def proven() -> bool:  # the orphan is proven once the agent saw its parent die
            snap = await lifecycle.fresh_snapshot(link)
            left[:] = [p.pid for p in snap.gpus[0].procs]
            advice, _ = await advise_link(link, snap, now=time.time(), validate=schema_validator(bundled_schema()))
            seen.append(advice)
            return any(a.kind == "orphan_memory" for a in advice)
        await await_until(proven, 15, step=0.2)
        assert left, "the escaped worker should outlive its launcher and hold GPU 0"
        assert not any(a.kind != "orphan_memory" for advice in seen for a in advice), seen  # never from the log
        assert [a.kind for a in seen[-1]] == ["orphan_memory"], seen[-1]
        assert seen[-1][0].pid in left and seen[-1][0].gpu == 0
    finally:
        kill_quietly(left)
