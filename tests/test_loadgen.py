"""The load generator against a real SGLang stand-in subprocess on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from console.cli import main as cli_main
from console.sim import simgpu
from console.sim.loadgen import run_load
from tests.helpers.sshd import free_port as _free_port
from tests.helpers.wait import wait_until

REPO = Path(__file__).resolve().parents[1]




@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loadgen")
    sim_dir = tmp / "sim"
    simgpu.write_gpus(str(sim_dir), simgpu.default_gpus(1))
    model = tmp / "model"
    model.mkdir()
    shutil.copy(REPO / "tests" / "data" / "models" / "llama-3.1-8b.json", model / "config.json")
    port = _free_port()
    env = dict(os.environ, MTPCONSOLE_SIM_DIR=str(sim_dir), MTPCONSOLE_SIM_SPEED="50", PYTHONPATH=str(REPO))
    env.pop("MTPCONSOLE_SIM_FAULT", None)
    proc = subprocess.Popen([sys.executable, "-m", "console.sim.sglang", "--model-path", str(model), "--port",
                             str(port), "--max-running-requests", "8", "--mem-fraction-static", "0.85"],
                            cwd=str(REPO), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                return r.status == 200
        except OSError:
            return proc.poll() is not None  # it died: stop waiting (the assert says so)
    wait_until(healthy, 20, step=0.05)
    try:
        assert proc.poll() is None and healthy(), "stand-in did not become healthy"
        yield port
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait(timeout=5)


def test_run_load_counts_tokens(server):
    res = run_load(server, concurrency=4, requests=8, max_tokens=10)
    assert res.requests_ok == 8 and res.requests_failed == 0
    assert res.completion_tokens == 80
    assert res.tokens_per_s > 27  # 4 concurrent requests at ~27 tok/s each
    assert 15 < res.per_request_tokens_per_s < 40


def test_run_load_duration_is_bounded(server):
    t0 = time.monotonic()
    res = run_load(server, concurrency=2, duration=0.5, max_tokens=5)
    assert time.monotonic() - t0 < 3
    assert res.requests_ok >= 2


@pytest.mark.parametrize("kwargs", [{"host": "10.0.0.1"}, {"host": "example.com"}, {"concurrency": 0},
                                    {"max_tokens": 0}, {"requests": 0}])
def test_run_load_refuses_bad_input(kwargs):
    with pytest.raises(ValueError):
        run_load(1234, **kwargs)


def test_connection_refused_is_reported():
    res = run_load(_free_port(), concurrency=1, requests=2, max_tokens=2, timeout=2)
    assert res.requests_ok == 0 and res.requests_failed == 2 and res.errors


def test_cli_load(server, capsys):
    assert cli_main(["load", "--port", str(server), "--requests", "3", "--concurrency", "3", "--max-tokens", "5",
                     "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["requests_ok"] == 3 and data["completion_tokens"] == 15
    assert cli_main(["load", "--port", str(server), "--target", "192.168.1.5"]) == 2
    assert "127.0.0.1" in capsys.readouterr().err
