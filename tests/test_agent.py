"""The agent as a unit: NVML scenario fakes, nvidia-smi CSV parsing, pushed exit events."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from console.host import gpus as gpus_module
from console.link.protocol import BOOTSTRAP, shipped_payload
from tests.helpers.wait import await_until


def load_agent():
    """The GPU sources module (it imports pynvml lazily, so a monkeypatched fake is seen)."""
    return gpus_module


class NVMLError(Exception):
    pass


def fake_pynvml(scenario: str):
    """A gpustat-style scenario fake: 'ok', 'not_supported', 'one_failing', 'pid_gone'."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.NVML_TEMPERATURE_GPU = 0
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetCount = lambda: 2
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"

    def guard(h, value):
        if scenario == "one_failing" and h == 1:
            raise NVMLError("GPU is lost")
        return value

    def temp(h, kind):
        if scenario == "not_supported":
            raise NVMLError("Not Supported")
        return guard(h, 31)

    m.nvmlDeviceGetPowerUsage = lambda h: guard(h, 118_000)
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: guard(h, 700_000)
    m.nvmlDeviceGetUtilizationRates = lambda h: guard(h, types.SimpleNamespace(gpu=42))
    m.nvmlDeviceGetMemoryInfo = lambda h, *v: guard(h, types.SimpleNamespace(used=2 << 30, total=141 << 30,
                                                                            reserved=615 << 20))
    m.nvmlDeviceGetTemperature = temp
    procs = [types.SimpleNamespace(pid=999999 if scenario == "pid_gone" else 4242, usedGpuMemory=1 << 30),
             types.SimpleNamespace(pid=4343, usedGpuMemory=None)]
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: guard(h, procs)
    return m


@pytest.mark.parametrize("scenario", ["ok", "not_supported", "one_failing", "pid_gone"])
def test_nvml_scenarios_become_values(monkeypatch, scenario):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(scenario))
    agent = load_agent()
    src = agent.open_gpu_source("auto", None)
    assert src.name == "nvml"
    g0, g1 = src.sample()
    assert g0["power_w"] == 118.0 and g0["power_limit_w"] == 700.0 and g0["mem_total_mib"] == 141 * 1024
    assert g0["procs"][0]["used_mib"] == 1024 and g0["procs"][1]["used_mib"] is None
    assert g0["mem_reserved_mib"] == 615  # the driver's own reserve: not free for a launch
    from console.model import GpuSample
    assert GpuSample.model_validate(g0).mem_free_mib == 141 * 1024 - 2048 - 615
    if scenario == "not_supported":
        assert g0["temp_c"] is None and "Not Supported" in g0["errors"]["temp_c"]
    if scenario == "one_failing":
        assert g1["power_w"] is None and g1["mem_used_mib"] is None and "GPU is lost" in g1["errors"]["power_w"]
        assert g0["errors"] == {}
    if scenario == "pid_gone":
        assert g0["procs"][0]["pid"] == 999999  # reported as the driver says; the console marks it gone


def test_nvml_process_names_come_from_proc(monkeypatch):
    m = fake_pynvml("ok")
    import os
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=0)]
    monkeypatch.setitem(sys.modules, "pynvml", m)
    g0 = load_agent().open_gpu_source("auto", None).sample()[0]
    assert g0["procs"][0]["name"] == Path("/proc/self/comm").read_text().strip()


def test_no_nvml_no_smi_is_an_explicit_state(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", "/nonexistent")
    agent = load_agent()
    src = agent.open_gpu_source("auto", None)
    assert src.name == "none" and "pynvml not importable" in src.error and "nvidia-smi not found" in src.error


SMI_GPUS = """0, GPU-4f0d5a1e-93c1-1b2e-7c55-0a1b2c3d4e5f, NVIDIA H200, 118.45, 700.00, 0, 0, 143771, 31
1, GPU-9a8b7c6d-1111-2222-3333-444455556666, NVIDIA H200, [N/A], 700.00, [N/A], 81234, 143771, 45
"""
SMI_APPS = """4242, python3, 81230, GPU-9a8b7c6d-1111-2222-3333-444455556666
"""


def test_smi_csv_parser_driver_580_output():
    agent = load_agent()
    gpus = agent.parse_smi_apps(SMI_APPS, agent.parse_smi_gpus(SMI_GPUS))
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0]["power_w"] == 118.45 and gpus[0]["mem_total_mib"] == 143771 and gpus[0]["temp_c"] == 31
    assert gpus[1]["power_w"] is None and gpus[1]["errors"]["power_w"] == "N/A"
    assert gpus[1]["procs"] == [{"pid": 4242, "used_mib": 81230, "name": "python3"}]


@pytest.mark.parametrize("garbage", ["", "garbage\n", "0, x\n", "a,b,c,d,e,f,g,h,i\n", "\x00\xff,,,\n",
                                     "0, u, n, 1e999999, zz, -, 1, 2, 3\n"])
