"""Issue 31 item 2: the fleet benchmark's simulated hosts each run their agent in a PID namespace of their own
(``unshare -pf --mount-proc``, bench/ns_host.py) with their serving stand-in, so each agent's /proc scan sees its
own host's processes only. Where the namespace is refused (not root, a container that forbids it) the server says
so (``pidns`` false) and the benchmark falls back to the shared /proc; this test then checks that fallback."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.fleet_server import pidns_works
from bench.links import open_link
from bench.simhost import start_stand_in, stop, write_sim_dir
from tests.helpers.wait import await_until

REPO = Path(__file__).resolve().parents[1]


async def test_each_simulated_host_sees_only_its_own_processes(tmp_path):
    d = tmp_path / "fleet"
    d.mkdir()
    srv = subprocess.Popen([sys.executable, "-m", "bench.fleet_server", str(d), "2"], cwd=REPO, stdin=subprocess.PIPE,
                           stdout=subprocess.DEVNULL, stderr=open(tmp_path / "server.log", "wb"), start_new_session=True)
    links, stand_ins = [], []
    try:
        assert await await_until(lambda: (d / "ready").exists(), 30), (tmp_path / "server.log").read_text()
        ready = json.loads((d / "ready").read_text())
        assert ready == {"n": 2, "pidns": pidns_works()}
        for i in range(2):
            sim = write_sim_dir(d / f"host-{i:02d}" / "sim", 8)
            if not ready["pidns"]:
                stand_ins.append(start_stand_in(f"serving-stand-in-{i:02d} --tp-size 8", sim))
            links.append(await open_link(f"fleet-{i:02d}", d / "ssh_config", d / f"host-{i:02d}" / "runs",
                                         gpu_source="sim", sim_dir=sim, interval=0.2))
        assert await await_until(lambda: all(lk.book.deltas >= 2 for lk in links), 20)
        for lk in links:
            snap = lk.snapshot()
            holders = {p.pid for g in snap.gpus for p in g.procs}
            assert len(snap.gpus) == 8 and len(holders) == 1, holders  # its own stand-in, not the other host's
            if ready["pidns"]:
                assert lk.hello["pid"] == 1  # the agent is its namespace's init
                assert holders == {2}  # the stand-in, numbered as its namespace numbers it
            else:
                assert holders == {stand_ins[links.index(lk)].pid}
        if ready["pidns"]:  # the two namespaces are two process tables
            r = await links[0].client.run(["sh", "-c", "ls /proc | grep -c '^[0-9]'"])
            assert int(r.stdout.strip()) <= 5, r.stdout
    finally:
        await asyncio.gather(*(lk.close() for lk in links), return_exceptions=True)
        for p in stand_ins:
            stop(p)
        srv.stdin.close()
        try:
            srv.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(srv.pid, 9)
            srv.wait(5)
