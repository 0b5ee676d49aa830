"""Issue 30 item 1: the SGLang stand-in speaks multi-node (``--nnodes --node-rank --dist-init-addr``).

Two real stand-in processes on 127.0.0.1, each on its own simulated GPUs: they rendezvous over TCP at the
dist-init address; rank 0 serves HTTP only once rank 1 joined; rank 1 serves the dummy health server on its
own ``--port``, runs no detokenizer and only logs a SIGTERM; when rank 1 dies, rank 0 hangs (never exits,
``/health`` 200, a generate never answers). Real SGLang's behaviour is read from its 0.5.23 source (see
console/sim/sglang_group.py); tests/contract/test_group_contract.py holds the shared check to the real package.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.sim_files import make_sim, sim_env
from tests.helpers.sshd import free_port as _free_port
from tests.helpers.wait import holds_for, wait_until


def _health(port: int) -> int | None:
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return None


def _children(pid: int) -> list[str]:
    """The command lines of ``pid``'s process group (the stand-in's tree)."""
    out = subprocess.run(["ps", "-o", "args=", "-g", str(pid)], capture_output=True, text=True, timeout=10).stdout
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


class Member:
    def __init__(self, tmp: Path, rank: int, nnodes: int, tp: int, addr: str, port: int, **env: str) -> None:
        d, m = make_sim(tmp / ("node%d" % rank), gpus=2, tag="g%d" % rank)
        self.log = tmp / ("rank%d.log" % rank)
        self.port = port
        argv = [sys.executable, "-m", "console.sim.sglang", "--model-path", str(m), "--tp-size", str(tp),
                "--nnodes", str(nnodes), "--node-rank", str(rank), "--dist-init-addr", addr, "--port", str(port)]
        with open(self.log, "wb") as out:
            self.p = subprocess.Popen(argv, env=dict(os.environ, **sim_env(d), **env), stdout=out,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait(timeout=10)


@pytest.fixture
def members(tmp_path):
    started: list[Member] = []

    def start(rank: int, **kw: object) -> Member:
        m = Member(tmp_path, rank, **kw)  # type: ignore[arg-type]
        started.append(m)
        return m

    yield start
    for m in started:
        m.kill()


def test_rank0_serves_only_when_rank1_joined_then_rank1_dies_and_rank0_hangs_with_health_200(members):
    addr = "127.0.0.1:%d" % _free_port()
    p0, p1 = _free_port(), _free_port()
    r0 = members(0, nnodes=2, tp=4, addr=addr, port=p0)
    # alone, rank 0 passes "Init parallel begin." and nothing more: no HTTP, no ready line (waited for first: a
    # loaded machine starts the interpreter slowly)
    wait_until(lambda: "Init parallel begin." in r0.text(), 30)
    assert holds_for(lambda: _health(p0) is None and r0.p.poll() is None, 2.0)
    assert "Init parallel ends." not in r0.text()
    r1 = members(1, nnodes=2, tp=4, addr=addr, port=p1)
    wait_until(lambda: _health(p0) == 200 and _health(p1) == 200, 20)
    assert "The server is fired up and ready to roll!" in r0.text()
    assert "fired up" not in r1.text()  # rank >= 1 has no tokenizer/HTTP server, only the dummy health server
    kids1 = _children(r1.p.pid)
    assert any("sglang::scheduler_TP2" in c for c in kids1) and any("sglang::scheduler_TP3" in c for c in kids1)
    assert not any("sglang::detokenizer" in c for c in kids1), kids1
    assert any("sglang::detokenizer" in c for c in _children(r0.p.pid))
    # rank >= 1 only logs a SIGTERM: it waits for rank 0's ShutdownReq
    os.kill(r1.p.pid, signal.SIGTERM)
    wait_until(lambda: "SIGTERM received on node_rank 1; waiting for the rank-0 ShutdownReq broadcast" in r1.text(), 5)
    assert holds_for(lambda: r1.p.poll() is None and _health(p1) == 200, 1.0)
    # a peer dies: the survivor hangs: alive, /health 200, a generate never answers
    r1.kill()
    assert holds_for(lambda: r0.p.poll() is None and _health(p0) == 200, 2.5)
    req = urllib.request.Request("http://127.0.0.1:%d/generate" % p0, headers={"Content-Type": "application/json"},
                                 data=json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 1}}).encode())
    with pytest.raises((TimeoutError, urllib.error.URLError, socket.timeout)):
        urllib.request.urlopen(req, timeout=2)
    assert r0.p.poll() is None


def test_rank1_scheduler_killed_takes_its_node_down_and_rank0_hangs(members):
    addr = "127.0.0.1:%d" % _free_port()
    p0, p1 = _free_port(), _free_port()
    r0 = members(0, nnodes=2, tp=2, addr=addr, port=p0)
    r1 = members(1, nnodes=2, tp=2, addr=addr, port=p1)
    wait_until(lambda: _health(p0) == 200 and _health(p1) == 200, 20)
    out = subprocess.run(["pgrep", "-g", str(r1.p.pid), "-f", "sglang::scheduler"], capture_output=True, text=True,
                         timeout=10).stdout.split()
    assert len(out) == 1  # tp 2 over 2 nodes: one scheduler per node
    os.kill(int(out[0]), signal.SIGKILL)
    wait_until(lambda: r1.p.poll() is not None, 5)  # its launcher kills its own tree, as SGLang's SIGQUIT path does
    assert "crashed with exit code -9" in r1.text()
    assert holds_for(lambda: r0.p.poll() is None and _health(p0) == 200, 2.0)


def test_tp_not_divisible_by_nnodes_refused_like_sglang(members):
    r = members(0, nnodes=2, tp=3, addr="127.0.0.1:%d" % _free_port(), port=_free_port())
    assert r.p.wait(timeout=30) == 1
    assert "AssertionError: tp_size must be divisible by number of nodes" in r.text()


def test_dist_init_port_held_fails_rank0_like_torch(members):
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        r = members(0, nnodes=2, tp=2, addr="127.0.0.1:%d" % port, port=_free_port())
        r.p.wait(timeout=30)
    assert r.p.returncode == -9  # the scheduler's failure kills the launcher's tree, as SGLang's SIGQUIT path
    assert "DistNetworkError: The server socket has failed to listen on any local network address. port: %d" % port \
        in r.text()


def test_rank0_shutdown_ends_rank1(members):
    addr = "127.0.0.1:%d" % _free_port()
    p0, p1 = _free_port(), _free_port()
    r0 = members(0, nnodes=2, tp=2, addr=addr, port=p0)
    r1 = members(1, nnodes=2, tp=2, addr=addr, port=p1)
    wait_until(lambda: _health(p0) == 200 and _health(p1) == 200, 20)
    t = time.monotonic()
    os.kill(r0.p.pid, signal.SIGTERM)
    assert r0.p.wait(timeout=10) == 0
    assert r1.p.wait(timeout=10) == 0  # rank 0's shutdown stops every node's schedulers
    assert time.monotonic() - t < 10
