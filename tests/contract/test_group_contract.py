"""Contract (issue 30): the stand-in's multi-node checks equal the real sglang 0.5.23's (marker real_sglang).

Same command line to both: ``--nnodes 2 --tp-size 3`` is refused at start-up with SGLang's own assertion
(exit 1), before any rendezvous (the console derives ``--tp-size`` so that this never happens); a rank started
alone waits at ``Init parallel begin.`` until rank 0 joins (why the console starts the members all at once).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.contract.conftest import REPO, offline_env
from tests.contract.test_standin_contract import CPU, TINY
from tests.helpers.sshd import free_port as _free

pytestmark = pytest.mark.real_sglang

LINE = "AssertionError: tp_size must be divisible by number of nodes"


@pytest.mark.slow
def test_tp_not_divisible_by_nnodes_refused_alike(sglang_python, tmp_path):
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY))
    flags = ["--model-path", str(model), *CPU, "--tp-size", "3", "--nnodes", "2", "--node-rank", "0",
             "--dist-init-addr", "127.0.0.1:1"]
    real = subprocess.run([str(sglang_python), "-m", "sglang.launch_server", *flags], env=offline_env(),
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    sim = subprocess.run([sys.executable, "-m", "console.sim.sglang", *flags],
                         env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert (real.returncode, sim.returncode) == (1, 1), (real.stderr[-2000:], sim.stderr[-2000:])
    assert real.stderr.rstrip().splitlines()[-1] == sim.stderr.rstrip().splitlines()[-1] == LINE


def _wait_for(path, text: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return True
        time.sleep(0.2)
    return False


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_a_lone_rank_waits_at_init_parallel_until_rank0_joins_alike(sglang_python, tmp_path):
    """Rank 1 started first passes ``Init parallel begin.`` and no further, serving nothing, until rank 0 joins
    the rendezvous (the real one then fails on the CPU in its NCCL communicator; the point is that it moved on):
    why a group's members start all at once. Real: the tiny Llama on the CPU, one rank a node."""
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY))
    real_env = dict(offline_env(), SGLANG_CPU_OMP_THREADS_BIND="0|1")
    sim_env = dict(os.environ, PYTHONPATH=str(REPO), MTPCONSOLE_SIM_SPEED="20")
    for who, argv0, env, limit in (("real", [str(sglang_python), "-m", "sglang.launch_server"], real_env, 240),
                                   ("stand-in", [sys.executable, "-m", "console.sim.sglang"], sim_env, 30)):
        dist, ports = _free(), (_free(), _free())
        procs = []
        try:
            def start(rank: int) -> Path:
                log = tmp_path / f"{who}-{rank}.log"
                flags = ["--model-path", str(model), *CPU, "--tp-size", "2", "--nnodes", "2", "--node-rank", str(rank),
                         "--dist-init-addr", f"127.0.0.1:{dist}", "--port", str(ports[rank])]
                with open(log, "wb") as out:
                    procs.append(subprocess.Popen([*argv0, *flags], env=env, stdout=out, stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL, start_new_session=True))
                return log

            log1 = start(1)
            assert _wait_for(log1, "Init parallel begin.", limit), (who, log1.read_text()[-2000:])
            time.sleep(5.0)
            text = log1.read_text(errors="replace")
            assert procs[0].poll() is None and "Init parallel ends" not in text, (who, text[-2000:])
            assert not _port_open(ports[1]), who  # nothing served while it waits
            start(0)
            deadline = time.monotonic() + limit
            moved = False
            while time.monotonic() < deadline and not moved:
                text = log1.read_text(errors="replace")
                moved = "Init parallel ends" in text or procs[0].poll() is not None
                time.sleep(0.2)
            assert moved, (who, text[-2000:])
        finally:
            for p in procs:
                try:
                    os.killpg(p.pid, 9)
                except ProcessLookupError:
                    pass
                p.wait(timeout=30)


