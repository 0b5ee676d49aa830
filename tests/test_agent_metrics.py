"""Servers started with --enable-metrics: the agent ships their raw /metrics text with its fetch time,
bounded in time and size, fetched off its loop (a slow endpoint never delays samples)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from console.host.metrics import MAX_BYTES, fetch, metrics_port
from console.model import ServerProc
from tests.helpers import metrics_server
from tests.helpers.agent_proc import AgentProc
from tests.helpers.sshd import free_port


@pytest.mark.parametrize("argv,port", [
    (["python3", "-m", "sglang.launch_server", "--port", "31000", "--enable-metrics"], 31000),
    (["python3", "-m", "sglang.launch_server", "--enable-metrics", "--port=31001"], 31001),
    (["python3", "-m", "sglang.launch_server", "--enable-metrics"], 30000),
    (["python3", "-m", "sglang.launch_server", "--port", "31000"], None),
])
def test_metrics_port(argv, port):
    assert metrics_port(argv, "sglang") == port


@pytest.fixture
def server(tmp_path):
    procs = []

    def start(mode: str) -> tuple[subprocess.Popen, int]:
        metrics_server.install(str(tmp_path / "pkg"))
        port = free_port()
        env = dict(os.environ, PYTHONPATH=str(tmp_path / "pkg"), METRICS_MODE=mode)
        p = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--port", str(port), "--enable-metrics"],
                             env=env, stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        return p, port

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_fetch_bounds(server):
    _, port = server("huge")
    r = fetch(port)
    assert r["metrics_error"] is None and r["metrics_truncated"] and len(r["metrics_text"]) == MAX_BYTES
    _, slow = server("slow")
    t0 = time.monotonic()
    r = fetch(slow)
    assert time.monotonic() - t0 < 1.0 and "timed out" in r["metrics_error"] and r["metrics_text"] is None
    r = fetch(free_port())
    assert "refused" in r["metrics_error"].lower()


def test_agent_ships_raw_metrics_text(server, tmp_path):
    p, _ = server("ok")
    slow_p, _ = server("slow")
    agent = AgentProc({"interval": 0.2, "runs_dir": str(tmp_path / "runs"), "gpu_source": "none"})
    try:
        agent.read_until(lambda m: m.get("type") == "ready")

        def launcher(m, pid):
            return next((s for s in m["data"]["servers"] if s["pid"] == pid), None)

        msg, _ = agent.read_until(lambda m: m.get("type") == "sample" and (launcher(m, p.pid) or {}).get(
            "metrics_text"), timeout=5)
        s = ServerProc.model_validate(launcher(msg, p.pid))
        assert s.role == "launcher" and s.metrics_text == metrics_server.TEXT and s.metrics_error is None
        assert s.metrics_at is not None and abs(s.metrics_at - msg["data"]["sampled_at"]) < 2
        msg, _ = agent.read_until(lambda m: m.get("type") == "sample" and "timed out" in (
            (launcher(m, slow_p.pid) or {}).get("metrics_error") or ""), timeout=5)
        samples = [t for t, m in agent.seen if m.get("type") == "sample"]
        gaps = [b - a for a, b in zip(samples, samples[1:])]
        assert max(gaps) < 1.5, gaps  # the endpoint takes 3 s: it never held the loop
    finally:
        agent.close()