def test_smi_csv_parser_malformed(garbage):
    agent = load_agent()
    gpus = agent.parse_smi_gpus(garbage)
    for g in gpus:
        assert isinstance(g["index"], int)
    agent.parse_smi_apps(garbage, gpus)


def start_agent(tmp_path, interval=5.0):
    p = subprocess.Popen([sys.executable, "-u", "-c", BOOTSTRAP], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    p.stdin.write((json.dumps(shipped_payload()) + "\n").encode())
    p.stdin.write((json.dumps({"interval": interval, "runs_dir": str(tmp_path / "runs"), "gpu_source": "none"})
                   + "\n").encode())
    p.stdin.flush()
    return p


def read_until(p, pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        msg = json.loads(line)
        if pred(msg):
            return msg, time.monotonic()
    raise AssertionError("message not seen")


def test_exit_event_pushed_within_100ms(tmp_path):
    agent = start_agent(tmp_path)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        read_until(agent, lambda m: m.get("type") == "ready")
        stat = Path(f"/proc/{victim.pid}/stat").read_text()
        start = int(stat[stat.rfind(")") + 2:].split()[19])
        agent.stdin.write(json.dumps({"id": 1, "op": "watch", "args": {"pid": victim.pid, "start_ticks": start}})
                          .encode() + b"\n")
        agent.stdin.flush()
        read_until(agent, lambda m: m.get("id") == 1)
        t_kill = time.monotonic()
        victim.kill()
        msg, t_seen = read_until(agent, lambda m: m.get("type") == "event" and m.get("pid") == victim.pid)
        assert msg["kind"] == "exit"
        assert t_seen - t_kill < 0.1, t_seen - t_kill  # an upper bound, not a benchmark
    finally:
        victim.kill()
        victim.wait()
        agent.stdin.close()
        agent.wait(5)


def test_agent_survives_bad_requests(tmp_path):
    agent = start_agent(tmp_path)
    try:
        read_until(agent, lambda m: m.get("type") == "ready")
        agent.stdin.write(b'not json\n{"id": 1, "op": "nope"}\n{"id": 2, "op": "read_log", "args": {"session_id": "../x"}}\n'
                          b'{"id": 3, "op": "kill", "args": {"pid": 1, "start_ticks": 1}}\n{"id": 4, "op": "ping"}\n')
        agent.stdin.flush()
        errs = {}
        for _ in range(5):
            msg, _ = read_until(agent, lambda m: m.get("type") in ("reply", "error"))
            errs[msg.get("id")] = msg
        assert errs[1]["ok"] is False and "unknown op" in errs[1]["error"]
        assert errs[2]["ok"] is False and "bad session id" in errs[2]["error"]
        assert errs[3]["ok"] is False and "refusing to signal 1" in errs[3]["error"]  # never pid 1
        assert errs[4]["ok"] is True
    finally:
        agent.stdin.close()
        agent.wait(5)


async def test_truncated_log_is_followed_from_the_start_again(tmp_path):
    """An operator's `> output.log` mid-follow: the console is told, and nothing written after is skipped."""
    from console.config import HostConfig
    from console.link.link import HostLink
    from console.link.ssh import HostSpec

    runs = tmp_path / "runs"
    (runs / "s1").mkdir(parents=True)
    log = runs / "s1" / "output.log"
    log.write_text("one\ntwo\n")
    link = HostLink(HostSpec(name="local", local=True), HostConfig(python=sys.executable, runs_dir=str(runs),
                                                                    gpu_source="none"))
    from tests.helpers.heard import Heard

    heard = Heard(link)
    await link.open()
    try:
        await link.client.follow_log("s1", 0)
        assert await await_until(lambda: heard.text().splitlines() == ["one", "two"], 10)
        log.write_text("")  # truncated by hand
        assert await await_until(lambda: "log_truncated" in heard.kinds(), 10)
        with open(log, "a") as f:
            f.write("three\n")
        assert await await_until(lambda: "three" in heard.text(), 10)
        assert heard.text().splitlines() == ["one", "two", "three"]
    finally:
        await link.close()


def test_nvml_clock_event_reasons_name_the_slowdowns(monkeypatch):
    m = fake_pynvml("ok")
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4 | 0x1 if h == 0 else 0x0  # power cap (+ idle)
    monkeypatch.setitem(sys.modules, "pynvml", m)
    g0, g1 = load_agent().open_gpu_source("auto", None).sample()
    assert g0["throttle_reasons"] == ["sw_power_cap"] and g1["throttle_reasons"] == []
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml("ok"))  # a pynvml without the call: unknown
    assert load_agent().open_gpu_source("auto", None).sample()[0]["throttle_reasons"] is None
