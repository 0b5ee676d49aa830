"""Issue 18, item 10: `runs_dir = "$HOME/x"` is expanded like `~`; `sessions --all` shows every ended session;
`kill`/`relaunch` find an older session; killing a pid that never existed is an error; two consoles with
different runs directories cannot both launch on the same GPU. Real agents (local transport and the test
sshd), the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.helpers.rel_util import cleanup_runs, cli, write_config

pytestmark = pytest.mark.sshd

IDLE = "import time\nprint('up', flush=True)\nt = time.time() + 60\nwhile time.time() < t:\n    time.sleep(0.1)\n"


def ended(runs_dir: Path, sid: str, at: float) -> None:
    d = runs_dir / sid
    d.mkdir()
    (d / "spec.json").write_text(json.dumps({"session_id": sid, "argv": ["python3", "srv.py", "--x", "1"],
                                             "gpus": [0], "port": 30000}))
    (d / "record.json").write_text(json.dumps({"supervisor_pid": 4_000_001, "pid": 4_000_002, "pgid": 4_000_002,
                                               "start_ticks": 5, "started_at": at, "boot_id": "x"}))
    (d / "exit.json").write_text(json.dumps({"ended_at": at + 1, "exit_code": 0}))
    (d / "output.log").write_text("done\n")


def test_runs_dir_with_a_variable_is_expanded(tmp_path, sshd):
    """``runs_dir = "$HOME/x"`` used to create a directory literally named ``$HOME``; an unset variable is a
    clear error instead of a directory named after it."""
    home = tmp_path / "home"
    home.mkdir()
    conf = write_config(tmp_path / "config.toml", {"local": {"python": sys.executable, "runs_dir": "$HOME/runs",
                                                             "gpu_source": "none", "transport": "local"}})
    server = tmp_path / "idle.py"
    server.write_text(IDLE)
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "a.jsonl"), "HOME": str(home)}  # the agent's $HOME
    try:
        p = cli("--config", str(conf), "launch", "--no-validate", "--host", "local", "--port", str(free_port()),
                "--json", "--command", f"{sys.executable} {server}", "--", "--model-path", "/m", env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        sid = json.loads(p.stdout)["session_id"]
        assert (home / "runs" / sid / "spec.json").exists()
        assert not list(Path.cwd().glob("$HOME")) and not (tmp_path / "$HOME").exists()
    finally:
        cleanup_runs(home / "runs")
    conf.write_text(conf.read_text().replace("$HOME", "$H3_SURELY_UNSET"))
    q = cli("--config", str(conf), "status", "--host", "local", env=env)
    assert q.returncode == 1 and "names an environment variable this host does not set" in q.stdout + q.stderr


def test_sessions_all_kill_and_relaunch_reach_older_sessions(tmp_path, sshd, runs_dir):
    """40 ended sessions: a sample carries the 32 newest; `sessions --all` shows all 40, and `kill`/`relaunch`
    of the oldest no longer say "no session"."""
    now = time.time()
    ids = [f"20261130-0900{i:02d}-gpu0-{i:04x}" for i in range(40)]
    for i, sid in enumerate(ids):
        ended(runs_dir, sid, now - 4000 + i)
    conf = write_config(tmp_path / "config.toml", {"testhost": {"python": "python3", "runs_dir": str(runs_dir),
                                                                "gpu_source": "none"}})
    common = ["--ssh-config", str(sshd.ssh_config), "--config", str(conf)]
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "a.jsonl")}
    recent = cli(*common, "sessions", "--host", "testhost", "--json", env=env)
    every = cli(*common, "sessions", "--host", "testhost", "--json", "--all", env=env)
    assert len([v for v in json.loads(recent.stdout) if v["session_id"] in ids]) == 32
    assert sorted(v["session_id"] for v in json.loads(every.stdout) if v["session_id"]) == ids
    k = cli(*common, "kill", ids[0], "--host", "testhost", "--json", env=env)
    assert "no session" not in k.stdout + k.stderr, k.stdout + k.stderr
    r = cli(*common, "relaunch", ids[0], "--host", "testhost", "--json", env=env, timeout=60)
    assert "no session" not in r.stdout + r.stderr, r.stdout + r.stderr
    cleanup_runs(runs_dir)


def test_kill_of_a_pid_that_never_existed_is_an_error(tmp_path):
    conf = write_config(tmp_path / "config.toml", {"local": {"python": sys.executable,
                                                             "runs_dir": str(tmp_path / "runs"), "gpu_source": "none"}})
    p = cli("--config", str(conf), "kill", "--pid", "4000123", "--host", "local", "--json",
            env={"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "a.jsonl")})
    assert p.returncode == 2 and "STOPPED" not in p.stdout and "4000123" in p.stdout + p.stderr, p.stdout + p.stderr
    assert json.loads(p.stdout)["error"]["kind"] == "unknown_process", p.stdout  # an unknown pid is bad input


def test_two_consoles_with_different_runs_dirs_cannot_share_a_gpu(tmp_path):
    """Each console's preflight looked only at its own runs directory: both launched on GPU 0. The agent now
    also checks the host's processes started by any mtpconsole supervisor for the GPU (here simulated GPUs)."""
    sim = tmp_path / "sim"
    (sim / "alloc").mkdir(parents=True)
    (sim / "gpus.json").write_text(json.dumps([{"index": 0, "uuid": "GPU-h3", "name": "Sim", "mem_total_mib": 97887,
                                                "power_limit_w": 600.0}]))
    server = tmp_path / "idle.py"
    server.write_text(IDLE)
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "a.jsonl")}
    runs = [tmp_path / "runs-a", tmp_path / "runs-b"]
    confs = [write_config(tmp_path / f"c{i}.toml", {"local": {
        "python": sys.executable, "runs_dir": str(r), "gpu_source": "sim", "sim_dir": str(sim),
        "launch_env": {"MTPCONSOLE_SIM_DIR": str(sim)}}}) for i, r in enumerate(runs)]
    try:
        out = []
        for conf in confs:
            out.append(cli("--config", str(conf), "launch", "--no-validate", "--host", "local", "--gpu", "0",
                           "--port", str(free_port()), "--json", "--command", f"{sys.executable} {server}", "--",
                           "--model-path", "/m", env=env))
        first, second = out
        assert first.returncode == 0, first.stdout + first.stderr
        sid = json.loads(first.stdout)["session_id"]
        assert second.returncode == 1, second.stdout
        assert f"GPU 0 is held by session {sid}" in second.stdout and "another runs directory" in second.stdout
        assert not [x for x in runs[1].iterdir() if not x.name.startswith(".")] if runs[1].exists() else True
    finally:
        for r in runs:
            cleanup_runs(r)
    assert os.path.exists(sim)
