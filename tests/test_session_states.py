"""Badges derived from run directories and processes: pure-function unit tests."""

from __future__ import annotations

from console.core.sessions import derive_views, flags_summary, session_state
from console.model import (
    Classification,
    ConnectionInfo,
    ExitRecord,
    HostSnapshot,
    LaunchSpec,
    ProcRef,
    ServerProc,
    SessionInfo,
    SupervisorRecord,
)

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
                        argv=["sglang::scheduler_TP0"], gpu_mem_mib={1: 40000}, uid=1000)
    zombie = ServerProc(pid=40, ppid=1, pgid=40, start_ticks=4, state="Z", role="launcher", framework="sglang")
    unproven = HostSnapshot(name="h", connection=ConnectionInfo(state="connected"), received_at=100.0,
                            servers=[launcher, child, orphan, zombie])
    (o,) = [v for v in derive_views(unproven, {}, 100.2) if v.launcher_pid == 30]
    assert o.flags_summary == "server worker" and "not proven an orphan" in (o.hint or "")  # no facts, no claim
    snap = unproven.model_copy(update={"agent_uid": 1000, "relatives": [
        ProcRef(pid=1, sid=1, pgid=1, state="S", argv=["/sbin/init"])]})
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


# ---------------------------------------------------------------- the current session of a GPU (issue 13)

from console.core.current import CurrentState, current_by_gpu, header_counts  # noqa: E402
from console.model import GpuSample, HostView, OperationResult, PendingLaunch, SessionView  # noqa: E402


def sv(sid, state, gpus=(0,), started=1.0, **kw) -> SessionView:
    return SessionView(host="h", session_id=sid, state=state, gpus=list(gpus), started_at=started, **kw)


def cur(sessions, idx=0, **kw):
    (c,) = current_by_gpu(sessions, [idx], **kw)
    return c.session.session_id if c.session else None


def test_current_rule_launch_then_live_then_newest_ended():
    old_fail = sv("f", "failed", started=1, cause="gpu_oom")
    ready = sv("r", "ready", started=2)
    assert cur([old_fail, ready]) == "r"
    assert cur([old_fail, ready, sv("l", "launching", started=0.5)]) == "l"  # a launch outranks a live server
    stopped = ready.model_copy(update={"state": "stopped"})
    assert cur([old_fail, stopped]) == "r"  # STOPPED by the operator, never the older failure
    assert cur([old_fail, stopped], superseded={"r"}) == "f"
    assert cur([old_fail, stopped], superseded={"r", "f"}) is None
    assert cur([old_fail.model_copy(update={"acknowledged": True})]) is None
    elsewhere = sv("n", "ready", gpus=(1,), started=3, replaces="f")
    assert cur([old_fail, elsewhere]) is None and cur([old_fail, elsewhere], 1) == "n"
    fg = SessionView(host="h", state="foreign", gpus=[0, 1], launcher_pid=5)
    assert cur([old_fail, fg], 1) is None and cur([old_fail, fg], 0) is None


def test_header_counts_count_sessions_once_and_idle_gpus():
    tp2 = sv("r", "ready", gpus=(0, 1))
    counts = header_counts(current_by_gpu([tp2, sv("f", "failed", gpus=(2,))], range(4)))
    assert counts == {"ready": 1, "failed": 1, "idle": 1}


def _view(sessions, connected=True):
    snap = HostSnapshot(name="h", connection=ConnectionInfo(state="connected" if connected else "reconnecting"),
                        received_at=100.0, gpus=[GpuSample(index=i) for i in range(2)])
    return HostView(snapshot=snap, sessions=sessions)


def test_current_state_pending_refused_confirmed_and_events():
    st = CurrentState("h", clock=lambda: 100.0)
    fail = sv("f", "failed", cause="gpu_oom")
    v = st.apply(_view([fail]))
    assert v.current_of(0).session.session_id == "f" and v.counts == {"failed": 1, "idle": 1}
    st.launch_sent(PendingLaunch(host="h", session_id="n", gpus=[0], argv=["python3", "--port", "1"], sent_at=99))
    v = st.apply(_view([fail]))
    c = v.current_of(0)
    assert c.session.session_id == "n" and c.session.state == "launching" and c.session.step == 0 and c.session.pending
    st.launch_done("n", OperationResult(op="launch", host="h", ok=False, error="memory plan: does not fit"))
    v = st.apply(_view([fail]))
    assert v.current_of(0).session.session_id == "f"  # refused: the GPU is left as it was
    assert [e.kind for e in v.events] == ["launch_refused"] and "nothing started" in v.events[0].text
    # a launch confirmed READY shows READY before the sample says so
    st.launch_sent(PendingLaunch(host="h", session_id="m", gpus=[0], sent_at=101))
    st.launch_done("m", OperationResult(op="launch", host="h", ok=True, session_id="m", state="ready"))
    v = st.apply(_view([fail, sv("m", "loading", started=101)]))
    assert v.current_of(0).session.state == "ready" and "f" in st.superseded
    # killed here: STOPPED by this console at once, and stays STOPPED (never the older failure)
    st.kill_done("m", None, OperationResult(op="kill", host="h", ok=True, session_id="m", state="stopped"))
    v = st.apply(_view([fail, sv("m", "ready", started=101)]))
    s = v.current_of(0).session
    assert (s.session_id, s.state, s.stopped_by) == ("m", "stopped", "this console")
    v = st.apply(_view([fail, sv("m", "stopped", started=101, stopped_by="an operator")]))
    assert v.current_of(0).session.stopped_by == "this console"
    st.acknowledge("m")
    assert st.apply(_view([fail, sv("m", "stopped", started=101)])).current_of(0).session is None


def test_foreign_appear_and_vanish_are_events():
    st = CurrentState("h", clock=lambda: 100.0)
    fg = SessionView(host="h", state="foreign", gpus=[1], launcher_pid=77, launcher_start_ticks=5)
    st.apply(_view([]))
    st.apply(_view([fg]))
    st.apply(_view([], connected=False))  # a link drop is no vanishing
    v = st.apply(_view([fg]))
    assert [e.kind for e in v.events] == ["foreign_appeared"]
    v = st.apply(_view([]))
    assert v.events[-1].kind == "foreign_vanished" and "not stopped by this console" in v.events[-1].text
    assert v.current_of(1).session is None


def test_a_kill_that_signalled_nothing_stopped_nothing_here():
    """A kill of a session that had already ended is a no-op (its SIGTERM step skipped): the session keeps its own
    state and who stopped it, never 'stopped by this console'."""
    from console.core.current import CurrentState
    from console.model import Step

    steps = [Step(name="target", state="ok"), Step(name="SIGTERM", state="skipped")]
    for state, by in (("failed", None), ("stopped", "an operator")):
        st = CurrentState("h", clock=lambda: 200.0)
        st.kill_done("f", None, OperationResult(op="kill", host="h", ok=True, session_id="f", state=state, steps=steps))
        s = st.apply(_view([sv("f", state, started=100, stopped_by=by)])).current_of(0).session
        assert s is not None and (s.state, s.stopped_by) == (state, by)
