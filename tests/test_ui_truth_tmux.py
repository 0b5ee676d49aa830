"""Issue 13 in a real terminal: the TUI runs in tmux watching a host (local, simulated GPUs, the
SGLang stand-in) while the CLI — another console — fails a launch on GPU 1, relaunches on the same
GPU, kills it and has a launch refused. Each condition is waited for on ``tmux capture-pane`` with a
generous bound; nothing is timed. Under CI=true a missing tmux fails the test (.ci/run installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from console.sim.demo import FIXED_FLAGS, INCIDENT_FLAGS, MODEL_CONFIG, free_port, teardown
from tests.helpers.wait import wait_until

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ROOT = Path(__file__).resolve().parents[1]
BOUND = 90.0


def _toml_list(xs: list[str]) -> str:
    return "[" + ", ".join(json.dumps(x) for x in xs) + "]"


def _stage(root: Path) -> Path:
    """A local host with 4 simulated GPUs and two profiles (one does not fit, one does)."""
    sim, runs, model = root / "sim", root / "runs", root / "models" / "m27b"
    for d in (sim / "alloc", runs, model):
        d.mkdir(parents=True, exist_ok=True)
    (sim / "gpus.json").write_text(json.dumps([
        {"index": i, "uuid": f"GPU-t-{i}", "name": "SIM GPU", "mem_total_mib": 97887, "power_limit_w": 600.0}
        for i in range(4)]))
    (model / "config.json").write_text(json.dumps(MODEL_CONFIG))
    command = [sys.executable, "-m", "console.sim.sglang"]
    cfg = root / "config.toml"
    cfg.write_text(f"""
[hosts.sim]
transport = "local"
python = {json.dumps(sys.executable)}
runs_dir = {json.dumps(str(runs))}
gpu_source = "sim"
sim_dir = {json.dumps(str(sim))}
server_command = {_toml_list(command)}
launch_env = {{ MTPCONSOLE_SIM_DIR = {json.dumps(str(sim))}, MTPCONSOLE_SIM_SPEED = "5" }}

[profiles.incident]
host = "sim"
model_path = {json.dumps(str(model))}
gpus = [1]
port = {free_port()}
flags = {_toml_list(INCIDENT_FLAGS)}

[profiles.fixed]
host = "sim"
model_path = {json.dumps(str(model))}
gpus = [1]
port = {free_port()}
flags = {_toml_list(FIXED_FLAGS)}
""")
    return cfg


class Tmux:
    """One tmux server of our own (its own socket), one window running the TUI."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.sock = str(root / "tmux.sock")
        self.env = env

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.sock, *args], capture_output=True, text=True, timeout=20,
                              env=self.env).stdout

    def start(self, command: list[str]) -> None:
        self.tmux("new-session", "-d", "-s", "t", "-x", "170", "-y", "50", " ".join(command))

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def wait(self, cond, what: str) -> str:
        shown = [""]

        def seen() -> bool:
            shown[0] = self.screen()
            return bool(cond(shown[0]))
        if not wait_until(seen, BOUND, step=0.2):
            raise AssertionError(f"not seen within {BOUND:.0f} s: {what}\n--- screen ---\n{shown[0]}")
        return shown[0]

    def close(self) -> None:
        self.tmux("kill-server")


def _gpu_block(text: str, idx: int) -> str:
    """The lines of GPU ``idx``'s panel (from its title row to the next panel's)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if f"GPU {idx} ·" in line), None)
    if start is None:
        return ""
    end = next((i for i in range(start + 1, len(lines)) if "GPU " in lines[i] and " · SIM GPU" in lines[i]),
               len(lines))
    return "\n".join(line.split("▏")[0] for line in lines[start:end])  # the hosts pane, not the side column


def test_tui_in_tmux_follows_the_current_session(tmp_path):
    if shutil.which("tmux") is None:
        if IN_CI:
            pytest.fail("tmux is required under CI=true (.ci/run installs it)")
        pytest.skip("tmux not installed")
    root = Path(tmp_path)
    cfg = _stage(root)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MTPCONSOLE_AUDIT_LOG": str(root / "audit.jsonl"),
           "XDG_CACHE_HOME": str(root / "cache"), "XDG_STATE_HOME": str(root / "state"), "TERM": "xterm-256color",
           "TZ": "UTC"}
    common = [sys.executable, "-m", "console", "--config", str(cfg)]

    def cli(*args: str) -> dict:
        r = subprocess.run([*common, *args, "--json"], capture_output=True, text=True, timeout=180, env=env,
                           cwd=str(root))
        return json.loads(r.stdout)

    t = Tmux(root, env)
    try:
        t.start([*common, "--host", "sim"])
        t.wait(lambda s: "GPU 3" in s and "connected · rtt" in s and "IDLE 4" in s, "4 idle GPUs, header spaced")
        t.keys("Tab")  # GPU 0 is selected at start: one Tab selects GPU 1, the log pane shows its current session
        t.wait(lambda s: "no server on sim GPU 1" in s, "GPU 1 selected, nothing on it")

        failed = cli("launch", "--host", "sim", "--profile", "incident", "--force", "--wait")
        assert failed["cause"] == "gpu_oom" and failed["session_id"], failed
        fsid = failed["session_id"]
        t.wait(lambda s: "FAILED: gpu_oom" in _gpu_block(s, 1) and f"session {fsid}" in s, "GPU 1 FAILED, its log")

        proc = subprocess.Popen([*common, "launch", "--host", "sim", "--profile", "fixed", "--wait", "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=str(root))
        # while it starts, the panel and the log pane show the new launch, never the failed one's
        screen = t.wait(lambda s: "LAUNCHING" in _gpu_block(s, 1) or "LOADING" in _gpu_block(s, 1)
                        or "READY" in _gpu_block(s, 1), "GPU 1 shows the new launch")
        assert "FAILED" not in _gpu_block(screen, 1), screen
        out, _ = proc.communicate(timeout=180)
        ready = json.loads(out)
        assert ready["state"] == "ready", ready
        rsid = ready["session_id"]
        t.wait(lambda s: "READY" in _gpu_block(s, 1) and f"session {rsid} · READY" in s
               and f"session {fsid}" not in s, "GPU 1 READY, the log pane on the new session")

        killed = cli("kill", "--host", "sim", rsid)
        assert killed["ok"], killed
        screen = t.wait(lambda s: "STOPPED" in _gpu_block(s, 1), "GPU 1 STOPPED after the kill")
        assert "FAILED" not in screen and "gpu_oom" not in screen, screen  # never the older failure
        t.wait(lambda s: f"session {rsid} · STOPPED" in s, "the log banner says STOPPED")

        refused = cli("launch", "--host", "sim", "--profile", "incident", "--wait")
        assert refused["session_id"] is None and "does not fit" in refused["error"]["message"], refused
        t.wait(lambda s: "STOPPED" in _gpu_block(s, 1) and "STOPPED 1" in s, "the refusal left GPU 1 as it was")
        screen = t.screen()
        assert "FAILED" not in screen and "foreign pid N/A" not in screen, screen
    finally:
        t.close()
        teardown(root, None)
