"""Issue 32, CPU side: the group load program (tests/gpu/group_load.py) in ``--no-gpu`` mode.

Real processes on 127.0.0.1: two members rendezvous over TCP at the dist-init address and run a heartbeat
"all-reduce" every step; rank 0 answers ``/health`` 503 while the group joins, then 200 and SGLang's ready line;
rank 1 serves the dummy health server on its own ``--port``; a SIGKILLed peer leaves the survivor hung (alive,
``/health`` 200, no new Decode line, a generate never answered) until it is killed or its ``--lifetime`` ends.
The GPU path (NCCL) runs on two real GPUs through tests/gpu/validate_group.py; here it is only checked to be
one clear line (status 3) where torch is missing, and ``--no-gpu`` is checked never to import torch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.wait import holds_for, wait_until
from tests.test_gpu_load import free_port, health

REPO = Path(__file__).resolve().parents[1]
GROUP = REPO / "tests" / "gpu" / "group_load.py"
READY = "The server is fired up and ready to roll!"


def _load_module():
    spec = importlib.util.spec_from_file_location("group_load_under_test", str(GROUP))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


grp = _load_module()


class Member:
    """One member process (its own session, output in a file)."""

    def __init__(self, tmp: Path, rank: int, addr: str, port: int, *flags: str, nnodes: int = 2) -> None:
        self.rank, self.port = rank, port
        self.path = tmp / ("rank%d.log" % rank)
        argv = [sys.executable, str(GROUP), "--no-gpu", "--nnodes", str(nnodes), "--node-rank", str(rank),
                "--dist-init-addr", addr, "--port", str(port), *flags]
        with open(self.path, "wb") as out:
            self.p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)

    def text(self) -> str:
        return self.path.read_text(errors="replace")

    def decode_lines(self) -> int:
        return self.text().count("Decode batch, ")

    def alive(self) -> bool:
        return self.p.poll() is None

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(10)


@pytest.fixture
def group(tmp_path):
    """start(rank, *flags) -> Member; every member is SIGKILLed (by its pid) at the end."""
    addr = "127.0.0.1:%d" % free_port()
    members: list[Member] = []

    def start(rank: int, *flags: str, port: int | None = None) -> Member:
        m = Member(tmp_path, rank, addr, port or free_port(), *flags)
        members.append(m)
        return m

    start.addr = addr  # type: ignore[attr-defined]
    yield start
    for m in members:
        m.kill()


FAST = ("--warmup", "0.3", "--log-interval", "0.3", "--period", "0.05")


def _generate(port: int, timeout: float) -> int | None:
    body = json.dumps({"text": "ping", "sampling_params": {"max_new_tokens": 1}}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/generate" % port, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:  # the timeout among them: no answer
        return None


def _ready(m: Member, timeout: float = 20.0) -> None:
    assert wait_until(lambda: not m.alive() or (health(m.port) == 200 and READY in m.text()), timeout), m.text()
    assert m.alive(), m.text()


# ------------------------------------------------------------------ joining, ready, the dummy health

def test_rank0_answers_503_until_rank1_joined_then_ready_and_rank1_serves_the_dummy_health(group):
    r0 = group(0, "--lifetime", "60", *FAST)
    assert wait_until(lambda: health(r0.port) == 503, 15), r0.text()
    assert holds_for(lambda: health(r0.port) == 503 and r0.alive(), 1.0), "rank 0 became ready alone"
    assert READY not in r0.text() and "Init torch distributed ends" not in r0.text()
    r1 = group(1, "--lifetime", "60", *FAST)
    _ready(r0)
    assert wait_until(lambda: health(r1.port) == 200, 15), r1.text()
    assert _generate(r0.port, 10) == 200
    t0, t1 = r0.text(), r1.text()
    order = ["Uvicorn running on http://127.0.0.1:%d" % r0.port, "TP0] Init torch distributed begin.",
             "TP0] Init torch distributed ends", "TP0] Load weight end", READY]
    pos = [t0.index(o) for o in order]
    assert pos == sorted(pos), t0
    assert re.search(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP1\] Init torch distributed ends", t1), t1
    assert READY not in t1 and "Decode batch" not in t1 and "Uvicorn running" not in t1  # no HTTP front on rank 1
    assert wait_until(lambda: r0.decode_lines() >= 1, 10), r0.text()
    assert '"GET /health HTTP/1.1" 503 Service Unavailable' in r0.text()


def test_rank1_started_first_retries_until_rank0_listens(group):
    r1 = group(1, "--lifetime", "60", *FAST)
    assert wait_until(lambda: "The client socket has failed to connect" in r1.text(), 15), r1.text()
    r0 = group(0, "--lifetime", "60", *FAST)
    _ready(r0)
    assert wait_until(lambda: health(r1.port) == 200, 15), r1.text()


# ------------------------------------------------------------------ a dead peer: the survivors hang

def test_sigkill_of_rank1_leaves_rank0_hung_answering_health_200_until_it_is_killed(group):
    r0 = group(0, "--lifetime", "120", *FAST)
    r1 = group(1, "--lifetime", "120", *FAST)
    _ready(r0)
    assert wait_until(lambda: r0.decode_lines() >= 2, 10), r0.text()
    r1.p.send_signal(signal.SIGKILL)
    r1.p.wait(10)
    time.sleep(1.0)  # the step in flight when the peer died is the last one (a busy machine: 1 s)
    before = r0.decode_lines()
    assert holds_for(lambda: r0.alive() and health(r0.port) == 200, 2.5), r0.text()
    assert r0.decode_lines() == before, "rank 0 kept stepping after its peer died:\n" + r0.text()
    assert _generate(r0.port, 1.5) is None  # a request never completes in a hung group
    assert r0.alive() and health(r0.port) == 200
    t = time.monotonic()
    r0.p.send_signal(signal.SIGTERM)  # killed: the hung member ends on its own after the stop grace
    assert r0.p.wait(15) == 0
    assert time.monotonic() - t < grp.STOP_GRACE_S + 3.0
    assert "Shutting down: received SIGTERM (a collective blocked since " in r0.text(), r0.text()
    assert "Traceback" not in r0.text()


def test_sigkill_of_rank0_leaves_rank1_hung_ignoring_sigterm_until_its_lifetime(group):
    r0 = group(0, "--lifetime", "60", *FAST)
    r1 = group(1, "--lifetime", "8", *FAST)
    _ready(r0)
    assert wait_until(lambda: health(r1.port) == 200, 15), r1.text()
    r0.p.send_signal(signal.SIGKILL)
    r0.p.wait(10)
    r1.p.send_signal(signal.SIGTERM)  # SGLang's non-zero ranks wait for rank 0's shutdown broadcast
    assert wait_until(lambda: grp.SHUTDOWN_REQ_LINE % 1 in r1.text(), 5), r1.text()
    assert holds_for(lambda: r1.alive() and health(r1.port) == 200, 1.5), r1.text()
    assert r1.p.wait(20) == 0  # its lifetime ends it, hung or not
    assert "Shutting down: lifetime of 8 s reached (a collective blocked since " in r1.text(), r1.text()


# ------------------------------------------------------------------ ending the group

def test_lifetime_ends_both_members(group):
    r0 = group(0, "--lifetime", "4", *FAST)
    r1 = group(1, "--lifetime", "4", *FAST)
    assert r0.p.wait(20) == 0 and r1.p.wait(20) == 0
    assert "Shutting down: " in r0.text() and "Shutting down: " in r1.text()
    assert READY in r0.text() and "collective blocked" not in r0.text() + r1.text()


def test_sigterm_of_rank0_stops_the_whole_group(group):
    r0 = group(0, "--lifetime", "60", *FAST)
    r1 = group(1, "--lifetime", "60", *FAST)
    _ready(r0)
    assert wait_until(lambda: health(r1.port) == 200, 15)
    r0.p.send_signal(signal.SIGTERM)
    assert r0.p.wait(10) == 0 and r1.p.wait(10) == 0
    assert "Shutting down: received SIGTERM." in r0.text()
    assert "Shutting down: rank 0 stopped the group (ShutdownReq)." in r1.text()


def test_a_taken_dist_init_address_is_torchs_listen_error_and_status_1():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        dport = s.getsockname()[1]
        p = subprocess.run([sys.executable, str(GROUP), "--no-gpu", "--nnodes", "2", "--node-rank", "0",
                            "--dist-init-addr", "127.0.0.1:%d" % dport, "--port", str(free_port()),
                            "--lifetime", "5"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "The server socket has failed to listen on any local network address. port: %d" % dport in p.stdout


# ------------------------------------------------------------------ arguments, environment, imports

@pytest.mark.parametrize("argv, message", [
    (["--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "127.0.0.1:1"], "--node-rank 2 is outside 0..1"),
    (["--nnodes", "2", "--node-rank", "1"], "--dist-init-addr HOST:PORT is required with --nnodes 2"),
    (["--nnodes", "2", "--dist-init-addr", "nohostport"], "invalid --dist-init-addr"),
    (["--nnodes", "2", "--dist-init-addr", "127.0.0.1:70000"], "invalid --dist-init-addr"),
    (["--nnodes", "0"], "--nnodes must be 1..64"),
    (["--nnodes", "2", "--dist-init-addr", "h:1", "--tp-size", "3", "--no-gpu"], "must be divisible by --nnodes 2"),
    (["--nnodes", "2", "--dist-init-addr", "h:1", "--tp-size", "4"], "this load runs one GPU a member"),
    (["--port", "0"], "port must be 1..65535"),
    (["--duty", "2"], "must be between 0 and 1"),
    (["--lifetime", "0"], "must be > 0"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_arguments_are_one_argparse_error(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        grp.parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bad_arguments_exit_2_as_a_process():
    p = subprocess.run([sys.executable, str(GROUP), "--no-gpu", "--nnodes", "2", "--node-rank", "5"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--node-rank 5 is outside 0..1" in p.stderr and "Traceback" not in p.stderr


def test_defaults_and_the_derived_values():
    a = grp.parse_args(["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "127.0.0.1:29500"])
    assert (a.nnodes, a.node_rank, a.dist_init_addr, a.tp_size, a.port) == (2, 1, ("127.0.0.1", 29500), 2, 30000)
    assert a.dist_timeout == a.lifetime + 600.0  # torch's watchdog never ends a hung member before its lifetime
    assert grp.parse_args(["--tensor-parallel-size", "1"]).tp_size == 1


def test_nvlink_multicast_is_forced_off_and_loopback_interfaces_default_to_lo():
    a = grp.parse_args(["--nnodes", "2", "--dist-init-addr", "127.0.0.1:29500"])
    env = grp.group_env(a, {"NCCL_NVLS_ENABLE": "1"})
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert env["NCCL_SOCKET_IFNAME"] == "lo" and env["GLOO_SOCKET_IFNAME"] == "lo"
    kept = grp.group_env(a, {"NCCL_SOCKET_IFNAME": "eth0"})
    assert "NCCL_SOCKET_IFNAME" not in kept and kept["GLOO_SOCKET_IFNAME"] == "lo"  # the operator's value stays
    remote = grp.group_env(grp.parse_args(["--nnodes", "2", "--dist-init-addr", "10.0.0.5:29500"]), {})
    assert "NCCL_SOCKET_IFNAME" not in remote and remote["NCCL_NVLS_ENABLE"] == "0"


NO_TORCH = r"""
import importlib.abc, importlib.util, sys
asked = []
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            asked.append(name)
            raise ImportError("torch is blocked in this test")
        return None
