"""The host's ring of GPU samples: bounded, private, and readable by a later process through the agent."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

from console.host.samplering import RING_FILE, SampleRing, read_samples
from console.link.protocol import BOOTSTRAP, shipped_payload

GPU = {"index": 0, "power_w": 300.0, "power_limit_w": 600.0, "mem_used_mib": 1000, "mem_total_mib": 97887,
       "util_pct": 50.0}


def test_ring_is_bounded_private_and_read_by_time(tmp_path):
    ring = SampleRing(str(tmp_path), every_s=1.0, keep=10)
    for i in range(35):
        ring.add([dict(GPU, power_w=float(i))], at=1000.0 + i)
    ring.add([GPU], at=1034.5)  # within every_s of the last line: not written
    path = tmp_path / RING_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = path.read_text().splitlines()
    assert 10 <= len(lines) <= 20
    pts = read_samples(str(tmp_path), since=1030.0)
    assert [p["power_w"] for p in pts] == [30.0, 31.0, 32.0, 33.0, 34.0]
    assert pts[0]["gpu"] == 0 and pts[0]["at"] == 1030.0


def test_garbage_lines_and_a_symlinked_ring_are_ignored(tmp_path):
    (tmp_path / RING_FILE).write_text('not json\n{"at": 1, "gpus": [[0, 1, 2, 3, 4, 5]]}\n{"at": "x"}\n')
    assert [p["power_w"] for p in read_samples(str(tmp_path))] == [1]
    other = tmp_path / "elsewhere"
    other.mkdir()
    target = tmp_path / "secret.txt"
    target.write_text("x")
    os.symlink(target, other / RING_FILE)
    ring = SampleRing(str(other), every_s=0)
    ring.add([GPU], at=5.0)
    assert target.read_text() == "x" and ring.error
    assert read_samples(str(other)) == []


def test_a_fresh_agent_process_serves_the_ring(tmp_path):
    sim = tmp_path / "sim"
    (sim / "alloc").mkdir(parents=True)
    (sim / "gpus.json").write_text(json.dumps([{"index": 0, "uuid": "GPU-r", "name": "Sim", "mem_total_mib": 97887,
                                                "power_limit_w": 600.0}]))
    runs = tmp_path / "runs"
    runs.mkdir()
    SampleRing(str(runs), every_s=0).add([GPU], at=time.time() - 60)  # written by an earlier agent
    p = subprocess.Popen([sys.executable, "-u", "-c", BOOTSTRAP], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        p.stdin.write((json.dumps(shipped_payload()) + "\n").encode())
        p.stdin.write((json.dumps({"interval": 0.2, "runs_dir": str(runs), "gpu_source": "sim",
                                   "sim_dir": str(sim)}) + "\n").encode())
        p.stdin.write(json.dumps({"id": 7, "op": "gpu_samples", "args": {"since": 0}}).encode() + b"\n")
        p.stdin.flush()
        deadline = time.monotonic() + 20
        reply = None
        while time.monotonic() < deadline and reply is None:
            line = p.stdout.readline()
            if not line:
                break
            msg = json.loads(line)
            if msg.get("id") == 7:
                reply = msg
        assert reply is not None and reply["ok"], reply
        points = reply["result"]["points"]
        assert points and points[0]["power_w"] == 300.0
    finally:
        p.stdin.close()
        p.wait(10)
