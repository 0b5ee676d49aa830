"""nvidia-smi as the agent sees it: failures are explicit errors, and a hung nvidia-smi never delays the loop.

Uses the fake nvidia-smi of tests/gpu/fake_nvml (FAKE_NVIDIA_SMI picks its failure mode).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from console.host import gpus
from tests.helpers.agent_proc import FAKE_NVML, AgentProc, start_ticks

SMI = str(FAKE_NVML / "nvidia-smi")


@pytest.fixture
def smi_mode(monkeypatch):
    def set_mode(mode: str) -> gpus.SmiGpus:
        monkeypatch.setenv("FAKE_NVIDIA_SMI", mode)
        monkeypatch.setenv("FAKE_NVIDIA_SMI_HANG_S", "3")
        return gpus.SmiGpus(SMI, timeout=0.5 if mode == "hang" else 30)  # a loaded CI box starts Python slowly
    return set_mode


def test_healthy_fake_gives_one_gpu(smi_mode):
    (g,) = smi_mode("ok").sample()
    assert g["index"] == 0 and g["mem_total_mib"] == 143771 and g["errors"] == {}


@pytest.mark.parametrize("mode,words", [
    ("broken", "exit 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
    ("stderr", "exit 2): Failed to initialize NVML: Driver/library version mismatch"),
    ("garbage", "no GPU line this agent can read: 'this is not csv'"),
    ("hang", "did not answer within 0.5 s"),
])
def test_a_failing_nvidia_smi_is_an_explicit_error(smi_mode, mode, words):
    with pytest.raises(gpus.SmiError) as e:
        smi_mode(mode).sample()
    assert words in str(e.value)


def test_process_query_failure_keeps_the_gpus(smi_mode):
    (g,) = smi_mode("apps-broken").sample()
    assert g["mem_total_mib"] == 143771 and "Unable to determine the device handle" in g["errors"]["procs"]


def test_missing_binary_is_an_error():
    with pytest.raises(gpus.SmiError, match="cannot run nvidia-smi"):
        gpus.SmiGpus("/nonexistent/nvidia-smi").sample()


def agent_env(mode: str) -> dict[str, str]:
    return {"PATH": f"{FAKE_NVML}:{os.environ['PATH']}", "FAKE_NVIDIA_SMI": mode, "FAKE_NVIDIA_SMI_HANG_S": "10"}


def test_broken_nvidia_smi_reaches_the_sample(tmp_path):
    agent = AgentProc({"interval": 0.2, "runs_dir": str(tmp_path / "runs"), "gpu_source": "nvidia-smi"},
                      agent_env("broken"))
    try:
        agent.read_until(lambda m: m.get("type") == "ready")
        msg, _ = agent.read_until(lambda m: m.get("type") == "sample" and "NVIDIA-SMI has failed" in
                                  (m["data"]["gpu_error"] or ""))
        s = msg["data"]
        assert s["gpus"] == [] and s["gpu_source"] == "none"
        assert "couldn't communicate with the NVIDIA driver" in s["gpu_error"]
        snap = agent.request("snapshot")
        assert snap["ok"] and "couldn't communicate" in snap["result"]["gpu_error"]
    finally:
        agent.close()


def test_hung_nvidia_smi_never_delays_exit_events_or_samples(tmp_path):
    """nvidia-smi hangs 10 s: exit events still arrive at once, samples keep their rhythm, and the sample
    says GPU sampling is not answering."""
    agent = AgentProc({"interval": 0.2, "runs_dir": str(tmp_path / "runs"), "gpu_source": "nvidia-smi",
                       "gpu_stall_s": 1.0}, agent_env("hang"))
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        agent.read_until(lambda m: m.get("type") == "ready")
        assert agent.request("watch", pid=victim.pid, start_ticks=start_ticks(victim.pid))["ok"]
        msg, _ = agent.read_until(lambda m: m.get("type") == "sample" and "has not answered" in
                                  (m["data"]["gpu_error"] or ""), timeout=4)
        assert msg["data"]["gpus"] == []
        import time
        t_kill = time.monotonic()
        victim.kill()
        ev, t_seen = agent.read_until(lambda m: m.get("type") == "event" and m.get("pid") == victim.pid)
        assert ev["kind"] == "exit" and t_seen - t_kill < 0.3, t_seen - t_kill
        samples = [t for t, m in agent.seen if m.get("type") == "sample"]
        gaps = [b - a for a, b in zip(samples, samples[1:])]
        assert len(samples) >= 5 and max(gaps) < 1.5, gaps  # interval 0.2 s; nvidia-smi hangs 10 s
        snap = agent.request("snapshot", timeout=4)
        assert snap["ok"] and "has not answered" in snap["result"]["gpu_error"]
    finally:
        victim.kill()
        victim.wait()
        agent.close()
