"""Issue 26 item 10: the TUI's ``v`` and ``mtpconsole events`` build a host's events in one place
(``console.core.events.host_events``): a failure is ``session_failed`` with its cause (``gpu_oom``), not only
the signal that ended it; a proven orphan is ``orphan``, never ``foreign_appeared``; an acknowledgement is listed
once; a NaN, infinite or far-future time in one session's files leaves that event out with a note and the rest of
the list intact. Unit level on built snapshots, then the real CLI on the ``local`` host with simulated GPUs (the
SGLang stand-in failing out of memory, a real double-forked orphan, a run directory with broken times)."""

from __future__ import annotations

import json
import sys

from console.core.current import CurrentState
from console.core.events import host_events, stamp, usable_time, view_events
from console.core.sessions import derive_views
from console.model import (
    AuditEntry,
    Classification,
    ConnectionInfo,
    HostSnapshot,
    HostView,
    ProcRef,
    SessionInfo,
)
from console.sim.demo import INCIDENT_FLAGS
from tests.conftest import free_port
from tests.helpers.rel_util import cleanup_runs, cli, kill_quietly, write_config
from tests.helpers.sim_files import sim_env
from tests.test_orphans_cli import _p, sim, start_orphan  # noqa: F401  (fixtures)

NOW = 1_800_000_000.0


def _session(sid: str, *, created=NOW - 600, ended=NOW - 300, signal=9, acked=None, pid=700) -> SessionInfo:
    return SessionInfo.model_validate({
        "session_id": sid, "run_dir": f"/r/{sid}", "owner_uid": 1000,
        "spec": {"session_id": sid, "argv": ["python3", "-m", "sglang.launch_server"], "gpus": [0], "port": 30000,
                 "created_at": created},
        "record": {"supervisor_pid": pid - 1, "pid": pid, "pgid": pid, "start_ticks": 1, "started_at": created + 1},
        "exit": {"ended_at": ended, "signal": signal, "oom_kill_before": 3, "oom_kill_after": 3},
        "acknowledged_at": acked})


OOM = Classification(state="failed", cause="gpu_oom", line="torch.OutOfMemoryError: CUDA out of memory.")


def _orphan_snap(sessions=()) -> HostSnapshot:
    """A host whose ended session ``s-old`` left its scheduler (pid 71) re-parented to init, holding GPU 2."""
    return HostSnapshot(name="h", connection=ConnectionInfo(state="connected"), sampled_at=NOW, received_at=NOW, agent_uid=1000,
                        sessions=list(sessions),
                        servers=[_p(71, 1, 70, ["sglang::scheduler"], session_id="s-old", gpu_mem_mib={2: 3000})],
                        relatives=[ProcRef(pid=1, sid=1, pgid=1, state="S", argv=["/sbin/init"])])


def test_a_failure_is_session_failed_with_its_cause_and_an_ack_is_listed_once():
    s = _session("s1", acked=NOW - 100)
    audit = [AuditEntry(at=NOW - 100.2, host="h", op="ack", args={"session_id": "s1"}, ok=True),
             AuditEntry(at=NOW - 500, host="h", op="kill", args={"pid": 700, "signal": 15}, ok=True)]
    events, notes = host_events("h", [s], classes={"s1": OOM}, audit=audit)
    kinds = [(e.kind, e.source) for e in events]
    assert kinds == [("launched", "run_dir"), ("action", "audit"), ("exited", "exit_record"),
                     ("session_failed", "log+exit_record"), ("acknowledged", "run_dir")], kinds
    failed = events[3]
    assert failed.text.startswith("session s1 FAILED: gpu_oom — torch.OutOfMemoryError") and failed.at == NOW - 300
    assert "killed by signal 9" in events[2].text and notes == []
    stopped = s.model_copy(update={"exit": s.exit.model_copy(update={"stopped_by_operator": True})})
    assert "session_failed" not in [e.kind for e in host_events("h", [stopped], classes={"s1": OOM})[0]]


def test_the_tuis_list_is_the_same_list():
    """``v`` (view_events) and the CLI's builder agree: a console's own session_failed is not listed twice."""
    s = _session("s1")
    live = HostSnapshot(name="h", connection=ConnectionInfo(state="connected"), sampled_at=NOW, received_at=NOW,
                        sessions=[s.model_copy(update={"exit": None, "server_alive": True})])
    snap = live.model_copy(update={"sessions": [s]})
    views = derive_views(snap, {"s1": OOM}, NOW, interval=1e9)
    cs = CurrentState("h", clock=lambda: NOW)
    cs.apply(HostView(snapshot=live, sessions=derive_views(live, {}, NOW, interval=1e9)))
    seen = cs.apply(HostView(snapshot=snap, sessions=views)).events
    assert [e.kind for e in seen] == ["session_failed"] and seen[0].text.startswith("session s1 FAILED: gpu_oom — ")
    tui = view_events(HostView(snapshot=snap, sessions=views, events=seen))
    cli_list, _ = host_events("h", [s], classes={"s1": OOM}, snap=snap)
    assert [(e.kind, e.text) for e in tui] == [(e.kind, e.text) for e in cli_list]
    assert [e.kind for e in tui].count("session_failed") == 1