sys.meta_path.insert(0, Block())
spec = importlib.util.spec_from_file_location("group_load", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
rc = mod.main(["--no-gpu", "--port", sys.argv[2], "--lifetime", "1.5", "--warmup", "0.2", "--log-interval", "0.3"])
print("RESULT", rc, asked, sorted(m for m in sys.modules if m.split(".")[0] == "torch"))
"""


def test_no_gpu_never_imports_torch():
    p = subprocess.run([sys.executable, "-c", NO_TORCH, str(GROUP), str(free_port())], capture_output=True,
                       text=True, timeout=60)
    assert "RESULT 0 [] []" in p.stdout, p.stdout + p.stderr
    assert READY in p.stdout


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(_cuda_available(), reason="torch sees a GPU here")
def test_gpu_mode_without_torch_or_cuda_is_one_clear_line_and_status_3():
    p = subprocess.run([sys.executable, str(GROUP), "--nnodes", "2", "--node-rank", "0", "--dist-init-addr",
                        "127.0.0.1:%d" % free_port(), "--port", str(free_port()), "--lifetime", "5"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 3, p.stdout + p.stderr
    assert "GPU load cannot start: " in p.stderr and "Traceback" not in p.stdout + p.stderr


# ------------------------------------------------------------------ the device-run script's own pieces (no GPU)

def _validate_group():
    spec = importlib.util.spec_from_file_location("validate_group_under_test", str(REPO / "tests" / "gpu" /
                                                                                  "validate_group.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_validate_group_writes_two_local_hosts_the_console_loads(tmp_path):
    import argparse

    from console.config import load_config

    vg = _validate_group()
    args = argparse.Namespace(out=str(tmp_path / "out"), work=str(tmp_path / "work"), budget=10.0, gpu0=0, gpu1=1,
                              port=30000, mem_gb=1.0, lifetime=10.0, no_gpu=True)
    run = vg.GroupRun(args)
    cfg = load_config(run.cfgs["group"])
    h0, h1 = cfg.hosts["node0"], cfg.hosts["node1"]
    assert h0.transport == h1.transport == "local" and h0.runs_dir != h1.runs_dir
    assert h0.launch_env == h1.launch_env and h0.launch_env["NCCL_NVLS_ENABLE"] == "0"
    assert h0.launch_env["NCCL_SOCKET_IFNAME"] == h0.launch_env["GLOO_SOCKET_IFNAME"] == "lo"
    assert h0.server_command[-1].endswith("group_load.py")
    argv = " ".join(vg.launch_argv(run, None))
    assert "--host node0 --host node1 --gpu node0:0 --gpu node1:1 --nnodes 2 --port 30000 --wait --json" in argv
    assert argv.endswith("--no-gpu")


def test_the_fake_nvml_of_the_dry_run_puts_each_member_on_its_own_gpu(monkeypatch):
    spec = importlib.util.spec_from_file_location("fake_pynvml_under_test",
                                                  str(REPO / "tests" / "gpu" / "fake_nvml" / "pynvml.py"))
    nv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nv)
    p = subprocess.Popen([sys.executable, str(GROUP), "--no-gpu", "--port", str(free_port()), "--lifetime", "20"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": "1"})
    try:
        monkeypatch.setenv("FAKE_NVML_GPUS", "2")
        assert nv.nvmlDeviceGetCount() == 2
        assert wait_until(lambda: p.pid in [x.pid for x in nv.nvmlDeviceGetComputeRunningProcesses(1)], 10)
        assert p.pid not in [x.pid for x in nv.nvmlDeviceGetComputeRunningProcesses(0)]
        monkeypatch.setenv("FAKE_NVML_GPUS", "1")  # one fake GPU (validate.py, the agent's tests): everything on it
        assert p.pid in [x.pid for x in nv.nvmlDeviceGetComputeRunningProcesses(0)]
    finally:
        p.kill()
        p.wait(10)
