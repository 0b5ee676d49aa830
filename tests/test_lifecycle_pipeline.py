"""Lifecycle as data and one log pipeline (issue 27, moves 3 and 4).

- ``console/ops/lifecycle/`` keeps small functions (none over 80 lines) and a launch that is a table of checks
  named as the steps it reports;
- a launch and the tracker on one link share one follow of a session's log (one ``follow_log`` request, one
  :class:`SessionLog`): every byte of ``output.log`` reaches it once, none is lost to a second follow moving the
  agent's offset; a relaunch plans memory once (one read of the model's config.json) and its steps carry their
  phase (``kill`` then ``launch``), which is what the live backend counts a launch's n/6 by.

Real processes: a local agent over simulated GPUs and the SGLang stand-in.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from console.config import HostConfig
from console.link.link import HostLink
from console.link.ssh import HostSpec
from console.model import KillTarget, LaunchRequest, Step
from console.ops import lifecycle
from console.ops.session_log import SessionLogs
from console.ops.tracker import HostTracker
from console.sim.demo import FIXED_FLAGS
from tests.conftest import free_port
from tests.helpers.rel_util import REPO, cleanup_runs
from tests.helpers.sim_files import make_sim
from tests.helpers.wait import await_until

LIFECYCLE = REPO / "console" / "ops" / "lifecycle"
MAX_FUNCTION_LINES = 80


def test_no_function_over_80_lines_in_lifecycle():
    long = []
    for path in sorted(LIFECYCLE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.name}:{node.lineno} {node.name}: {n} lines")
    assert long == []


def test_the_launch_table_is_the_launch_steps():
    from console.ops.lifecycle.launch import _Launch

    table = _Launch._table(object.__new__(_Launch))  # the plain launch's table only names bound probes
    assert [c.name for c in table] == list(lifecycle.LAUNCH_STEPS)
    assert [c.timeout for c in table if c.name in ("logging", "on GPU")] == [120.0, 60.0]


def test_the_backend_counts_launch_steps_by_phase_not_by_name():
    from console.ops.backend import launch_progress

    steps = [Step(name="kill: exited", state="ok", phase="kill"), Step(name="port closed", state="ok", phase="kill"),
             Step(name="preflight", state="ok", phase="launch"), Step(name="spawned", state="ok", phase="launch"),
             Step(name="logging", state="running", phase="launch")]
    assert launch_progress(steps) == 1  # spawned: the kill's steps and the preflight are not the launch's n/6


@pytest.fixture
def sim(tmp_path):
    return make_sim(tmp_path, 2, tag="q")


@pytest.fixture(autouse=True)
def _private_audit_log(tmp_path, monkeypatch):
    monkeypatch.setenv("MTPCONSOLE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))


async def test_one_follow_per_session_and_a_relaunch_plans_once(sim, runs_dir):
    d, model = sim
    sent: list[tuple[str, dict]] = []
    env = {"MTPCONSOLE_SIM_DIR": str(d), "MTPCONSOLE_SIM_SPEED": "20", "PYTHONPATH": str(REPO)}
    link = HostLink(HostSpec(name="local", local=True),
                    HostConfig(python=sys.executable, runs_dir=str(runs_dir), gpu_source="sim", sim_dir=str(d),
                               launch_env=env), interval=0.3,
                    audit=lambda host, op, args, ok, result, ms: sent.append((op, args)))
    await link.open()
    tracker = HostTracker(link, interval=0.3, on_view=lambda v: None, on_log=lambda *a: None)
    req = LaunchRequest(host="local", command=[sys.executable, "-m", "console.sim.sglang"],
                        flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=free_port())
    try:
        r = await lifecycle.launch(link, req, timeout=60)
        assert r.ok and r.state == "ready", r
        assert {s.phase for s in r.steps} == {"launch"}
        sid = r.session_id
        assert sid is not None
        assert await await_until(lambda: sid in tracker.logs, 10), "the tracker never followed the session"
        shared = SessionLogs.of(link).get(sid)
        assert shared is not None and tracker.logs[sid] is shared  # one SessionLog: the launch's and the view's
        # one follow, from the start: the launch's, or the tracker's when a sample listed the session first (it
        # reads the log's tail, empty then, and follows from its end: offset 0 of the file it read)
        follows = [a for op, a in sent if op == "follow_log" and a.get("session_id") == sid]
        assert len(follows) == 1 and follows[0]["offset"] == 0, follows
        out = Path(runs_dir) / sid / "output.log"
        assert await await_until(lambda: shared.received == out.stat().st_size, 10), \
            (shared.received, out.stat().st_size)  # every byte once: none lost, none twice

        sent.clear()
        rr = await lifecycle.relaunch(link, KillTarget(host="local", session_id=sid), req, timeout=60, grace=5)
        assert rr.ok and rr.state == "ready", rr
        kill = [s for s in rr.steps if s.phase == "kill"]
        assert kill and all(s.name.startswith("kill: ") for s in kill)  # names as before, the phase is data
        assert [s.name for s in rr.steps if s.phase == "launch"] == ["preflight", *lifecycle.LAUNCH_STEPS]
        reads = [a for op, a in sent if op == "read_file" and a.get("path", "").endswith("config.json")]
        assert len(reads) == 1, reads  # the memory plan: made once, before the kill, used by the launch
        k = await lifecycle.kill(link, KillTarget(host="local", session_id=rr.session_id), grace=5)
        assert k.ok and {s.phase for s in k.steps} == {"kill"}, k
    finally:
        await link.close()
        cleanup_runs(runs_dir)


SERVER_NEEDING_PORT = '''\
import argparse
ap = argparse.ArgumentParser(prog="needs_port")
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--model-path", default=None)
ap.parse_args()
'''


async def test_the_flags_are_checked_as_launched_with_the_requested_port(tmp_path, monkeypatch, runs_dir):
    """A server whose --port is required, launched with a port the request names (not one of its flags): the
    preflight checks the flags the server gets (``--port N`` added), so it is not refused for a missing --port."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    script = tmp_path / "needs_port.py"
    script.write_text(SERVER_NEEDING_PORT)
    link = HostLink(HostSpec(name="local", local=True),
                    HostConfig(python=sys.executable, runs_dir=str(runs_dir), gpu_source="none"), interval=0.5)
    await link.open()
    try:
        req = LaunchRequest(host="local", command=[sys.executable, str(script)], flags=["--model-path", "/m"],
                            gpus=[0], port=free_port())
        checked = await lifecycle.check_request(link, req, None)
        assert checked.refusals == [] and "flags ok against needs_port" in checked.flags_note, checked
        without = await lifecycle.check_request(link, req.model_copy(update={"port": None}), None)
        assert without.refusals and "--port" in without.refusals[0], without  # the check does read --port
    finally:
        await link.close()


def test_a_refused_relaunch_says_the_old_server_was_stopped_by_its_kill_phase(capsys):
    from console.commands._ops import emit_result
    from console.model import OperationResult

    kill = Step(name="kill: port closed", state="ok", phase="kill")
    pre = Step(name="preflight", state="failed", phase="launch")
    for steps, said in (([kill, pre], "the old server was stopped, nothing was started"),
                        ([pre], "nothing was stopped or started")):
        r = OperationResult(op="relaunch", host="h", ok=False, steps=steps, refused="GPU 0 is held",
                            refusals=["GPU 0 is held"])
        assert emit_result(False, r) == 1
        assert capsys.readouterr().out.splitlines()[0] == f"relaunch on h: REFUSED — {said}"