def test_a_proven_orphan_is_an_orphan_event_in_both_lists():
    old = _session("s-old", pid=70)
    snap = _orphan_snap([old])
    events, _ = host_events("h", [old], snap=snap)
    (o,) = [e for e in events if e.kind == "orphan"]
    assert o.pid == 71 and o.at == old.exit.ended_at and o.text.startswith("orphan pid 71 (sglang::scheduler) holds "
                                                                           "GPU 2 3,000 MiB: ")
    assert "foreign_appeared" not in [e.kind for e in events]
    # the live console: the orphan appears after its first view -> an orphan event, and its vanishing says orphan
    cs = CurrentState("h", clock=lambda: NOW)
    empty = HostSnapshot(name="h", connection=ConnectionInfo(state="connected"), sampled_at=NOW, received_at=NOW, sessions=[old])
    cs.apply(HostView(snapshot=empty, sessions=derive_views(empty, {}, NOW, interval=1e9)))
    cs.apply(HostView(snapshot=snap, sessions=derive_views(snap, {}, NOW, interval=1e9)))
    cs.apply(HostView(snapshot=empty, sessions=derive_views(empty, {}, NOW, interval=1e9)))
    assert [(e.kind, e.pid) for e in cs.events] == [("orphan", 71), ("foreign_vanished", 71)], list(cs.events)
    assert cs.events[0].text == o.text and cs.events[1].text.startswith("orphan pid 71 on GPUs 2 is gone: ")
    seen = list(cs.events)[:1]
    tui = view_events(HostView(snapshot=snap, sessions=derive_views(snap, {}, NOW, interval=1e9), events=seen))
    assert [e.kind for e in tui].count("orphan") == 1  # the console's own (its time), not a second one


def test_unusable_times_leave_one_event_out_never_the_list():
    bad = [_session("nan", created=float("nan")), _session("inf", ended=float("inf")),
           _session("huge", ended=1e300, created=-5.0)]
    good = _session("ok")
    events, notes = host_events("h", [*bad, good], classes={"huge": OOM})
    assert {e.session_id for e in events} == {"nan", "inf", "ok"}  # "huge": launched before 1970, ended after 9999
    assert all(usable_time(e.at) for e in events)
    assert len(notes) == 5 and all("is no usable time" in n for n in notes), notes
    assert any(n.startswith("session huge: its session_failed event") for n in notes)
    assert stamp(float("nan")) == "(no usable time: nan)" and stamp(1e300).startswith("(no usable time")


def test_cli_events_names_the_oom_the_orphan_and_the_ack_once(sim, tmp_path, runs_dir):  # noqa: F811
    d, model = sim
    cfg = write_config(tmp_path / "config.toml", {"local": {
        "runs_dir": str(runs_dir), "python": sys.executable, "gpu_source": "sim", "sim_dir": str(d),
        "server_command": [sys.executable, "-m", "console.sim.sglang"], "launch_env": sim_env(d)}})
    base = ["--host", "local", "--config", str(cfg)]
    env = {"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")}
    r = cli("launch", *base, "--gpu", "1", "--port", str(free_port()), "--force", "--wait", "--json", "--timeout",
            "120", "--", "--model-path", str(model), *INCIDENT_FLAGS, env=env, timeout=180)
    res = json.loads(r.stdout)
    assert r.returncode == 1 and res["cause"] == "gpu_oom", r.stdout + r.stderr
    sid = res["session_id"]
    a = cli("ack", *base, sid, env=env)
    assert a.returncode == 0, a.stderr
    broken = runs_dir / "20260101-000000-gpu0-0bad"  # one session's files with finite times no clock can show
    broken.mkdir()  # (NaN or Infinity make the agent read the run directory as broken: no times at all)
    (broken / "spec.json").write_text('{"session_id": "20260101-000000-gpu0-0bad", "argv": ["x", "--a"], '
                                      '"gpus": [0], "port": 30001, "created_at": -5e18}')
    (broken / "record.json").write_text('{"supervisor_pid": 4000001, "pid": 4000002, "pgid": 4000002, '
                                        '"start_ticks": 5, "started_at": 1e300, "boot_id": "x"}')
    (broken / "exit.json").write_text('{"ended_at": 1e308, "signal": 9}')
    (broken / "output.log").write_text("x\n")
    pid = start_orphan(d, tmp_path, gpu=0, mib=4000)
    try:
        j = cli("events", *base, "--since", "1h", "--json", env=env)
        t = cli("events", *base, "--since", "1h", env=env)
    finally:
        kill_quietly([pid])
        cleanup_runs(runs_dir)
    assert j.returncode == 0 and t.returncode == 0 and "Traceback" not in j.stderr + t.stderr, j.stderr + t.stderr
    out = json.loads(j.stdout)
    mine = [(e["kind"], e["text"]) for e in out["events"] if e["session_id"] == sid]
    kinds = [k for k, _ in mine]
    assert kinds.count("session_failed") == 1 and kinds.count("acknowledged") == 1, mine
    assert any(k == "session_failed" and "FAILED: gpu_oom" in text for k, text in mine), mine
    assert not any(k == "action" and text.startswith("acknowledged") for k, text in mine), mine  # not twice
    orphans = [e for e in out["events"] if e["kind"] == "orphan"]
    assert [e["pid"] for e in orphans] == [pid] and "foreign" not in j.stdout, orphans
    assert any("20260101-000000-gpu0-0bad" in n and "no usable time" in n for n in out["notes"]), out["notes"]
    assert f"session_failed session {sid} FAILED: gpu_oom" in t.stdout and f"orphan pid {pid}" in t.stdout, t.stdout
