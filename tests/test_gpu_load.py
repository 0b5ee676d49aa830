"""CPU-only checks of the GPU load program (tests/gpu/gpu_load.py) and of the agent's NVML memory read.

The load program's GPU path needs torch and CUDA and is exercised on real GPUs by
tests/gpu/validate.py (see docs/gpu-validation.md); here its arguments, its log lines (as the
console's classifier reads them), its HTTP health behaviour and its lifetime/SIGTERM handling
run with ``--no-gpu``, which needs no torch. One test runs the real GPU path and is skipped
unless torch sees a CUDA device.
"""

from __future__ import annotations

import http.client
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from tests.helpers.sshd import free_port
from tests.helpers.wait import wait_until

REPO = Path(__file__).resolve().parents[1]
LOAD = REPO / "tests" / "gpu" / "gpu_load.py"
STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ")


def _load_module():
    spec = importlib.util.spec_from_file_location("gpu_load_under_test", str(LOAD))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gl = _load_module()




def health(port: int) -> int:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        c.request("GET", "/health")
        return c.getresponse().status
    except OSError:
        return 0
    finally:
        c.close()


def start(*flags: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(LOAD), *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def wait_health(port: int, want: int, proc: subprocess.Popen, timeout: float = 10.0) -> float:
    """When /health first answered ``want`` (AssertionError if it never did, or the load exited first)."""
    answered = wait_until(lambda: proc.poll() is not None or health(port) == want, timeout, step=0.05)
    if proc.poll() is not None:
        raise AssertionError(f"load exited early: {proc.returncode}")
    if not answered:
        raise AssertionError(f"/health never answered {want}")
    return time.monotonic()


# ------------------------------------------------------------------ arguments

def test_defaults_are_a_bounded_moderate_load():
    a = gl.parse_args([])
    assert (a.mem_gb, a.duty, a.port, a.lifetime, a.oom, a.matrix) == (8.0, 0.5, 30000, 300.0, False, 8192)


@pytest.mark.parametrize("argv, message", [
    (["--duty", "1.5"], "must be between 0 and 1"),
    (["--duty", "half"], "expected a number between 0 and 1"),
    (["--mem-gb", "-1"], "must be a finite number >= 0"),
    (["--mem-gb", "nan"], "must be a finite number >= 0"),
    (["--lifetime", "0"], "must be > 0"),
    (["--port", "70000"], "port must be 1..65535"),
    (["--port", "http"], "expected a port number"),
    (["--matrix", "8"], "matrix size must be 64..32768"),
    (["--period", "5", "--lifetime", "1"], "must not exceed --lifetime"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_arguments_are_one_clear_argparse_error(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        gl.parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_duty_split():
    assert gl.duty_split(0.3, 0.1) == pytest.approx((0.03, 0.07))
    assert gl.duty_split(1.0, 0.1) == (0.1, 0.0)
    assert gl.duty_split(0.0, 0.1) == (0.0, 0.1)


# ------------------------------------------------------------------ log lines

def test_log_lines_have_sglangs_timestamp_prefix(capsys):
    gl.log("Load weight begin. avail mem=1.00 GB")
    out = capsys.readouterr().out
    assert STAMP.match(out) and out.endswith("Load weight begin. avail mem=1.00 GB\n")


def test_the_console_classifier_reads_the_load_as_sglang():
    from console.core.classify import classify

    stamp = "[2026-11-29 21:08:10] "
    text = "".join(stamp + line + "\n" for line in [
        "Load weight begin. avail mem=138.91 GB",
        "Load weight end. elapsed=0.03 s, type=GpuLoad, dtype=torch.bfloat16, avail mem=98.82 GB, mem usage=40.38 GB.",
        "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
        'INFO:     127.0.0.1:44240 - "GET /health HTTP/1.1" 503 Service Unavailable',
    ])
    assert classify(text).state == "loading"
    text += stamp + gl.READY_LINE + "\n" + stamp + gl.decode_line(12345.6, 690.1, 40.38, 1.0, 99) + "\n"
    c = classify(text)
    assert c.state == "ready"
    assert c.metrics is not None and c.metrics.gen_throughput == pytest.approx(12345.6)


# ------------------------------------------------------------------ the program, without a GPU

def test_no_gpu_run_warms_up_with_503_then_serves_200_and_ends_at_its_lifetime():
    port = free_port()
    p = start("--no-gpu", "--port", str(port), "--warmup", "0.8", "--lifetime", "2.5", "--log-interval", "0.3",
              "--duty", "0.2")
    try:
        t503 = wait_health(port, 503, p)
        t200 = wait_health(port, 200, p)
        assert t200 - t503 > 0.2
        out, _ = p.communicate(timeout=10)
    finally:
        p.kill()
    text = out.decode()
    lines = text.splitlines()
    assert p.returncode == 0, text
    assert all(STAMP.match(line) for line in lines), text
    order = ["Load weight begin", "Load weight end", "Uvicorn running on http://127.0.0.1:%d" % port,
             gl.READY_LINE, "Decode batch, ", "Shutting down: lifetime of 2 s reached."]
    pos = [next(i for i, line in enumerate(lines) if o in line) for o in order]
    assert pos == sorted(pos), text
    assert "mem usage=0.00 GB." in text
    assert '"GET /health HTTP/1.1" 503 Service Unavailable' in text and '"GET /health HTTP/1.1" 200 OK' in text


def test_sigterm_ends_the_load_promptly_with_status_0():
    port = free_port()
    p = start("--no-gpu", "--port", str(port), "--warmup", "0", "--lifetime", "60", "--duty", "0.5")
    try:
        wait_health(port, 200, p)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=10)
        assert time.monotonic() - t0 < 3.0
    finally:
        p.kill()
    assert p.returncode == 0
    assert "Shutting down: received SIGTERM." in out.decode()


def test_a_busy_port_is_uvicorns_bind_error_and_status_1():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = start("--no-gpu", "--port", str(port), "--lifetime", "5")
        out, _ = p.communicate(timeout=10)
    assert p.returncode == 1
    assert "error while attempting to bind on address ('127.0.0.1', %d)" % port in out.decode()


def test_oom_without_a_gpu_fails_like_a_scheduler_exception():
    p = start("--no-gpu", "--oom", "--port", str(free_port()), "--lifetime", "5")
    out, _ = p.communicate(timeout=10)
    text = out.decode()
    assert p.returncode == 1
    assert "Scheduler hit an exception: Traceback" in text and "MemoryError: --oom needs a GPU" in text


def _cuda_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(_cuda_available(), reason="torch sees a GPU here")
def test_without_torch_or_cuda_the_gpu_path_is_one_clear_line_and_status_3():
    p = start("--port", str(free_port()), "--lifetime", "5")
    out, _ = p.communicate(timeout=60)
    text = out.decode()
    assert p.returncode == 3, text
    assert "GPU load cannot start: " in text and "Traceback" not in text


@pytest.mark.skipif(not _cuda_available(), reason="needs torch with a CUDA GPU")
def test_real_gpu_load_holds_memory_and_serves():
    port = free_port()
    p = start("--mem-gb", "1", "--duty", "0.5", "--port", str(port), "--warmup", "1", "--lifetime", "4",
              "--log-interval", "1", "--matrix", "2048")
    try:
        wait_health(port, 200, p, timeout=60)
        out, _ = p.communicate(timeout=30)
    finally:
        p.kill()
    text = out.decode()
    assert p.returncode == 0, text
    m = re.search(r"mem usage=([\d.]+) GB\.", text)
    assert m and float(m.group(1)) >= 1.0
    assert re.search(r"achieved TFLOP/s: [1-9]", text), text


# ------------------------------------------------------------------ the agent's NVML memory read

class _Mem:
    def __init__(self, used, total, reserved=0):
        self.used, self.total, self.reserved, self.free = used, total, reserved, total - used - reserved


def _fake_pynvml(v2_error: Exception | None = None, v1_error: Exception | None = None):
    """A pynvml with one GPU: v1 'used' counts 615 MiB reserved, v2 'used' does not (as on the H200)."""
    mib = 1 << 20
    nv = types.SimpleNamespace(NVML_TEMPERATURE_GPU=0, nvmlMemory_v2=0x2000028, calls=[])

    def mem(h, version=None):
        nv.calls.append(version)
        if version is None:
            if v1_error:
                raise v1_error
            return _Mem(42675 * mib, 143771 * mib)
        if v2_error:
            raise v2_error
        return _Mem(42060 * mib, 143771 * mib, 615 * mib)

    nv.nvmlInit = lambda: None
    nv.nvmlDeviceGetCount = lambda: 1
    nv.nvmlDeviceGetHandleByIndex = lambda i: "h%d" % i
    nv.nvmlDeviceGetName = lambda h: "NVIDIA H200"
    nv.nvmlDeviceGetUUID = lambda h: "GPU-x"
    nv.nvmlDeviceGetPowerUsage = lambda h: 691044
    nv.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700000
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=98, memory=40)
    nv.nvmlDeviceGetMemoryInfo = mem
    nv.nvmlDeviceGetTemperature = lambda h, s: 57
    nv.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=487, usedGpuMemory=42052 * mib)]
    return nv


def _agent():
    from console.host import gpus

    return gpus


def test_nvml_memory_is_v2_used_like_nvidia_smi(monkeypatch):
    nv = _fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    g = _agent().NvmlGpus().sample()[0]
    assert (g["mem_used_mib"], g["mem_total_mib"]) == (42060, 143771)
    assert (g["power_w"], g["power_limit_w"], g["util_pct"], g["temp_c"]) == (691.044, 700.0, 98.0, 57.0)
    assert [(p["pid"], p["used_mib"]) for p in g["procs"]] == [(487, 42052)] and g["errors"] == {}
    assert g["mem_reserved_mib"] == 615


def test_nvml_memory_falls_back_to_v1_when_v2_is_unsupported_and_remembers(monkeypatch):
    nv = _fake_pynvml(v2_error=RuntimeError("Function Not Found"))
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    gpus = _agent().NvmlGpus()
    assert gpus.sample()[0]["mem_used_mib"] == 42675
    assert gpus.sample()[0]["mem_used_mib"] == 42675
    assert nv.calls == [nv.nvmlMemory_v2, None, None]


def test_nvml_memory_failure_is_a_value_not_a_dead_agent(monkeypatch):
    nv = _fake_pynvml(v2_error=RuntimeError("GPU is lost"), v1_error=RuntimeError("GPU is lost"))
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    gpus = _agent().NvmlGpus()
    g = gpus.sample()[0]
    assert g["mem_used_mib"] is None and g["errors"]["mem_used_mib"] == "GPU is lost"
    assert not gpus.v1_only  # a transient failure of both does not give up on v2
