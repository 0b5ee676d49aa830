"""Badges derived from run directories and processes: pure-function unit tests."""

from __future__ import annotations

from console.model import (
    Classification, ConnectionInfo, ExitRecord, HostSnapshot, LaunchSpec, ServerProc, SessionInfo,
    SupervisorRecord,
)
from console.ops.sessions import derive_views, flags_summary, session_state

REC = SupervisorRecord(supervisor_pid=10, pid=11, pgid=11, start_ticks=5, started_at=1.0)
SPEC = LaunchSpec(session_id="s1", argv=["python3", "-m", "sglang.launch_server", "--port", "31000"], gpus=[0],
                  port=31000)


def info(**kw) -> SessionInfo:
    base = dict(session_id="s1", run_dir="/r/s1", spec=SPEC, record=REC, server_alive=True, supervisor_alive=True)
    base.update(kw)
    return SessionInfo(**base)


def test_states_from_run_dir_and_log():
    ready = Classification(state="ready")
    assert session_state(info(record=None), None) == "launching"
    assert session_state(info(), None) == "loading"
    assert session_state(info(), ready) == "ready"
    assert session_state(info(stop_requested=True), ready) == "stopping"
    assert session_state(info(server_alive=False, stop_requested=True), None) == "stopping"
    assert session_state(info(server_alive=False, exit=ExitRecord(ended_at=2, signal=15, stopped_by_operator=True)),
                         None) == "stopped"
    assert session_state(info(server_alive=False, exit=ExitRecord(ended_at=2, exit_code=1)),
                         Classification(state="failed", cause="gpu_oom")) == "failed"


def test_supervisor_killed_without_exit_record_is_failed_not_stopping_forever():
    s = info(server_alive=False, supervisor_alive=False, stop_requested=True)
    assert session_state(s, None) == "failed"
    snap = HostSnapshot(name="h", connection=ConnectionInfo(state="connected"), received_at=100.0, sessions=[s])
    (v,) = derive_views(snap, {}, 100.5)
    assert v.state == "failed" and "supervisor is gone" in v.hint


def test_stale_and_unreachable_are_never_green():
    snap = HostSnapshot(name="h", connection=ConnectionInfo(state="connected"), received_at=100.0, sessions=[info()])
    classes = {"s1": Classification(state="ready")}
    assert derive_views(snap, classes, 100.5)[0].state == "ready"
    assert derive_views(snap, classes, 110.0)[0].state == "stale"
    assert derive_views(snap, classes, 100.5, health={"s1": False})[0].state == "loading"
    down = snap.model_copy(update={"connection": ConnectionInfo(state="reconnecting")})
    assert derive_views(down, classes, 100.5)[0].state == "unreachable"


def test_foreign_launcher_and_orphan_worker():
    launcher = ServerProc(pid=20, ppid=1, pgid=20, start_ticks=1, state="S", role="launcher", framework="sglang",
                          argv=["python", "-m", "sglang.launch_server", "--speculative-algorithm", "EAGLE",
                                "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                                "--speculative-num-draft-tokens", "4", "--mem-fraction-static", "0.90"])
    child = ServerProc(pid=21, ppid=20, pgid=20, start_ticks=2, state="S", role="worker", framework="sglang",
                       argv=["sglang::scheduler_TP0"], gpu_mem_mib={0: 1000})
    orphan = ServerProc(pid=30, ppid=1, pgid=29, start_ticks=3, state="S", role="worker", framework="sglang",
                        argv=["sglang::scheduler_TP0"], gpu_mem_mib={1: 40000})
    zombie = ServerProc(pid=40, ppid=1, pgid=40, start_ticks=4, state="Z", role="launcher", framework="sglang")
    snap = HostSnapshot(name="h", connection=ConnectionInfo(state="connected"), received_at=100.0,
                        servers=[launcher, child, orphan, zombie])
    views = derive_views(snap, {}, 100.2)
    foreign = [v for v in views if v.launcher_pid == 20]
    assert len(foreign) == 1 and foreign[0].state == "foreign" and foreign[0].gpus == [0]
    assert foreign[0].flags_summary == "EAGLE 3/1/4 · mem 0.90 · run 48"
    (o,) = [v for v in views if v.launcher_pid == 30]
    assert o.flags_summary.startswith("orphaned worker") and o.gpus == [1]
    assert not [v for v in views if v.launcher_pid == 40]  # a zombie is not a server


def test_flags_summary_defaults():
    assert flags_summary([]) == "no spec · run auto"
    assert flags_summary(["--tp-size", "2", "--context-length", "32768", "--enable-hicache"]) == \
        "no spec · run auto · tp 2 · ctx 32768 · hicache"
