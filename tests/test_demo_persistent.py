"""The persistent demo host (console/sim/persistent.py) through real `mtpconsole` processes: `--demo` commands share
one demo between calls, `demo down` and the idle timeout remove everything it started, two commands started together
stage one demo, a stale demo is cleaned up (killing only what it recorded as its own) and staged again, and
`check`/`flags --demo` stage no server.

tests/conftest.py turns the persistent demo off for the rest of the suite; here each test turns it on with a short
idle timeout (so nothing outlives a failed test for long) in a private directory of its own, and takes it down at
the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from console.sim import persistent
from console.sim.demo import free_port, process_state, same_process
from tests.helpers.wait import holds_for, wait_until

IDLE_S = 120
"""The tests' own idle timeout: a test that fails before its `demo down` leaves nothing up for long."""


def _env(tmp_path: Path, idle: float | None = IDLE_S) -> dict[str, str]:
    env = {**os.environ, "MTPCONSOLE_AUDIT_LOG": os.devnull, "MTPCONSOLE_DEMO_DIR": str(tmp_path / "demo"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_STATE_HOME": str(tmp_path / "state")}
    env[persistent.IDLE_ENV] = "0" if idle is None else str(idle)
    return env


def mtp(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def _json(r: subprocess.CompletedProcess):
    assert r.stdout.strip(), (r.returncode, r.stderr)
    return json.loads(r.stdout)


def _gone(pid: int, ticks: int | None, timeout: float = 15) -> bool:
    """``pid`` (started at ``ticks``) has exited within ``timeout`` s: a process that has removed its files may still
    be exiting on a busy box (its environ already unreadable, so :func:`_own_live` no longer lists it)."""
    return bool(wait_until(lambda: not same_process(pid, ticks), timeout, step=0.1))


def _own_live(d: Path) -> list[int]:
    """Live processes (zombies aside) whose environment names a demo directory under ``d``."""
    mark = f"MTPCONSOLE_SIM_DIR={d}/".encode()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            env = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        st = process_state(int(name))
        if mark in env and st is not None and st[0] not in ("Z", "X"):
            out.append(int(name))
    return out


@pytest.fixture
def demo_env(tmp_path, monkeypatch):
    """The persistent demo on, in ``tmp_path/demo`` (also for in-process calls); taken down afterwards."""
    env = _env(tmp_path)
    monkeypatch.setenv("MTPCONSOLE_DEMO_DIR", env["MTPCONSOLE_DEMO_DIR"])
    monkeypatch.setenv(persistent.IDLE_ENV, str(IDLE_S))
    yield env
    mtp(env, "demo", "down", timeout=60)
    assert wait_until(lambda: _own_live(tmp_path / "demo") == [], 15, step=0.2), _own_live(tmp_path / "demo")


def test_launch_then_sessions_logs_ack_report_see_the_same_demo_and_down_removes_everything(demo_env, tmp_path):
    d = tmp_path / "demo"
    r = mtp(demo_env, "launch", "--demo", "--profile", "fixed", "--gpu", "1", "--wait", "--json")
    ready = _json(r)
    assert r.returncode == 0 and ready["state"] == "ready", ready
    assert "staging the demo host" in r.stderr  # the first --demo command stages it, and says where
    up = _json(mtp(demo_env, "demo", "status", "--json"))
    assert up["state"] == "up" and Path(up["root"]).parent == d and up["keeper"]["alive"]
    assert (d.stat().st_mode & 0o777) == 0o700 and ((d / "state.json").stat().st_mode & 0o777) == 0o600

    r = mtp(demo_env, "sessions", "--demo", "--json")
    views = {v["session_id"]: v for v in _json(r)}
    assert r.returncode == 0 and views[ready["session_id"]]["state"] == "ready", views
    assert "staging" not in r.stderr  # reused, not staged again
    logs = _json(mtp(demo_env, "logs", "--demo", ready["session_id"], "-n", "50", "--json"))
    assert logs["session_id"] == ready["session_id"] and logs["lines"]

    # the READY session still holds the profiles' port: this one gets its own
    r = mtp(demo_env, "launch", "--demo", "--profile", "incident", "--gpu", "2", "--port", str(free_port()), "--wait",
            "--json", "--force")
    failed = _json(r)
    assert r.returncode == 1 and failed["cause"] == "gpu_oom", failed
    r = mtp(demo_env, "ack", "--demo", failed["session_id"])
    assert r.returncode == 0, r.stdout + r.stderr
    views = {v["session_id"]: v for v in _json(mtp(demo_env, "sessions", "--demo", "--all", "--json"))}
    assert views[failed["session_id"]]["state"] == "failed" and views[failed["session_id"]]["acknowledged"], views
    out = tmp_path / "incident.md"
    r = mtp(demo_env, "report", "--demo", failed["session_id"], "--out", str(out))
    assert r.returncode == 0 and "gpu_oom" in out.read_text(), r.stdout + r.stderr

    again = _json(mtp(demo_env, "demo", "status", "--json"))
    assert again["keeper"] == up["keeper"] and again["root"] == up["root"]  # one demo all along
    record = json.loads((Path(up["root"]) / "runs" / ready["session_id"] / "record.json").read_text())
    assert same_process(record["pid"], record["start_ticks"])  # the READY server outlived its launch command

    down = _json(mtp(demo_env, "demo", "down", "--json"))
    assert down["was"] == "up" and up["keeper"]["pid"] in down["signalled"], down
    assert wait_until(lambda: _own_live(d) == [], 15, step=0.2), _own_live(d)
    assert not Path(up["root"]).exists() and not (d / "state.json").exists()
    assert _gone(record["pid"], record["start_ticks"])
    assert _gone(record["supervisor_pid"], record["supervisor_start_ticks"])
    assert _gone(up["keeper"]["pid"], up["keeper"]["start_ticks"])
    r = mtp(demo_env, "demo", "status")
    assert r.returncode == 1 and "down" in r.stdout
    assert _json(mtp(demo_env, "demo", "down", "--json"))["was"] == "down"  # twice is fine


def test_idle_timeout_removes_the_demo_once_unused_and_never_while_a_command_uses_it(tmp_path, monkeypatch):
    idle = 3.0
    env = _env(tmp_path, idle=idle)
    d = tmp_path / "demo"
    monkeypatch.setenv("MTPCONSOLE_DEMO_DIR", str(d))
    monkeypatch.setenv(persistent.IDLE_ENV, str(idle))
    try:
        up = _json(mtp(env, "demo", "up", "--no-load", "--json"))
        assert up["state"] == "up" and up["staged"] and up["idle_s"] == idle
        assert up["idle_deadline"] == pytest.approx(up["last_used_at"] + idle)
        # a command using the demo (as `logs -f` or `export` would) keeps it up past its idle timeout
        lease = persistent.acquire(stage=False)
        assert lease is not None and lease.state.keeper.pid == up["keeper"]["pid"]
        try:
            assert holds_for(lambda: persistent.status()["state"] == "up", idle + 2, step=0.25)
            assert persistent.status()["in_use"]
        finally:
            lease.release()
        released = time.time()
        assert wait_until(lambda: persistent.status()["state"] == "down", idle + 20, step=0.1)
        gone = time.time()
        assert gone - released >= idle - 0.5, (gone - released)  # not before its timeout (mtime granularity aside)
        assert wait_until(lambda: _own_live(d) == [], 15, step=0.2), _own_live(d)
        assert not Path(up["root"]).exists() and not (d / "state.json").exists()
        # the keeper removes the demo, then exits: on a busy box its exit may lag the removal (its environ is
        # already unreadable, so _own_live no longer lists it)
        assert _gone(up["keeper"]["pid"], up["keeper"]["start_ticks"])
        assert "idle for 3 s" in (d / "keeper.log").read_text()
    finally:
        mtp(env, "demo", "down", timeout=60)


def test_two_commands_started_together_stage_one_demo(demo_env, tmp_path):
    d = tmp_path / "demo"
    cmds = [["demo", "up", "--no-load", "--json"], ["demo", "up", "--no-load", "--json"],
            ["sessions", "--demo", "--json"]]
    procs = [subprocess.Popen([sys.executable, "-m", "console", *c], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=demo_env) for c in cmds]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    ups = [json.loads(outs[0][0]), json.loads(outs[1][0])]
    assert ups[0]["keeper"] == ups[1]["keeper"] and ups[0]["root"] == ups[1]["root"]
    stagers = [u["staged"] for u in ups] + ["staging the demo host" in outs[2][1]]
    assert sum(stagers) == 1, (stagers, outs)  # one of the three staged it, the other two waited and reused it
    assert [p.name for p in d.glob("mtpconsole-demo-*")] == [Path(ups[0]["root"]).name]
    foreign = [v for v in json.loads(outs[2][0]) if v["state"] == "foreign"]
    st = persistent.status()
    assert [v["launcher_pid"] for v in foreign] == [st["foreign"]["pid"]]  # the sessions call saw that demo


def test_a_stale_demo_is_cleaned_up_and_staged_again(demo_env, tmp_path):
    up = _json(mtp(demo_env, "demo", "up", "--no-load", "--json"))
    keeper, foreign = up["keeper"], up["foreign"]
    os.kill(keeper["pid"], 9)  # the keeper dies; what it started stays behind
    assert wait_until(lambda: not same_process(keeper["pid"], keeper["start_ticks"]), 10)
    r = mtp(demo_env, "demo", "status", "--json")
    assert r.returncode == 1 and _json(r)["state"] == "stale"
    assert same_process(foreign["pid"], foreign["start_ticks"])

    r = mtp(demo_env, "sessions", "--demo", "--json")
    assert r.returncode == 0 and "staging the demo host" in r.stderr, r.stderr
    now = persistent.status()
    assert now["state"] == "up" and now["keeper"]["pid"] != keeper["pid"] and now["root"] != up["root"]
    assert not Path(up["root"]).exists()
    assert _gone(foreign["pid"], foreign["start_ticks"])  # the old demo's own server was removed
    assert [v["launcher_pid"] for v in _json(r) if v["state"] == "foreign"] == [now["foreign"]["pid"]]


def test_a_stale_state_naming_other_processes_is_restaged_without_killing_them(demo_env, tmp_path):
    """Recorded pids that are now other processes (another start time, another boot) are never signalled."""
    d = persistent.private_dir(tmp_path / "demo")
    sleepers = [subprocess.Popen(["sleep", "120"], start_new_session=True) for _ in range(3)]
    try:
        ticks = [process_state(p.pid)[2] for p in sleepers]
        old = d / "mtpconsole-demo-old"
        (old / "runs" / "20260101-000000-gpu0-dead").mkdir(parents=True)
        (old / "sim" / "alloc").mkdir(parents=True)
        (old / "runs" / "20260101-000000-gpu0-dead" / "record.json").write_text(json.dumps(
            {"pid": sleepers[1].pid, "pgid": sleepers[1].pid, "start_ticks": ticks[1] + 1,
             "supervisor_pid": sleepers[2].pid, "supervisor_start_ticks": ticks[2] - 1}))
        (old / "sim" / "alloc" / f"{sleepers[2].pid}.json").write_text(json.dumps(
            {"pid": sleepers[2].pid, "start_ticks": ticks[2] + 7}))
        persistent.write_state(d, persistent.DemoState(
            root=str(old), boot_id="another-boot", keeper=persistent.Proc(pid=sleepers[0].pid, start_ticks=ticks[0]),
            idle_s=60, created_at=time.time() - 3600, load=False, ready=True, port=1,
            foreign=persistent.Proc(pid=sleepers[1].pid, start_ticks=ticks[1] + 1)))
        r = mtp(demo_env, "demo", "status", "--json")
        assert r.returncode == 1 and _json(r)["state"] == "stale"  # the keeper's pid runs, but not from this boot

        up = _json(mtp(demo_env, "demo", "up", "--no-load", "--json"))
        assert up["state"] == "up" and up["staged"] and up["root"] != str(old)
        assert not old.exists()
        assert [p.poll() for p in sleepers] == [None, None, None]  # none of them was signalled
        assert all(same_process(p.pid, t) for p, t in zip(sleepers, ticks))
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


def test_check_and_flags_under_demo_stage_no_server(demo_env, tmp_path):
    env = {**demo_env, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    seen: list[str] = []
    done = threading.Event()

    def watch() -> None:  # every process started under tmp_path that is a server or a load generator
        while not done.is_set():
            for name in os.listdir("/proc"):
                try:
                    argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                line = b" ".join(argv).decode(errors="replace")
                if str(tmp_path) in line and ("--model-path" in line or " load " in line):
                    seen.append(line)
            time.sleep(0.02)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        r = mtp(env, "check", "--demo", "--json", "--", "--model-path", "/m", "--cuda-graph-max-bs", "8")
        problems = _json(r)
        assert r.returncode != 0 and [p["kind"] for p in problems] == ["ambiguous"], problems  # rc: issue 26 item 5
        r = mtp(env, "flags", "--demo", "--json", "--search", "speculative")
        assert r.returncode == 0 and any(f["name"] == "--speculative-algorithm" for f in _json(r)["flags"])
    finally:
        done.set()
        t.join(5)
    assert seen == []
    assert not (tmp_path / "demo" / "state.json").exists() and not list((tmp_path / "demo").glob("mtpconsole-demo-*"))
    assert list((tmp_path / "tmp").iterdir()) == []  # the demo host's files were removed with the command


def test_the_tui_reuses_a_running_demo_and_leaves_it_up_else_stages_and_removes_its_own(demo_env, tmp_path):
    """What `mtpconsole --demo` (the TUI) gets from the CLI context: the running persistent demo, left up after
    quit; with none, a demo of its own, removed on quit, and no persistent one staged."""
    from console.commands.context import demo_or_config, make_context
    from console.config import Config

    d = tmp_path / "demo"
    ctx = make_context(config=Config(), demo=True, audit_log=os.devnull, demo_load=False)

    async def sim_dir_seen() -> str:
        async with demo_or_config(ctx, background=True) as (cfg, names):
            assert names == ["demo"]
            return str(cfg.hosts["demo"].sim_dir)

    own = asyncio.run(sim_dir_seen())
    assert Path(own).parent.parent != d and not Path(own).exists()  # its own demo, outside the shared one, gone
    assert persistent.status()["state"] == "down"

    up = _json(mtp(demo_env, "demo", "up", "--no-load", "--json"))
    assert asyncio.run(sim_dir_seen()) == str(Path(up["root"]) / "sim")
    after = persistent.status()
    assert after["state"] == "up" and after["keeper"] == up["keeper"]  # quitting left it up


def test_demo_command_refuses_what_does_not_apply(tmp_path):
    r = mtp(_env(tmp_path, idle=None), "demo", "up")
    assert r.returncode == 2 and "MTPCONSOLE_DEMO_IDLE_S=0" in r.stderr
    r = mtp(_env(tmp_path), "demo", "status", "--idle", "5")
    assert r.returncode == 2 and "'demo up' only" in r.stderr
    r = mtp(_env(tmp_path), "demo", "up", "--idle", "0")
    assert r.returncode == 2 and "--idle 0" in r.stderr
    r = mtp({**_env(tmp_path), persistent.IDLE_ENV: "soon"}, "sessions", "--demo")
    assert r.returncode == 2 and "MTPCONSOLE_DEMO_IDLE_S='soon'" in r.stderr
    assert not (tmp_path / "demo" / "state.json").exists()


def test_plan_under_demo_uses_the_demo_model_and_gpu_and_stages_nothing(tmp_path):
    """``plan --demo`` needs no model path or GPU size (the demo's), and stages no demo host (it never opens a host:
    no staging line, no demo directory)."""
    env = dict(os.environ, MTPCONSOLE_DEMO_DIR=str(tmp_path / "demo"), MTPCONSOLE_DEMO_IDLE_S="900")
    out = subprocess.run([sys.executable, "-m", "console", "plan", "--demo", "--json", "--",
                          "--mem-fraction-static", "0.9"], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)["plan"]
    assert plan["gpu_mem_bytes"] == 97887 << 20 and plan["verdict"] in ("fits", "tight")
    assert "demo host" not in out.stderr and not (tmp_path / "demo").exists()
    bad = subprocess.run([sys.executable, "-m", "console", "plan", "--", "--x"], capture_output=True, text=True,
                         timeout=60, env=env)
    assert bad.returncode == 2 and "--model-config and --gpu-mem" in bad.stderr
