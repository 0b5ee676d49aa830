"""The built-in demo host: staged incident, real code paths, clean exit with nothing left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers.wait import wait_until

ENV = {**os.environ, "MTPCONSOLE_AUDIT_LOG": os.devnull}


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone meanwhile
        return b""


def _demo_procs() -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                env = Path(f"/proc/{name}/environ").read_bytes()
            except OSError:
                continue
            if b"MTPCONSOLE_SIM_DIR=" in env and b"mtpconsole-demo-" in env:
                out.append(int(name))
    return out


def test_status_demo_shows_the_staged_incident_and_cleans_up():
    r = subprocess.run([sys.executable, "-m", "console", "status", "--demo", "--json"], capture_output=True,
                       text=True, timeout=90, env=ENV)
    assert r.returncode == 0, r.stderr
    (h,) = json.loads(r.stdout)["hosts"]
    assert h["gpu_source"] == "sim" and len(h["gpus"]) == 4
    assert all(g["power_limit_w"] == 600.0 and g["mem_total_mib"] == 97887 for g in h["gpus"])
    # the host is this machine: other demos may run beside this one, so look for ours by its flags
    launchers = [p for p in h["servers"] if p["role"] == "launcher" and "0.85" in p["argv"]
                 and any("mtpconsole-demo-" in a for a in p["argv"])]
    assert launchers and all(p["session_id"] is None for p in launchers)  # FOREIGN: started by hand
    titles = {p["argv"][0] for p in h["servers"] if p["role"] == "worker"}
    assert "sglang::scheduler" in titles and "sglang::detokenizer" in titles
    gpu0 = [p["pid"] for p in h["gpus"][0]["procs"]]
    assert h["gpus"][0]["mem_used_mib"] > 1000 and gpu0
    model = next(a for a in launchers[0]["argv"] if "mtpconsole-demo-" in a)
    root = Path(model).parents[1]  # <root>/models/<name>
    marker = f"MTPCONSOLE_SIM_DIR={root}/sim".encode()
    assert wait_until(lambda: [pid for pid in _demo_procs() if marker in _environ(pid)] == [], 10)
    assert not root.exists()


def test_demo_incident_profile_fails_gpu_oom_and_fixed_one_is_ready():
    r = subprocess.run([sys.executable, "-m", "console", "launch", "--demo", "--profile", "incident", "--gpu", "1",
                        "--wait", "--json"], capture_output=True, text=True, timeout=120, env=ENV)
    res = json.loads(r.stdout)
    assert r.returncode == 1 and res["session_id"] is None, res  # the planner: a refusal (rc 1), its error an object
    assert res["error"]["kind"] == "refused" and "does not fit" in res["error"]["message"], res
    r = subprocess.run([sys.executable, "-m", "console", "launch", "--demo", "--profile", "incident", "--gpu", "1",
                        "--wait", "--json", "--force"], capture_output=True, text=True, timeout=120, env=ENV)
    res = json.loads(r.stdout)
    assert r.returncode == 1 and res["cause"] == "gpu_oom" and "Not enough memory" in res["line"], res
    r = subprocess.run([sys.executable, "-m", "console", "launch", "--demo", "--profile", "fixed", "--gpu", "1",
                        "--wait", "--json"], capture_output=True, text=True, timeout=120, env=ENV)
    res = json.loads(r.stdout)
    assert r.returncode == 0 and res["state"] == "ready", res
    assert [s["state"] for s in res["steps"]][-1] == "ok"  # on GPU: memory attributed to the session's pids


def test_demo_tui_exits_clean_on_sigterm():
    p = subprocess.Popen([sys.executable, "-c", "import asyncio,argparse\n"
                          "from console.sim.demo import demo_environment\n"
                          "async def main():\n"
                          "    async with demo_environment(load=True) as (cfg, names):\n"
                          "        print(cfg.hosts['demo'].sim_dir, flush=True); await asyncio.sleep(60)\n"
                          "asyncio.run(main())"], stdout=subprocess.PIPE, text=True, env=ENV)
    sim_dir = p.stdout.readline().strip()
    marker = f"MTPCONSOLE_SIM_DIR={sim_dir}".encode()

    def ours():
        out = []
        for pid in _demo_procs():
            try:
                if marker in Path(f"/proc/{pid}/environ").read_bytes():
                    out.append(pid)
            except OSError:
                pass
        return out
    assert sim_dir and ours()
    p.send_signal(signal.SIGTERM)
    p.wait(20)
    assert wait_until(lambda: ours() == [], 10), ours()
    assert not Path(sim_dir).exists()


def test_demo_relaunch_that_does_not_fit_is_refused_before_anything_is_killed(tmp_path):
    """The incident's flags on GPU 0: the planner refuses, the hand-started server keeps running."""
    import asyncio

    from console.commands.context import connect_hosts, make_context
    from console.config import Config
    from console.model import KillTarget
    from console.ops import lifecycle
    from console.sim.demo import INCIDENT_FLAGS

    async def main():
        ctx = make_context(config=Config(), demo=True, audit_log=os.devnull, demo_load=False)
        async with connect_hosts(ctx) as (link,):
            snap = await link.refresh()
            (foreign,) = [p for p in snap.servers if p.role == "launcher"]  # only this demo's processes
            model = next(a for a in foreign.argv if "mtpconsole-demo-" in a)
            req = lifecycle.request_from_argv("demo", [*foreign.argv[:3], "--model-path", model, *INCIDENT_FLAGS],
                                              [0], None)
            r = await lifecycle.relaunch(link, KillTarget(host="demo", pid=foreign.pid,
                                                          start_ticks=foreign.start_ticks), req)
            assert not r.ok and "nothing was stopped" in r.error and r.cause is None  # refused: nothing ran
            assert r.refused and r.refused.startswith("memory plan: does not fit")
            after = await link.refresh()
            assert any(p.pid == foreign.pid and p.alive for p in after.servers)
    asyncio.run(main())
