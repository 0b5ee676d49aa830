"""Issue 16 events in the TUI: READY is listed on the events screen (``v``) — once per session, seen by this
console — without a second toast beside the launch's own; a foreign server that vanishes names the other
console on this machine whose kill the shared audit log holds ("killed by another console ... at HH:MM:SS")
instead of only "not stopped by this console". Unit level (CurrentState, the pure attribution, two Audit
writers on one real file), Pilot level (the real app with the fake backend), and end to end with real
processes: a stand-in launched and READY under a live HostTracker, a hand-started stand-in killed by the CLI
(another console) while the tracker watches."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from textual.widgets import DataTable

from console.audit import Audit, read_tail
from console.core.current import CurrentState
from console.core.events import name_other_killers, other_kill
from console.model import AuditEntry, HostEvent, HostView
from console.ops import lifecycle
from console.ops.tracker import HostTracker
from console.sim.demo import FIXED_FLAGS
from console.ui.screens.events import EventsScreen, host_events
from tests.conftest import free_port
from tests.helpers.rel_util import cli, kill_quietly
from tests.helpers.wait import await_until, until
from tests.test_orphans_cli import config, link, sim, sim_env  # noqa: F401  (fixtures)
from tests.ui_fakes import NOW, FakeBackend, foreign, frozen_app, session, snapshot, started, toasts, view_a

SIZE = (160, 50)
VANISHED = "foreign server pid 5150 on GPUs 3 is gone: not stopped by this console (another console, the CLI or by hand)"


def _view(*sessions, state="connected") -> HostView:
    return HostView(snapshot=snapshot(state=state), sessions=list(sessions))


def _kinds(cs: CurrentState) -> list[str]:
    return [e.kind for e in cs.events]


# ---------------------------------------------------------------- READY, unit level

def test_ready_is_an_event_once_per_session_seen_by_this_console():
    cs = CurrentState("host-a", clock=lambda: NOW)
    cs.apply(_view(session("loading", "s1", [0])))  # the host's first view: nothing is an event yet
    cs.apply(_view(session("ready", "s1", [0], port=30000)))
    assert _kinds(cs) == ["ready"]
    e = cs.events[-1]
    assert (e.session_id, e.gpus, e.source) == ("s1", [0], "console") and "s1 READY on GPUs 0 (port 30000)" in e.text
    cs.apply(_view(session("loading", "s1", [0])))  # /health flapped: health_flap's event, not a second READY
    cs.apply(_view(session("ready", "s1", [0])))
    assert _kinds(cs) == ["ready"]


def test_ready_already_in_the_first_view_is_no_event_but_a_new_ready_session_is():
    cs = CurrentState("host-a", clock=lambda: NOW)
    cs.apply(_view(session("ready", "old", [0])))
    assert _kinds(cs) == []
    cs.apply(_view(session("ready", "old", [0]), session("ready", "new", [1])))  # launched and READY between samples
    assert _kinds(cs) == ["ready"] and cs.events[-1].session_id == "new"
    cs.apply(_view(session("ready", "new", [1]), state="unreachable"))  # no views while unreachable: no events
    assert _kinds(cs) == ["ready"]


def test_foreign_events_carry_the_pid():
    cs = CurrentState("host-a", clock=lambda: NOW)
    cs.apply(_view())
    cs.apply(_view(foreign()))
    cs.apply(_view())
    assert [(e.kind, e.pid) for e in cs.events] == [("foreign_appeared", 5150), ("foreign_vanished", 5150)]
    assert "not stopped by this console" in cs.events[-1].text


# ---------------------------------------------------------------- who killed a foreign server, unit level

def _vanished(at: float = NOW, pid: int | None = 5150, text: str = VANISHED) -> HostEvent:
    return HostEvent(at=at, host="host-a", kind="foreign_vanished", text=text, gpus=[3], pid=pid)


def _kill(at: float, pid: int = 5150, ok: bool = True, host: str = "host-a", sig: int = 15) -> AuditEntry:
    return AuditEntry(at=at, host=host, op="kill", args={"pid": pid, "start_ticks": 99, "signal": sig}, ok=ok)


def test_a_vanishing_names_the_other_console_whose_kill_the_audit_log_holds():
    sigterm, sigkill = _kill(NOW - 30), _kill(NOW - 8, sig=9)
    (e,) = name_other_killers([_vanished()], [sigkill, sigterm])
    assert e.text.startswith("foreign server pid 5150 on GPUs 3 is gone: killed by another console on this machine")
    assert "signal 15" in e.text and time.strftime("%H:%M:%S", time.localtime(NOW - 30)) in e.text
    assert e.source == "console+audit" and (e.at, e.pid, e.kind) == (NOW, 5150, "foreign_vanished")


def test_no_attribution_without_a_matching_kill():
    ev = _vanished()
    for others in ([], [_kill(NOW - 30, pid=6000)], [_kill(NOW - 30, ok=False)], [_kill(NOW - 30, host="host-b")],
                   [_kill(NOW - 600)], [_kill(NOW + 60)], [AuditEntry(at=NOW - 1, host="host-a", op="read_log")]):
        assert name_other_killers([ev], others) == [ev], others
    assert other_kill(_vanished(pid=None), [_kill(NOW - 1)]) is None
    mine = _vanished(text="foreign server pid 5150 on GPUs 3 is gone: killed by this console")
    assert name_other_killers([mine], [_kill(NOW - 1)]) == [mine]  # this console's own confirmation stands


def test_audit_others_reads_what_another_console_wrote_to_the_shared_file(tmp_path):
    path = tmp_path / "audit.jsonl"
    here, there = Audit(path), Audit(path)  # two consoles of one user on one machine
    try:
        here("host-a", "kill", {"pid": 1, "signal": 15}, True, '{"signalled":[1]}', 3.0)
        there("host-a", "read_log", {"session_id": "s"}, True, "{}", 1.0)
        theirs = there("host-a", "kill", {"pid": 5150, "start_ticks": 99, "signal": 15}, True, "{}", 2.0)
        assert here.others(0.0, ("kill",)) == [theirs]
        assert [e.op for e in here.others(0.0)] == ["read_log", "kill"]
        assert there.others(0.0, ("kill",))[0].args["pid"] == 1
        assert here.others(theirs.at + 1, ("kill",)) == []
        with open(path, "a") as f:
            f.write("not json\n")
        assert len(read_tail(path, 0.0)) == 3 and read_tail(tmp_path / "missing.jsonl", 0.0) == []
    finally:
        here.close()
        there.close()


# ---------------------------------------------------------------- Pilot: the events screen

class AuditBackend(FakeBackend):
    """The fake backend with a shared audit log another console wrote to (a real file)."""

    def __init__(self, path, **kw) -> None:
        super().__init__(**kw)
        self.path = path
        self.reads = 0

    async def others_audit(self, since: float, ops=None) -> list[AuditEntry]:
        self.reads += 1
        return read_tail(self.path, since, ops)  # this console wrote nothing: all of it is the other's


def _push(backend: FakeBackend, *extra) -> None:
    v = view_a()
    backend.views["host-a"] = v.model_copy(update={"sessions": [*v.sessions, *extra]})
    backend.repush("host-a")


async def test_v_lists_ready_seen_by_this_console_without_a_second_toast(tmp_path):
    backend = FakeBackend()
    app = frozen_app(backend)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        _push(backend, session("loading", "s-new", [3], port=30001))
        await until(pilot, lambda: any(s.session_id == "s-new" for s in app.views["host-a"].sessions))
        shown = len(toasts(app))
        _push(backend, session("ready", "s-new", [3], port=30001))
        await until(pilot, lambda: [e.kind for e in app.views["host-a"].events] == ["ready"])
        assert len(toasts(app)) == shown  # the launch's own result says READY; no second toast
        await pilot.press("v")
        await until(pilot, lambda: isinstance(app.screen, EventsScreen)
                    and any(e.kind == "ready" for e in app.screen.events))
        screen = app.screen
        assert isinstance(screen, EventsScreen)
        (ready,) = [e for e in screen.events if e.kind == "ready"]
        assert ready.session_id == "s-new" and "READY on GPUs 3" in ready.text
        table = screen.query_one("#events")
        await until(pilot, lambda: any("ready" in [str(c) for c in table.get_row_at(i)]
                                       for i in range(table.row_count)))
        await pilot.press("f", "f")  # lifecycle
        await until(pilot, lambda: screen.flt == "lifecycle")
        assert any(e.kind == "ready" for e in screen.events)


async def test_v_names_the_other_console_that_killed_a_foreign_server(tmp_path):
    path = tmp_path / "audit.jsonl"
    other = Audit(path)  # another console on this machine (say `mtpconsole kill --pid 5150`)
    backend = AuditBackend(path)
    app = frozen_app(backend)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            other("host-a", "kill", {"pid": 5150, "start_ticks": 99, "signal": 15}, True, "{}", 4.0)
            backend.current["host-a"].events.append(_vanished(at=time.time()))
            backend.repush("host-a")
            await until(pilot, lambda: any(e.kind == "foreign_vanished" for e in app.views["host-a"].events))
            await pilot.press("v")
            await until(pilot, lambda: isinstance(app.screen, EventsScreen))
            screen = app.screen
            assert isinstance(screen, EventsScreen)
            await until(pilot, lambda: any("killed by another console" in e.text for e in screen.events))
            (e,) = [e for e in screen.events if e.kind == "foreign_vanished"]
            assert "killed by another console on this machine" in e.text and e.source == "console+audit"
            assert backend.reads >= 1
    finally:
        other.close()


async def test_v_reads_no_audit_log_without_an_unattributed_vanishing(tmp_path):
    backend = AuditBackend(tmp_path / "audit.jsonl")
    app = frozen_app(backend)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("v")
        # mounted: the rows drawn and the audit read decided (the table takes the focus last)
        await until(pilot, lambda: isinstance(app.screen, EventsScreen) and isinstance(app.focused, DataTable))
        assert backend.reads == 0


def test_host_events_without_other_consoles_keeps_the_console_text():
    v = view_a().model_copy(update={"events": [_vanished()]})
    (e,) = [e for e in host_events(v) if e.kind == "foreign_vanished"]
    assert e.text == VANISHED


# ---------------------------------------------------------------- end to end, real processes

async def test_tracker_ready_event_and_a_foreign_server_killed_by_the_cli(link, sim, tmp_path, runs_dir):  # noqa: F811
    """A HostTracker on a live local link sees a launch become READY (one event) and a hand-started stand-in
    vanish after `mtpconsole kill --pid` (another console, same audit log): the vanishing names it."""
    d, model = sim
    audit_path = tmp_path / "audit.jsonl"  # the audit log both consoles write (never the operator's own)
    mine = Audit(audit_path)  # this console's own audit log object (it sends no kill)
    views: list[HostView] = []
    tracker = HostTracker(link, interval=0.3, on_view=views.append, on_log=lambda *a: None)
    assert tracker is not None
    port, r = free_port(), None
    with open(tmp_path / "foreign.log", "wb") as f:
        hand = subprocess.Popen([sys.executable, "-m", "console.sim.sglang", "--model-path", str(model), "--port",
                                 str(port), "--max-running-requests", "8"], stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, **sim_env(d), "CUDA_VISIBLE_DEVICES": "1"}, start_new_session=True)
    try:
        assert await await_until(lambda: views and any(s.state == "foreign" and s.launcher_pid == hand.pid
                                                      for s in views[-1].sessions), 30)
        r = await lifecycle.launch(link, lifecycle.LaunchRequest(
            host="local", command=[sys.executable, "-m", "console.sim.sglang"],
            flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=free_port()), timeout=60)
        assert r.ok, r
        assert await await_until(lambda: any(e.kind == "ready" and e.session_id == r.session_id
                                            for e in views[-1].events), 30)
        k = cli("kill", "--host", "local", "--config", str(config(tmp_path, runs_dir, d)), "--pid", str(hand.pid),
                "--grace", "5", env={"MTPCONSOLE_AUDIT_LOG": str(audit_path)})
        assert k.returncode == 0, k.stdout + k.stderr

        def vanished():
            return next((e for e in views[-1].events if e.kind == "foreign_vanished" and e.pid == hand.pid), None)
        assert await await_until(vanished, 30)
        ev = vanished()
        assert "not stopped by this console" in ev.text  # what the tracker itself knows
        (named,) = name_other_killers([ev], mine.others(ev.at - 300, ("kill",)))
        assert "killed by another console on this machine" in named.text, named.text
        assert [e.kind for e in views[-1].events].count("ready") == 1
    finally:
        mine.close()
        kill_quietly(groups=[hand.pid])
        hand.wait(10)
        if r is not None and r.session_id:
            await lifecycle.kill(link, lifecycle.KillTarget(host="local", session_id=r.session_id), grace=5)
