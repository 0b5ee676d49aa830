"""Issue 30 through the real CLI: ``launch --host local --host testhost --gpu 0-1 --nnodes 2`` (the local transport
and the real sshd on 127.0.0.1, each host its own runs_dir and simulated GPUs), then ``sessions``, ``status GROUP``,
``logs GROUP`` and ``kill GROUP`` taking the group id; a console SIGKILLed mid-launch of a group, and a restarted
console showing the group's true state.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
import sys
import time

import pytest

from tests.helpers.rel_util import cleanup_runs, cli, popen_cli, write_config
from tests.helpers.sim_files import make_sim, sim_env
from tests.helpers.sshd import free_port
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


@pytest.fixture
def world(sshd, tmp_path):
    d0, model = make_sim(tmp_path / "n0", gpus=2, tag="c0")
    d1, _ = make_sim(tmp_path / "n1", gpus=2, tag="c1", model=False)
    runs = [tmp_path / "n0" / "runs", tmp_path / "n1" / "runs"]
    for r in runs:
        r.mkdir()
    hosts = {}
    for name, d, r in (("local", d0, runs[0]), ("testhost", d1, runs[1])):
        hosts[name] = {"python": sys.executable, "runs_dir": str(r), "gpu_source": "sim", "sim_dir": str(d),
                       "server_command": [sys.executable, "-m", "console.sim.sglang"], "launch_env": sim_env(d)}
    conf = write_config(tmp_path / "config.toml", hosts)
    base = ["--ssh-config", str(sshd.ssh_config), "--config", str(conf)]
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    hosts_args = ["--host", "local", "--host", "testhost"]

    def run(*args: str, timeout: float = 120.0):
        return cli(*base, *args, env=env, timeout=timeout)

    yield {"run": run, "base": base, "env": env, "hosts": hosts_args, "model": str(model), "runs": runs}
    for r in runs:
        cleanup_runs(r)


def test_group_launch_sessions_status_logs_kill_by_group_id(world):
    run, hosts = world["run"], world["hosts"]
    port = free_port()
    r = run("launch", *hosts, "--gpu", "0-1", "--nnodes", "2", "--port", str(port), "--wait", "--json", "--",
            "--model-path", world["model"])
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout)
    gid = res["session_id"]
    assert re.match(r"^\d{8}-\d{6}-nodes2-[0-9a-f]{4}$", gid) and res["state"] == "ready"
    assert [(m["host"], m["rank"], m["gpus"]) for m in res["members"]] == [("local", 0, [0, 1]), ("testhost", 1, [0, 1])]

    s = run("sessions", *hosts, "--json")
    groups = json.loads(s.stdout)
    assert [(g["group"], g["state"]) for g in groups] == [(gid, "ready")], s.stdout

    one = json.loads(run("sessions", "--host", "testhost", "--json").stdout)  # one host: its member, marked
    assert [(v["group"], v["node_rank"], v["nnodes"]) for v in one if v["session_id"]] == [(gid, 1, 2)], one

    st = run("status", *hosts, gid)
    assert st.returncode == 0 and f"group {gid}: READY" in st.stdout, st.stdout + st.stderr

    lg = run("logs", *hosts, gid, "-n", "2000")
    assert lg.returncode == 0, lg.stderr
    lines = lg.stdout.splitlines()
    assert any(ln.startswith("local/r0 | ") for ln in lines) and any(ln.startswith("testhost/r1 | ") for ln in lines)
    stamps = []
    for ln in lines:
        m = re.search(r"\| \[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", ln)
        if m:
            stamps.append(dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
    assert stamps == sorted(stamps)  # one machine: no skew to correct, the merge is by time
    assert "clock offset" in lg.stderr

    k = run("kill", *hosts, gid, "--grace", "3", "--json")
    assert k.returncode == 0, k.stdout + k.stderr
    out = json.loads(k.stdout)
    assert out["ok"] and [ln.split(":")[0] for ln in out["killed"]] == ["local (rank 0)", "testhost (rank 1)"]
    assert out["state"] == "stopped"


def test_group_launch_refused_for_tp_not_fitting_and_member_flags(world):
    run, hosts = world["run"], world["hosts"]
    r = run("launch", *hosts, "--gpu", "0-1", "--port", str(free_port()), "--wait", "--", "--model-path",
            world["model"], "--tp-size", "3")
    assert r.returncode == 1 and "REFUSED" in r.stdout and "not divisible by --nnodes 2" in r.stdout, r.stdout
    r = run("launch", *hosts, "--gpu", "0-1", "--port", str(free_port()), "--", "--model-path", world["model"],
            "--node-rank", "1")
    assert r.returncode == 1 and "--node-rank is set by the console" in r.stdout, r.stdout


def test_console_sigkilled_mid_group_launch_restarted_console_shows_true_state(world):
    hosts = world["hosts"]
    p = popen_cli(*world["base"], "launch", *hosts, "--gpu", "0-1", "--port", str(free_port()), "--wait", "--",
                  "--model-path", world["model"], env=world["env"])
    try:
        deadline = time.monotonic() + 60
        spawned: set[str] = set()
        while time.monotonic() < deadline and len(spawned) < 2:  # both members started, then the console dies
            line = p.stdout.readline()
            if not line:
                break
            if "spawned" in line:
                spawned.add(line.split(":")[0])
        assert len(spawned) == 2, (spawned, p.stderr.read() if p.poll() is not None else "")
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()

    def groups():
        return json.loads(world["run"]("sessions", *hosts, "--json").stdout)

    g = wait_until(lambda: (lambda x: x if x and x[0]["state"] == "ready" else None)(groups()), 60, step=0.5)
    assert len(g) == 1 and [m["state"] for m in g[0]["members"]] == ["ready", "ready"]
    k = world["run"]("kill", *hosts, g[0]["group"], "--grace", "3")
    assert k.returncode == 0 and "stopped, confirmed" in k.stdout, k.stdout + k.stderr


def test_launch_watch_guards_the_group_node1_worker_killed_failed_and_rest_killed(world):
    import os
    import subprocess
    from pathlib import Path

    hosts = world["hosts"]
    p = popen_cli(*world["base"], "launch", *hosts, "--gpu", "0-1", "--port", str(free_port()), "--wait", "--watch",
                  "--json", "--", "--model-path", world["model"], env=world["env"])
    try:
        def ready_group():
            g = json.loads(world["run"]("sessions", *hosts, "--json").stdout)
            return g[0] if g and g[0]["state"] == "ready" else None

        g = wait_until(ready_group, 60, step=0.5)
        assert g, (world["run"]("sessions", *hosts, "--json").stdout, p.communicate(timeout=5) if p.poll() is not None
                   else "the launch still runs")
        time.sleep(1.0)  # the launch's own READY checks (its one-token generate) are through
        rec = json.loads((Path(world["runs"][1]) / g["members"][1]["session_id"] / "record.json").read_text())
        pids = subprocess.run(["pgrep", "-g", str(rec["pgid"]), "-f", "sglang::scheduler"], capture_output=True,
                              text=True, timeout=10).stdout.split()
        assert pids
        t = time.monotonic()
        os.kill(int(pids[0]), signal.SIGKILL)
        out, err = p.communicate(timeout=60)
        assert time.monotonic() - t <= 30
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, out + err
    res = json.loads(out)
    assert res["state"] == "failed" and res["failed_host"] == "testhost" and res["failed_rank"] == 1
    assert res["head_health"] == 200
    assert res["killed"][0].startswith("local (rank 0): stopped, confirmed"), res["killed"]


def test_relaunch_group_with_an_edited_flag_kills_every_member_then_launches_the_group_again(world):
    from pathlib import Path

    run, hosts = world["run"], world["hosts"]
    r = run("launch", *hosts, "--gpu", "0-1", "--port", str(free_port()), "--wait", "--json", "--", "--model-path",
            world["model"])
    assert r.returncode == 0, r.stdout + r.stderr
    old = json.loads(r.stdout)["session_id"]
    rr = run("relaunch", *hosts, old, "--set", "--max-running-requests=24", "--grace", "3", "--wait", "--json")
    assert rr.returncode == 0, rr.stdout + rr.stderr
    new = json.loads(rr.stdout)
    assert new["op"] == "relaunch" and new["state"] == "ready" and new["session_id"] != old
    assert [ln.split(":")[0] for ln in new["killed"]] == ["local (rank 0)", "testhost (rank 1)"]
    for runs, m in zip(world["runs"], new["members"]):
        argv = json.loads((Path(runs) / m["session_id"] / "spec.json").read_text())["argv"]
        assert argv[argv.index("--max-running-requests") + 1] == "24"
        assert argv.count("--node-rank") == 1 and argv[argv.index("--node-rank") + 1] == str(m["rank"])
    groups = {g["group"]: g["state"] for g in json.loads(run("sessions", *hosts, "--json").stdout)}
    assert groups == {old: "stopped", new["session_id"]: "ready"}, groups
    k = run("kill", *hosts, new["session_id"], "--grace", "3")
    assert k.returncode == 0, k.stdout + k.stderr


def test_member_dies_unwatched_group_reads_failed_and_report_group_writes_every_member(world, tmp_path):
    import os
    from pathlib import Path

    run, hosts = world["run"], world["hosts"]
    r = run("launch", *hosts, "--gpu", "0-1", "--port", str(free_port()), "--wait", "--json", "--", "--model-path",
            world["model"])
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout)
    gid = res["session_id"]
    rec = json.loads((Path(world["runs"][1]) / res["members"][1]["session_id"] / "record.json").read_text())
    os.killpg(rec["pgid"], signal.SIGKILL)  # node1 dies; no console watches: the head hangs on, /health 200

    def state():
        g = json.loads(run("sessions", *hosts, "--json").stdout)
        return g[0]["state"] if g else None

    assert wait_until(lambda: state() == "failed", 30, step=0.5), state()
    st = run("status", *hosts, gid)
    assert st.returncode == 1 and f"group {gid}: FAILED" in st.stdout and "rank 0 on local: READY" in st.stdout, \
        st.stdout
    out = tmp_path / "group.md"
    rp = run("report", *hosts, gid, "--out", str(out))
    assert rp.returncode == 0, rp.stdout + rp.stderr
    text = out.read_text()
    assert f"# Group {gid}: FAILED" in text and "**First failed member**: testhost (rank 1)" in text
    assert "group-r0.md" in text and "group-r1.md" in text
    assert (tmp_path / "group-r0.md").is_file() and (tmp_path / "group-r1.md").is_file()
    assert "local/r0 | " in text and "testhost/r1 | " in text
    k = run("kill", *hosts, gid, "--grace", "3")
    assert k.returncode == 0, k.stdout + k.stderr
