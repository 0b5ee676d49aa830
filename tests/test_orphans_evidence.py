"""No orphan claim without positive evidence, with real processes (issue 24's findings, each staged for real).

A live, answering server whose launcher no pattern recognises (a wrapper script, an application using the
server in-process), or that is recognised by the newer shapes (``python -m sglang_router.launch_server``), a
READY session launched from another runs directory, and (as root) another user's server whose run directory
even claims its session ended: none of their processes is listed as an orphan by `mtpconsole orphans`, the
unrecognised ones are listed under ``foreign`` with why, `orphans --kill PID` refuses them (rc 2), and the
server still answers ``/health`` afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from console.config import HostConfig
from console.link.link import HostLink
from console.link.ssh import HostSpec
from console.ops import lifecycle
from console.sim.demo import FIXED_FLAGS
from tests.conftest import free_port
from tests.helpers.rel_util import REPO, cleanup_runs, cli, kill_quietly, write_config
from tests.helpers.sim_files import make_sim, sim_env
from tests.helpers.wait import wait_until

OTHER_UID = 65534
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture(autouse=True)
def _private_audit_log(tmp_path, monkeypatch):
    monkeypatch.setenv("MTPCONSOLE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))


@pytest.fixture
def sim(tmp_path):
    return make_sim(tmp_path, 2, tag="e")


def config(path: Path, runs_dir: Path, d: Path) -> Path:
    return write_config(path, {"local": {"runs_dir": str(runs_dir), "python": sys.executable, "gpu_source": "sim",
                                         "sim_dir": str(d)}})


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                out.append(int(name))
    return out


def title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return ""


def hunt(cfg: Path) -> dict:
    p = cli("orphans", "--host", "local", "--config", str(cfg), "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def refused(cfg: Path, pid: int) -> subprocess.CompletedProcess:
    p = cli("orphans", "--host", "local", "--config", str(cfg), "--kill", str(pid), "--grace", "2")
    assert p.returncode == 2 and "Traceback" not in p.stderr, (p.stdout, p.stderr)
    return p


STARTERS = {
    # a 3-line wrapper that runs the server module in its own process
    "wrapper": ("myserve.py", "import runpy, sys\nsys.argv[0] = 'console.sim.sglang'\n"
                              "runpy.run_module('console.sim.sglang', run_name='__main__', alter_sys=True)\n"),
    # an application using the server in-process (SGLang's Engine API has this shape)
    "engine_app": ("app.py", "import sys\nfrom console.sim.sglang import main\nsys.exit(main(sys.argv[1:]))\n"),
    # the router's launcher shape, which starts its own workers
    "router": ("sglang_router/launch_server.py", "import sys\nfrom console.sim.sglang import main\n"
                                                 "sys.exit(main(sys.argv[1:]))\n"),
}


@pytest.mark.parametrize("shape", sorted(STARTERS))
def test_workers_of_a_live_unrecognised_or_router_parent_are_never_orphans(shape, sim, tmp_path):
    d, model = sim
    rel, code = STARTERS[shape]
    src = tmp_path / "app"
    (src / rel).parent.mkdir(parents=True, exist_ok=True)
    (src / rel).write_text(code)
    if shape == "router":
        (src / "sglang_router" / "__init__.py").write_text("")
        argv = [sys.executable, "-m", "sglang_router.launch_server"]
    else:
        argv = [sys.executable, str(src / rel)]
    port = free_port()
    env = {**os.environ, **sim_env(d), "PYTHONPATH": f"{src}:{REPO}", "CUDA_VISIBLE_DEVICES": "0"}
    log = open(tmp_path / "server.log", "wb")
    server = subprocess.Popen([*argv, "--model-path", str(model), "--port", str(port), *FIXED_FLAGS],
                              stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=src)
    cfg = config(tmp_path / "config.toml", tmp_path / "runs", d)
    try:
        assert wait_until(lambda: healthy(port), 60, step=0.1), (tmp_path / "server.log").read_text(errors="replace")[-2000:]
        workers = [c for c in children(server.pid) if title(c).startswith("sglang::")]
        assert workers, [title(c) for c in children(server.pid)]
        rep = hunt(cfg)
        listed = {o["pid"] for o in rep["orphans"]}
        assert not listed & {server.pid, *workers}, rep["orphans"]
        foreign = {f["pid"]: f["why"] for f in rep["foreign"]}
        if shape == "router":  # recognised: a live launcher claims its workers
            assert not set(foreign) & set(workers), rep["foreign"]
            p = refused(cfg, workers[0])
            assert "is no orphan" in p.stderr
        else:
            assert set(workers) <= set(foreign), rep
            assert all("is alive" in foreign[w] and str(server.pid) in foreign[w] for w in workers), foreign
            p = refused(cfg, workers[0])
            assert "not proven an orphan" in p.stderr and str(server.pid) in p.stderr
        assert healthy(port) and server.poll() is None
        assert all(Path(f"/proc/{w}").exists() for w in workers)
    finally:
        kill_quietly([], [server.pid])
        server.wait(10)
        log.close()


async def test_a_ready_session_of_another_runs_dir_is_no_orphan(sim, tmp_path):
    d, model = sim
    runs_a, runs_b = tmp_path / "runs-a", tmp_path / "runs-b"
    link = HostLink(HostSpec(name="local", local=True), HostConfig(
        python=sys.executable, runs_dir=str(runs_a), gpu_source="sim", sim_dir=str(d), launch_env=sim_env(d)),
        interval=0.3)
    await link.open()
    port = free_port()
    try:
        r = await lifecycle.launch(link, lifecycle.LaunchRequest(
            host="local", command=[sys.executable, "-m", "console.sim.sglang"],
            flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=port), timeout=90)
        assert r.ok, r
        await link.close()  # only the other console (runs directory B) looks now
        cfg = config(tmp_path / "config-b.toml", runs_b, d)
        status = json.loads(cli("status", "--host", "local", "--config", str(cfg), "--json").stdout)
        members = [p for p in status["hosts"][0]["servers"] if p.get("session_id") == r.session_id
                   and p["role"] == "worker"]
        assert members, "the session's workers are visible to the other console"
        assert all(p["run_dir"] == str(runs_a / r.session_id) for p in members)
        rep = hunt(cfg)
        assert not [o for o in rep["orphans"] if o["session_id"] == r.session_id], rep
        assert not [f for f in rep["foreign"] if f["session_id"] == r.session_id], rep  # claimed: a live session
        p = refused(cfg, members[0]["pid"])
        assert "is no orphan" in p.stderr
        assert healthy(port)
    finally:
        await link.close()
        cleanup_runs(runs_a)


@pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true", reason="needs root to start a process "
                    "as another user (fails, not skips, under CI=true)")
def test_another_users_server_is_foreign_even_when_its_run_dir_says_ended(sim, tmp_path):
    assert os.geteuid() == 0, "this test runs as root under CI=true (it starts a process as uid 65534)"
    assert os.access(SYSTEM_PYTHON, os.X_OK), f"{SYSTEM_PYTHON} is needed to run as another user"
    d, _ = sim
    shared = Path(tempfile.mkdtemp(prefix="mtpc-other-"))  # reachable by uid 65534 (pytest's tmp is root-only)
    try:
        os.chmod(shared, 0o755)
        helper = shared / "server.py"
        shutil.copy(REPO / "tests" / "helpers" / "other_user_server.py", helper)
        other_sim = shared / "sim"
        shutil.copytree(d, other_sim)
        for p in (other_sim, other_sim / "alloc"):
            os.chmod(p, 0o777)
        run_dir = shared / "runs" / "20261201-000000-gpu0-beef"  # their session: ended, by its own files
        run_dir.mkdir(parents=True)
        (run_dir / "exit.json").write_text(json.dumps({"ended_at": time.time() - 60, "signal": 9}))
        for p in (shared / "runs", run_dir, run_dir / "exit.json"):
            os.chown(p, OTHER_UID, OTHER_UID)
        pidfile = shared / "pids.json"
        os.chmod(shared, 0o777)
        port = free_port()
        env = {"PATH": "/usr/bin:/bin", "MTPCONSOLE_SIM_DIR": str(other_sim), "MTPCONSOLE_SESSION": run_dir.name,
               "MTPCONSOLE_RUN_DIR": str(run_dir)}

        def as_other():
            os.setgroups([])
            os.setresgid(OTHER_UID, OTHER_UID, OTHER_UID)
            os.setresuid(OTHER_UID, OTHER_UID, OTHER_UID)

        server = subprocess.Popen([SYSTEM_PYTHON, str(helper), str(other_sim), "0", "6000", str(port), str(pidfile)],
                                  env=env, cwd=shared, preexec_fn=as_other, start_new_session=True)
        try:
            assert wait_until(lambda: pidfile.exists() and healthy(port), 30, step=0.1)
            kids = json.loads(pidfile.read_text())["children"]
            cfg = config(tmp_path / "config.toml", tmp_path / "runs", other_sim)
            reps: list = []

            def all_listed() -> bool:  # the scheduler's GPU memory appears once its alloc file is read
                reps.append(hunt(cfg))
                return {f["pid"] for f in reps[-1]["foreign"]} >= set(kids)
            wait_until(all_listed, 5, step=0.2)
            rep = reps[-1]
            assert rep is not None and not {o["pid"] for o in rep["orphans"]} & {server.pid, *kids}, rep
            foreign = {f["pid"]: f for f in rep["foreign"]}
            assert set(kids) <= set(foreign), rep
            for k in kids:
                assert foreign[k]["uid"] == OTHER_UID and "uid 65534" in foreign[k]["why"], foreign[k]
            text = cli("orphans", "--host", "local", "--config", str(cfg)).stdout
            assert "foreign" in text and "(uid 65534)" in text
            p = refused(cfg, kids[0])
            assert "not proven an orphan" in p.stderr and "uid 65534" in p.stderr
            assert healthy(port) and all(Path(f"/proc/{k}").exists() for k in kids)
        finally:
            kill_quietly([], [server.pid])
            server.wait(10)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


async def test_an_orphan_kill_re_proves_its_target_and_signals_nothing_when_it_is_not(sim, tmp_path):
    """The TUI lists an orphan and the operator confirms seconds later: the kill re-derives the verdict on a fresh
    snapshot. A process that belongs to a live server by then is refused with the reason and never signalled."""
    d, model = sim
    runs = tmp_path / "runs"
    link = HostLink(HostSpec(name="local", local=True), HostConfig(
        python=sys.executable, runs_dir=str(runs), gpu_source="sim", sim_dir=str(d), launch_env=sim_env(d)),
        interval=0.3)
    await link.open()
    try:
        r = await lifecycle.launch(link, lifecycle.LaunchRequest(
            host="local", command=[sys.executable, "-m", "console.sim.sglang"],
            flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=free_port()), timeout=90)
        assert r.ok, r
        snap = await link.refresh()
        (w, *_) = [p for p in snap.servers if p.session_id == r.session_id and p.role == "worker"]
        k = await lifecycle.kill(link, lifecycle.KillTarget(host="local", pid=w.pid, start_ticks=w.start_ticks,
                                                            as_orphan=True), grace=2)
        assert not k.ok and "belongs to a live server" in (k.error or "") and "nothing signalled" in k.error, k
        assert [s.state for s in k.steps if s.name == "SIGTERM"] != ["ok"]
        assert Path(f"/proc/{w.pid}").exists()
        again = await link.refresh()
        assert any(p.pid == w.pid and p.alive for p in again.servers)
    finally:
        await link.close()
        cleanup_runs(runs)
