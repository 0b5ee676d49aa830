"""A long-lived agent follows processes that retitle themselves, as real SGLang workers do.

Real schedulers start as ``python -B -c 'from multiprocessing.spawn import spawn_main ...'
--multiprocessing-fork`` and retitle to ``sglang::scheduler[_TP<n>]`` seconds later, leaving argv
``['sglang::scheduler', '', '', ...]``. tests/helpers/retitle.py does exactly that with real processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from console.host.hostlib import proc_cmdline, proc_environ
from console.host.procscan import classify_title, title_ranks
from console.model import ServerProc
from tests.helpers.agent_proc import AgentProc
from tests.helpers.wait import wait_until

RETITLE = Path(__file__).resolve().parent / "helpers" / "retitle.py"


@pytest.mark.parametrize("title,ranks", [
    ("sglang::scheduler", (None, 0)), ("sglang::scheduler_TP3", (None, 3)),
    ("sglang::scheduler_DP1_TP2", (1, 2)), ("sglang::scheduler_DP0_TP0_EP0", (0, 0)),
    ("sglang::detokenizer", (None, None)), ("sglang::data_parallel_controller", (None, None)),
])
def test_titles(title, ranks):
    assert title_ranks([title]) == ranks
    assert classify_title([title]) == ("sglang", "worker")


def procs_of(msg, pids):
    return {p["pid"]: p for p in msg["data"]["servers"] if p["pid"] in pids}


def kill_tree(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_unmanaged_workers_are_seen_from_spawn_to_retitle(tmp_path):
    go = tmp_path / "go"
    spawned = time.time()
    launcher = subprocess.Popen([sys.executable, str(RETITLE), "launcher", str(go), "60",
                                 "sglang::scheduler_TP0", "sglang::scheduler_TP1"], stdout=subprocess.PIPE, text=True)
    agent = AgentProc({"interval": 0.1, "runs_dir": str(tmp_path / "runs"), "gpu_source": "none"})
    kids: list[int] = []
    try:
        assert launcher.stdout is not None
        tracker, *workers = kids = [int(x) for x in launcher.stdout.readline().split()[1:]]
        agent.read_until(lambda m: m.get("type") == "ready")
        # spawn phase: the children count as the launcher's workers from the start
        msg, _ = agent.read_until(lambda m: m.get("type") == "sample" and len(procs_of(m, kids)) == 3)
        seen = procs_of(msg, kids + [launcher.pid])
        assert seen[launcher.pid]["role"] == "launcher" and seen[launcher.pid]["framework"] == "sglang"
        # its own start (boot time + start ticks): a hand-started server's uptime
        assert abs(seen[launcher.pid]["started_at"] - spawned) < 2.0
        assert seen[tracker]["role"] == "other" and seen[tracker]["framework"] == "sglang"
        for w in workers:
            assert seen[w]["role"] == "worker" and seen[w]["framework"] == "sglang"
            assert "--multiprocessing-fork" in seen[w]["argv"]
        go.write_text("")  # now they retitle; the same long-lived agent must notice
        msg, _ = agent.read_until(lambda m: m.get("type") == "sample" and all(
            p["argv"][:1] == ["sglang::scheduler_TP%d" % i] for i, p in
            enumerate(procs_of(m, workers)[w] for w in workers)) and len(procs_of(m, workers)) == 2)
        for i, w in enumerate(workers):
            p = procs_of(msg, workers)[w]
            assert p["argv"] == ["sglang::scheduler_TP%d" % i]  # the ~450 empty padding args are gone
            assert p["role"] == "worker" and p["tp_rank"] == i
            assert ServerProc.model_validate(p).title == "sglang::scheduler_TP%d" % i
    finally:
        kill_tree(kids + [launcher.pid])
        launcher.wait()
        agent.close()


def test_session_launcher_children_are_session_workers_from_the_start(tmp_path):
    go = tmp_path / "go"
    sid = "t-retitle-" + uuid.uuid4().hex[:8]
    agent = AgentProc({"interval": 0.1, "runs_dir": str(tmp_path / "runs"), "gpu_source": "none"})
    rec = None
    try:
        agent.read_until(lambda m: m.get("type") == "ready")
        r = agent.request("launch", timeout=30, spec={
            "session_id": sid, "argv": [sys.executable, str(RETITLE), "launcher", str(go), "60", "sglang::scheduler"],
            "gpus": [], "port": None})
        assert r["ok"], r
        rec = r["result"]["record"]

        def session_procs(m):
            return [p for p in m["data"]["servers"] if p["session_id"] == sid]

        msg, _ = agent.read_until(lambda m: m.get("type") == "sample" and any(
            p["role"] == "worker" for p in session_procs(m)), timeout=10)
        roles = {p["pid"]: p["role"] for p in msg["data"]["servers"]}
        assert roles[rec["pid"]] == "launcher" and roles[rec["supervisor_pid"]] == "supervisor"
        (worker,) = [p for p in session_procs(msg) if p["role"] == "worker"]
        assert "--multiprocessing-fork" in worker["argv"]
        go.write_text("")
        msg, _ = agent.read_until(lambda m: m.get("type") == "sample" and any(
            p["argv"] == ["sglang::scheduler"] for p in session_procs(m)), timeout=10)
        (p,) = [p for p in session_procs(msg) if p["pid"] == worker["pid"]]
        assert p["role"] == "worker" and p["tp_rank"] == 0 and p["start_ticks"] == worker["start_ticks"]
    finally:
        if rec:
            agent.request("kill", pid=rec["pid"], pgid=rec["pgid"], start_ticks=rec["start_ticks"], signal=9,
                          session_id=sid)
            agent.read_until(lambda m: m.get("kind") == "session_ended", timeout=10)
        agent.close()


def test_workers_first_seen_after_their_retitle_take_the_launchers_devices(tmp_path):
    """A retitle (setproctitle) writes over the environ area; a worker the agent first sees afterwards (a slow
    tick on a busy host) still shows its GPUs: those of its launcher, which it inherited when spawned."""
    go = tmp_path / "go"
    go.write_text("")  # retitle at once, before the agent starts
    launcher = subprocess.Popen([sys.executable, str(RETITLE), "launcher", str(go), "0",
                                 "sglang::scheduler_TP0", "sglang::detokenizer"], stdout=subprocess.PIPE, text=True,
                                env=dict(os.environ, CUDA_VISIBLE_DEVICES="2,3"))
    kids: list[int] = []
    agent = None
    try:
        assert launcher.stdout is not None
        _tracker, *workers = kids = [int(x) for x in launcher.stdout.readline().split()[1:]]
        wait_until(lambda: all((proc_cmdline(w) or [""])[0].startswith("sglang::") for w in workers), 10)
        assert proc_environ(workers[0], ("CUDA_VISIBLE_DEVICES",)) is None  # overwritten, as real ones are
        agent = AgentProc({"interval": 0.1, "runs_dir": str(tmp_path / "runs"), "gpu_source": "none"})
        agent.read_until(lambda m: m.get("type") == "ready")
        msg, _ = agent.read_until(lambda m: m.get("type") == "sample" and len(procs_of(m, workers)) == 2)
        seen = procs_of(msg, workers + [launcher.pid])
        assert seen[launcher.pid]["cuda_visible_devices"] == "2,3" and not seen[launcher.pid]["env_inherited"]
        for w in workers:
            assert seen[w]["role"] == "worker"
            assert seen[w]["cuda_visible_devices"] == "2,3" and seen[w]["env_inherited"]
    finally:
        kill_tree(kids + [launcher.pid])
        launcher.wait()
        if agent is not None:
            agent.close()
