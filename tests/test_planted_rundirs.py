"""Issue 25 item 5: session directories planted in a shared runs_dir by another local user are listed as FOREIGN
(untrusted, never read), never block a launch, never count as this console's sessions. Planted for real by a
process running as uid 65534 (``nobody``) in a world-writable runs directory, next to one of ours that other users
may write to; the real agent and CLI read them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from console.core.current import current_by_gpu
from console.core.sessions import derive_views
from tests.conftest import free_port
from tests.helpers.rel_util import cleanup_runs, cli, write_config
from tests.helpers.sim_files import make_sim, sim_link

OTHER_UID = 65534
SYSTEM_PYTHON = "/usr/bin/python3"
IDLE = "import time\nprint('up', flush=True)\nt = time.time() + 60\nwhile time.time() < t:\n    time.sleep(0.1)\n"

PLANT = r"""
import json, os, sys, time
runs, port = sys.argv[1], int(sys.argv[2])
def plant(sid, **files):
    d = os.path.join(runs, sid)
    os.mkdir(d, 0o755)
    for name, obj in files.items():
        with open(os.path.join(d, name.replace("_", ".")), "w") as f:
            json.dump(obj, f)
spec = lambda sid: {"session_id": sid, "argv": ["python3", "-m", "sglang.launch_server"], "gpus": [0], "port": port,
                    "launched_by": "mallory"}
plant("20261201-090000-gpu0-forg", spec_json=spec("20261201-090000-gpu0-forg"),
      exit_json={"ended_at": time.time() - 5, "exit_code": 1, "error": "CUDA out of memory (forged)"})
plant("20261201-090001-gpu0-spec", spec_json=spec("20261201-090001-gpu0-spec"))
"""

FORGED, SPEC_ONLY, OPEN = "20261201-090000-gpu0-forg", "20261201-090001-gpu0-spec", "20261201-090002-gpu0-open"

needs_root = pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                                reason="needs root to act as another user (fails, not skips, under CI=true)")


def _as_other():
    os.setgroups([])
    os.setresgid(OTHER_UID, OTHER_UID, OTHER_UID)
    os.setresuid(OTHER_UID, OTHER_UID, OTHER_UID)


@pytest.fixture
def shared_runs():
    """A shared runs directory (mode 1777, like /tmp) reachable by uid 65534, holding what that user planted (a
    forged FAILED session and a spec-only one, both on GPU 0 and one port) and a run directory of ours that other
    users may write to; (runs dir, the planted port)."""
    assert os.geteuid() == 0, "this test acts as uid 65534: it runs as root under CI=true"
    assert os.access(SYSTEM_PYTHON, os.X_OK), f"{SYSTEM_PYTHON} is needed to run as another user"
    top = Path(tempfile.mkdtemp(prefix="mtpc-shared-"))
    os.chmod(top, 0o755)
    runs = top / "runs"
    runs.mkdir()
    os.chmod(runs, 0o1777)
    port = free_port()
    p = subprocess.run([SYSTEM_PYTHON, "-c", PLANT, str(runs), str(port)], preexec_fn=_as_other, env={},
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert {d.stat().st_uid for d in runs.iterdir()} == {OTHER_UID}
    mine = runs / OPEN
    mine.mkdir()
    os.chmod(mine, 0o777)  # ours, but anyone may plant files in it
    (mine / "spec.json").write_text(json.dumps({"session_id": OPEN, "argv": ["x"], "gpus": [0], "port": port}))
    try:
        yield runs, port
    finally:
        cleanup_runs(runs)
        shutil.rmtree(top, ignore_errors=True)


@needs_root
def test_planted_session_dirs_are_foreign_and_never_block_a_launch(shared_runs, tmp_path):
    """Before: the forged session read FAILED on GPU 0 and the spec-only one LAUNCHING, holding GPU 0 and the port
    (``GPU 0 is held by session …, launched by mallory``). Now each is FOREIGN with whose it is, never read, and a
    launch on GPU 0 and that port goes ahead; ``ack``, ``kill`` and ``--prune`` refuse them and leave them be."""
    runs, port = shared_runs
    conf = write_config(tmp_path / "config.toml", {"local": {"python": sys.executable, "runs_dir": str(runs),
                                                             "gpu_source": "none"}})
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
    p = cli("--config", str(conf), "sessions", "--host", "local", "--all", "--json", env=env)
    assert p.returncode == 0, p.stderr
    views = {v["session_id"]: v for v in json.loads(p.stdout) if v["session_id"]}
    assert set(views) == {FORGED, SPEC_ONLY, OPEN}, views
    for sid in (FORGED, SPEC_ONLY):
        v = views[sid]
        assert v["state"] == "foreign" and v["gpus"] == [] and v["port"] is None and v["cause"] is None, v
        assert "owned by nobody (uid 65534)" in v["broken"] and "never read" in v["broken"], v
        assert "another user's run directory" in v["hint"] and "forged" not in json.dumps(v), v
    assert views[OPEN]["state"] == "foreign" and "writable by other users (mode 0777)" in views[OPEN]["broken"]
    failed = cli("--config", str(conf), "sessions", "--host", "local", "--state", "failed", "--json", env=env)
    assert [v["session_id"] for v in json.loads(failed.stdout) if v["session_id"]] == []
    status = cli("--config", str(conf), "status", "--host", "local", env=env).stdout
    assert f"session {FORGED}: foreign (another user's run directory): owned by nobody" in status, status
    idle = tmp_path / "idle.py"
    idle.write_text(IDLE)
    p = cli("--config", str(conf), "launch", "--no-validate", "--host", "local", "--gpu", "0", "--port", str(port),
            "--command", f"{sys.executable} {idle}", "--json", "--", "--model-path", "/m", env=env)
    assert p.returncode == 0, p.stdout + p.stderr  # neither GPU 0 nor the port is held by what was planted
    sid = json.loads(p.stdout)["session_id"]
    for args, words in ((("ack", "--host", "local", FORGED), "is not this console's (owned by nobody"),
                        (("sessions", "--host", "local", "--prune", SPEC_ONLY), "not this console's run directory"),
                        (("sessions", "--host", "local", "--prune", OPEN), "writable by other users"),
                        (("kill", "--host", "local", SPEC_ONLY), "broken")):
        r = cli("--config", str(conf), *args, env=env)
        assert r.returncode != 0 and words in r.stdout + r.stderr, (args, r.stdout + r.stderr)
    assert (runs / FORGED / "exit.json").exists() and (runs / SPEC_ONLY / "spec.json").exists()
    assert cli("--config", str(conf), "kill", "--host", "local", sid, env=env).returncode == 0


@needs_root
async def test_planted_session_dirs_are_no_gpus_current_session(shared_runs, tmp_path):
    """On simulated GPUs through the live link: the forged FAILED session is no GPU's current session (GPU 0 reads
    IDLE), and nothing planted is a live session of this console."""
    runs, _ = shared_runs
    d, _ = make_sim(tmp_path, gpus=1)
    async with sim_link(runs, d) as lk:
        snap = await lk.refresh()
        planted = {s.session_id: s for s in snap.sessions}
        assert set(planted) == {FORGED, SPEC_ONLY, OPEN}
        assert all(s.untrusted and s.spec is None and s.exit is None for s in planted.values())
        views = derive_views(snap, {}, time.time(), interval=1e9)
        assert {v.session_id: v.state for v in views if v.session_id} == dict.fromkeys(planted, "foreign")
        (gpu0,) = current_by_gpu(views, [0])
        assert gpu0.session is None, gpu0
