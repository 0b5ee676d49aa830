"""The orphan hunter and acknowledging a failure, with real processes on the `local` host and simulated GPUs:
a worker titled ``sglang::scheduler`` re-parented to init by a double fork and holding GPU memory is found
with its evidence (and a live session's workers are not), listed by `mtpconsole orphans`, killed by
`--kill PID` (gone, GPU memory released); an ended session is acknowledged with `mtpconsole ack`
(ack.json in its run directory), and its view is marked acknowledged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.core.orphans import find_orphans, hunt_snapshot
from console.core.sessions import derive_views
from console.model import (
    ConnectionInfo,
    GpuProc,
    GpuSample,
    HostSnapshot,
    ProcRef,
    ServerProc,
    SessionInfo,
)
from console.ops import lifecycle
from console.sim.demo import FIXED_FLAGS
from tests.conftest import free_port
from tests.helpers.rel_util import (
    REPO,
    cli,
    kill_quietly,
    write_config,
)
from tests.helpers.sim_files import make_sim, sim_env, sim_link
from tests.helpers.wait import await_until, wait_until

ORPHAN = str(REPO / "tests" / "helpers" / "orphan_proc.py")


@pytest.fixture
def sim(tmp_path):
    return make_sim(tmp_path, 2, tag="o")


@pytest.fixture(autouse=True)
def _private_audit_log(tmp_path, monkeypatch):
    monkeypatch.setenv("MTPCONSOLE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))


@pytest.fixture
async def link(sim, runs_dir):
    async with sim_link(runs_dir, sim[0]) as lk:
        yield lk


def start_orphan(d: Path, tmp_path: Path, gpu: int = 0, mib: int = 5000, port: int = 0,
                 title: str = "sglang::scheduler") -> int:
    """A real orphan (double fork, re-parented); returns its pid once it holds its GPU memory."""
    pidfile = tmp_path / f"orphan-{gpu}-{mib}.pid"
    env = {**os.environ, **sim_env(d), "ORPHAN_REPO": str(REPO)}
    subprocess.run([sys.executable, ORPHAN, str(d), str(gpu), str(mib), str(pidfile), title, str(port)], env=env,
                   check=True, timeout=30)
    assert wait_until(pidfile.exists, 20, step=0.05), "the orphan never wrote its pid"
    return int(pidfile.read_text())


def config(tmp_path: Path, runs_dir: Path, d: Path) -> Path:
    return write_config(tmp_path / "config.toml", {"local": {"runs_dir": str(runs_dir), "python": sys.executable,
                                                             "gpu_source": "sim", "sim_dir": str(d)}})


async def test_double_forked_worker_is_an_orphan_and_a_live_session_is_not(link, sim, tmp_path):
    d, model = sim
    pid = start_orphan(d, tmp_path, gpu=0, mib=5000)
    try:
        r = await lifecycle.launch(link, lifecycle.LaunchRequest(
            host="local", command=[sys.executable, "-m", "console.sim.sglang"],
            flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[1], port=free_port()), timeout=60)
        assert r.ok, r

        async def found():
            snap = await lifecycle.fresh_snapshot(link)
            return snap, find_orphans(snap)
        last: list = []

        async def found_it() -> bool:
            last[:] = await found()
            return any(o.pid == pid and o.gpu_mem_mib for o in last[1])
        await await_until(found_it, 20)
        snap, orphans = last
        assert [o.pid for o in orphans] == [pid], (orphans, snap.servers)
        o = orphans[0]
        text = " | ".join(o.evidence)
        assert "titled like a server worker: sglang::scheduler" in text
        assert "5,000 MiB on GPU 0" in text
        assert "no server launcher" in text or "init (pid 1)" in text  # adopted by init or a subreaper
        assert "has no live leader" in text
        # the live session's workers hold GPU 1 and are claimed by it
        assert any(p.session_id == r.session_id and p.gpu_mem_mib for p in snap.servers)
        k = await lifecycle.kill(link, lifecycle.KillTarget(host="local", session_id=r.session_id), grace=5)
        assert k.ok, k
    finally:
        kill_quietly([pid])


def test_cli_lists_and_kills_an_orphan_confirmed(sim, tmp_path, runs_dir):
    d, _ = sim
    port = free_port()
    pid = start_orphan(d, tmp_path, gpu=1, mib=7000, port=port)
    cfg = config(tmp_path, runs_dir, d)
    try:
        out = cli("orphans", "--host", "local", "--config", str(cfg), "--json")
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        (o,) = [x for x in data["orphans"] if x["pid"] == pid]
        assert o["gpu_mem_mib"] == {"1": 7000} and o["title"].startswith("sglang::scheduler")
        text = cli("orphans", "--host", "local", "--config", str(cfg))
        assert f"pid {pid}" in text.stdout and "GPU 1 7,000 MiB" in text.stdout and "- titled like" in text.stdout
        bad = cli("orphans", "--host", "local", "--config", str(cfg), "--kill", str(os.getpid()))
        assert bad.returncode == 2 and "is no orphan" in bad.stderr and "Traceback" not in bad.stderr
        k = cli("orphans", "--host", "local", "--config", str(cfg), "--kill", str(pid), "--grace", "3", "--json")
        assert k.returncode == 0, (k.stdout, k.stderr)
        res = json.loads(k.stdout)
        steps = {s["name"]: s for s in res["steps"]}
        assert res["ok"] and steps["exited"]["state"] == "ok" and steps["GPU released"]["state"] == "ok", res
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]
        after = json.loads(cli("orphans", "--host", "local", "--config", str(cfg), "--json").stdout)
        assert all(x["pid"] != pid for x in after["orphans"])
    finally:
        kill_quietly([pid])


def _snap(servers, sessions=(), gpus=(), relatives=()) -> HostSnapshot:
    return HostSnapshot(name="h", connection=ConnectionInfo(state="connected"), servers=list(servers),
                        sessions=list(sessions), gpus=list(gpus), relatives=list(relatives), agent_uid=1000)


def _p(pid, ppid, pgid, argv, role="worker", **kw) -> ServerProc:
    return ServerProc(pid=pid, ppid=ppid, pgid=pgid, sid=kw.pop("sid", pgid), start_ticks=pid * 10, argv=argv,
                      role=role, framework="sglang", uid=1000, **kw)


def test_evidence_rules_unit():
    live = SessionInfo.model_validate({"session_id": "s-live", "run_dir": "/r/s-live", "server_alive": True,
                                       "owner_uid": 1000,
                                       "record": {"supervisor_pid": 90, "pid": 100, "pgid": 100, "start_ticks": 1,
                                                  "started_at": 1.0}})
    ended = SessionInfo.model_validate({"session_id": "s-old", "run_dir": "/r/s-old", "spec": {
        "session_id": "s-old", "argv": ["x"], "port": 31000}, "record": {"supervisor_pid": 80, "pid": 70, "pgid": 70,
                                                                         "start_ticks": 1, "started_at": 1.0},
        "exit": {"ended_at": 5.0, "signal": 9}, "owner_uid": 1000})
    servers = [
        _p(100, 90, 100, ["python", "-m", "sglang.launch_server"], role="launcher", session_id="s-live"),
        _p(101, 100, 100, ["sglang::scheduler"], session_id="s-live", gpu_mem_mib={0: 1000}),
        _p(200, 1, 200, ["python", "-m", "sglang.launch_server"], role="launcher"),  # a live foreign server
        _p(201, 200, 200, ["sglang::scheduler"], gpu_mem_mib={1: 2000}),
        _p(71, 1, 70, ["sglang::scheduler"], session_id="s-old", gpu_mem_mib={2: 3000}),  # ended session's worker
        _p(300, 1, 300, ["VLLM::EngineCore"], role="other", sid=77),  # a vLLM engine whose launcher died
        _p(400, 555, 400, ["python", "train.py"], role="other", gpu_mem_mib={3: 4000}),  # someone's job
        _p(501, 500, 500, ["sglang::scheduler"], gpu_mem_mib={4: 5000}),  # under a wrapper script
    ]
    relatives = [ProcRef(pid=1, sid=1, pgid=1, state="S", argv=["/sbin/init"]),
                 ProcRef(pid=555, ppid=1, sid=555, pgid=555, state="S", argv=["bash"]),
                 ProcRef(pid=500, ppid=1, sid=500, pgid=500, state="S", argv=["python3", "myserve.py"])]
    gpus = [GpuSample(index=3, procs=[GpuProc(pid=400, used_mib=4000), GpuProc(pid=999, used_mib=64)])]
    rep = hunt_snapshot(_snap(servers, [live, ended], gpus, relatives), port_owners={31000: 71})
    assert [o.pid for o in rep.orphans] == [71, 300]
    old = rep.orphans[0]
    assert old.port == 31000 and any("s-old ended (signal 9" in e for e in old.evidence)
    assert any("port 31000" in e for e in old.evidence) and any("init (pid 1)" in e for e in old.evidence)
    assert "VLLM::EngineCore" in " ".join(rep.orphans[1].evidence)
    why = {f.pid: f.why for f in rep.foreign}
    assert set(why) == {400, 501, 999}
    assert "another container" in why[999]
    assert "myserve.py" in why[501] and "is alive" in why[501]
    assert "bash" in why[400]


async def test_ack_records_the_acknowledgement_in_the_run_dir(link, sim, tmp_path, runs_dir):
    d, model = sim
    r = await lifecycle.launch(link, lifecycle.LaunchRequest(
        host="local", command=[sys.executable, "-m", "console.sim.sglang"],
        flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=free_port()), timeout=60)
    assert r.ok, r
    cfg = config(tmp_path, runs_dir, d)
    live = cli("ack", "--host", "local", "--config", str(cfg), r.session_id)
    assert live.returncode == 1 and "has not ended" in live.stderr, live
    k = await lifecycle.kill(link, lifecycle.KillTarget(host="local", session_id=r.session_id), grace=5)
    assert k.ok, k
    out = cli("ack", "--host", "local", "--config", str(cfg), r.session_id, "--json")
    assert out.returncode == 0, out.stderr
    at = json.loads(out.stdout)["acknowledged_at"]
    assert at and json.loads((runs_dir / r.session_id / "ack.json").read_text())["at"] == at
    again = json.loads(cli("ack", "--host", "local", "--config", str(cfg), r.session_id, "--json").stdout)
    assert again["acknowledged_at"] == at  # the first acknowledgement's time is kept
    # this console's agent (already running, the session cached as ended) sees the other console's ack
    assert await await_until(lambda: any(s.acknowledged_at == at for s in link.snapshot().sessions), 10)
    (v,) = [v for v in derive_views(link.snapshot(), {}, time.time()) if v.session_id == r.session_id]
    assert v.acknowledged and v.acknowledged_at == at
    table = cli("sessions", "--host", "local", "--config", str(cfg), "--all", "--state", "ended")
    assert table.returncode == 0, table.stderr
    (row,) = [x for x in table.stdout.splitlines() if r.session_id in x]
    assert "STOPPED" in row and " ✓ " in row and "SESSION / PID" in table.stdout
    live_only = cli("sessions", "--host", "local", "--config", str(cfg), "--state", "live")
    assert r.session_id not in live_only.stdout
    bad = cli("ack", "--host", "local", "--config", str(cfg), "../etc")
    assert bad.returncode == 2 and "bad session id" in bad.stderr and "Traceback" not in bad.stderr


async def test_launch_preflight_names_the_orphan_on_its_gpu(link, sim, tmp_path):
    d, model = sim
    pid = start_orphan(d, tmp_path, gpu=0, mib=6000)
    try:
        assert await await_until(lambda: any(o.pid == pid and o.gpu_mem_mib for o in find_orphans(link.snapshot())), 20)
        r = await lifecycle.launch(link, lifecycle.LaunchRequest(
            host="local", command=[sys.executable, "-m", "console.sim.sglang"],
            flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=free_port()), timeout=60)
        assert not r.ok and r.session_id is None
        pre = next(s for s in r.steps if s.name == "preflight")
        assert pre.state == "failed" and f"orphan pid {pid} (sglang::scheduler" in pre.evidence, pre
        assert "6,000 MiB on GPU 0" in pre.evidence and "orphans --kill PID" in r.error
    finally:
        kill_quietly([pid])
