"""Issue 18, item 1 (high): a supervisor, server or group counts as a session's only when pid, start time and
boot id match record.json (and it carries the session's mark); a stale record claims nothing, reads "ended
(host rebooted / record stale)", and `kill` signals nothing. Real processes, the real agent over the test
sshd, the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.helpers.rel_util import cli, descendants_of, kill_quietly, write_config
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.sshd

SID = "20261130-101010-gpu0-5a1e"


def start_ticks(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return int(raw[raw.rfind(")") + 2:].split()[19])


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def plant(runs_dir: Path, record: dict) -> Path:
    d = runs_dir / SID
    d.mkdir()
    (d / "spec.json").write_text(json.dumps({
        "session_id": SID, "argv": ["python3", "-m", "sglang.launch_server", "--model-path", "/m"],
        "gpus": [0], "port": free_port(), "env_names": []}))
    (d / "record.json").write_text(json.dumps({"started_at": time.time() - 3600, **record}))
    (d / "output.log").write_text("old server output\n")
    return d


@pytest.fixture
def unrelated_tree():
    """An unrelated `bash` with two `sleep`s under it: what a reused supervisor pid points at."""
    p = subprocess.Popen(["bash", "-c", "sleep 300 & sleep 300 & wait"], start_new_session=True)
    assert wait_until(lambda: len(descendants_of(p.pid)) == 2, 10)
    kids = sorted(descendants_of(p.pid))
    yield p.pid, kids
    kill_quietly(pids=[p.pid, *kids], groups=[p.pid])
    p.wait(5)


@pytest.fixture
def common(sshd, tmp_path, runs_dir):
    conf = write_config(tmp_path / "config.toml", {"testhost": {"python": "python3", "runs_dir": str(runs_dir),
                                                                "gpu_source": "none"}})
    return ["--ssh-config", str(sshd.ssh_config), "--config", str(conf)]


@pytest.mark.parametrize("how", ["start-time", "boot-id", "not-its-supervisor"])
def test_stale_record_claims_nothing_and_kill_touches_nothing(common, runs_dir, unrelated_tree, tmp_path, how):
    bash, sleeps = unrelated_tree
    ticks = start_ticks(bash)
    record = {"supervisor_pid": bash, "supervisor_start_ticks": ticks, "pid": 4_000_000 - 7, "pgid": 4_000_000 - 7,
              "start_ticks": 12345, "boot_id": boot_id()}
    if how == "start-time":
        record["supervisor_start_ticks"] = ticks - 100  # the pid was reused by another process since
    elif how == "boot-id":
        record["boot_id"] = "00000000-0000-4000-8000-000000000000"  # recorded before the last reboot
    plant(runs_dir, record)
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
    q = cli(*common, "status", "--host", "testhost", "--json", env=env)
    assert q.returncode == 0, q.stderr
    host = json.loads(q.stdout)["hosts"][0]
    assert not [p for p in host["servers"] if p["session_id"] == SID], host["servers"]
    (sess,) = [s for s in host["sessions"] if s["session_id"] == SID]
    assert not sess["server_alive"] and not sess["supervisor_alive"] and sess["record_stale"], sess
    v = cli(*common, "sessions", "--host", "testhost", "--json", env=env)
    (view,) = [x for x in json.loads(v.stdout) if x["session_id"] == SID]
    assert view["state"] == "stopped" and "ended (host rebooted / record stale)" in view["hint"], view
    k = cli(*common, "kill", SID, "--host", "testhost", "--grace", "2", "--json", env=env)
    assert k.returncode == 1, k.stdout + k.stderr
    r = json.loads(k.stdout)
    assert not r["ok"] and "nothing signalled" in r["error"], r
    assert all(Path(f"/proc/{p}").exists() for p in [bash, *sleeps]), "kill touched an unrelated process"
    assert not (runs_dir / SID / "stop-request.json").exists()


def test_supervisor_pid_1_claims_nothing(common, runs_dir, tmp_path):
    """``supervisor_pid: 1`` (and the server's pid 1, with pid 1's true start time and this boot's id) would
    have claimed every process on the host (sshd, other users' tmux, the console itself)."""
    one = start_ticks(1)
    plant(runs_dir, {"supervisor_pid": 1, "supervisor_start_ticks": one, "pid": 1, "pgid": 1, "start_ticks": one,
                     "boot_id": boot_id()})
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
    q = cli(*common, "status", "--host", "testhost", "--json", env=env)
    host = json.loads(q.stdout)["hosts"][0]
    assert not [p for p in host["servers"] if p["session_id"] == SID], host["servers"]
    (sess,) = [s for s in host["sessions"] if s["session_id"] == SID]
    assert not sess["server_alive"] and not sess["supervisor_alive"] and sess["record_stale"], sess
    # only once nothing is claimed: kill must refuse (pid 1's group is never signalled)
    k = cli(*common, "kill", SID, "--host", "testhost", "--grace", "2", "--json", env=env)
    assert k.returncode == 1 and "nothing signalled" in json.loads(k.stdout)["error"], k.stdout


def test_kill_of_a_confirmed_session_still_stops_it(common, runs_dir, tmp_path):
    """The identity checks keep the normal path: a real launch is confirmed (pid, start time, boot id, the
    session's mark) and `kill` stops it."""
    server = tmp_path / "idle.py"
    server.write_text("import time\nprint('up', flush=True)\nt = time.time() + 60\n"
                      "while time.time() < t:\n    time.sleep(0.1)\n")
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
    p = cli(*common, "launch", "--no-validate", "--host", "testhost", "--port", str(free_port()), "--json", "--command",
            f"python3 {server}", "--", "--model-path", "/m", env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    sid = json.loads(p.stdout)["session_id"]
    rec = json.loads((runs_dir / sid / "record.json").read_text())
    try:
        q = cli(*common, "status", "--host", "testhost", "--json", env=env)
        (sess,) = [s for s in json.loads(q.stdout)["hosts"][0]["sessions"] if s["session_id"] == sid]
        assert sess["server_alive"] and sess["supervisor_alive"] and not sess["record_stale"], sess
        k = cli(*common, "kill", sid, "--host", "testhost", "--grace", "3", "--json", env=env)
        assert k.returncode == 0 and json.loads(k.stdout)["ok"], k.stdout + k.stderr
        assert wait_until(lambda: not Path(f"/proc/{rec['pid']}").exists(), 10)
    finally:
        kill_quietly(pids=[rec["pid"]], groups=[rec["pgid"]])


def test_agent_refuses_to_signal_pid_1_or_its_own_group(sshd, runs_dir):
    """The agent's own guard, below the console's: pid 1 and the agent's group are never signalled."""
    import asyncio

    from console.link.link import RequestError
    from tests.helpers.rel_util import ssh_link

    async def go():
        lk = ssh_link(sshd, runs_dir)
        await lk.open()
        try:
            for args in ({"pid": 1, "start_ticks": start_ticks(1), "signal": 0},
                         {"pid": 1, "pgid": 1, "start_ticks": start_ticks(1), "signal": 0}):
                with pytest.raises(RequestError, match="refusing to signal"):
                    await lk.request("kill", args)
            me = os.getpid()
            r = await lk.request("kill", {"pid": me, "start_ticks": start_ticks(me), "signal": 0})
            assert r["signalled"] == [me]  # an ordinary pid with its identity is still signalled (0: a probe)
        finally:
            await lk.close()
    asyncio.run(go())
    assert signal.SIGTERM  # the test process is alive to tell
