"""Model-based test of issue 13: the real app (Textual Pilot) against a scripted host, driven by
hypothesis through random sequences across three GPUs; after every step each panel, the log pane
and the header must show what an independent model says is each GPU's current session.

The model is written from the operator's point of view, event by event ("a launch sent to GPU 1
is what GPU 1 shows", "a kill leaves STOPPED", "a refused launch leaves the GPU as it was", "a
foreign server vanishing leaves IDLE"), not from ``console/core/current.py``'s rule.

The host is a fake (no processes): launches sent by the app wait until a rule spawns, readies,
fails or refuses them; other consoles (the CLI) launch and stop sessions directly; foreign
servers appear and vanish; the link drops and comes back. The backend feeds its views through
the console's real CurrentState, as the real tracker does.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from ui_fakes import NOW, record_toasts, toasts

from console.core.current import CurrentState
from console.model import (
    ConnectionInfo,
    GpuSample,
    HostSnapshot,
    HostView,
    KillTarget,
    LaunchRequest,
    OperationResult,
    PendingLaunch,
    SessionView,
)
from console.ui.screens.confirm import ConfirmScreen
from console.ui.screens.flag_form import FlagForm
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.host_header import HostHeader, counts_text
from console.ui.widgets.log_pane import LogPane
from tests.helpers.wait import until

HOST = "h"
GPUS = 3
LIVE = ("launching", "loading", "ready", "stopping", "foreign")


def argv(i: int) -> list[str]:
    return ["python3", "-m", "sglang.launch_server", "--model-path", "/models/m", "--port", str(31000 + i)]


class ScriptedHost:
    """A Backend whose host changes only when a rule says so."""

    def __init__(self) -> None:
        self.hosts, self.read_only, self.interval = [HOST], False, 1.0
        self.validator = self.planner = self.gpu_check = None
        self.sessions: dict[str, SessionView] = {}
        self.foreign: dict[int, SessionView] = {}
        self.up = True
        self.n = 0
        self.inflight: dict[str, tuple[asyncio.Future, LaunchRequest]] = {}
        self.current = CurrentState(HOST, clock=lambda: NOW)
        self.lines: dict[str, list[str]] = {}
        self.following: set[str] = set()
        self.on_view = self.on_log = None

    def new_sid(self) -> str:
        self.n += 1
        return f"s{self.n:03d}"

    def push(self) -> None:
        snap = HostSnapshot(name=HOST, connection=ConnectionInfo(state="connected" if self.up else "unreachable",
                                                                 rtt_ms=1.0),
                            sampled_at=NOW, received_at=NOW, gpu_source="nvml",
                            gpus=[GpuSample(index=i, name="H200") for i in range(GPUS)])
        views = [*self.sessions.values(), *self.foreign.values()]
        if not self.up:  # as derive_views does: live ones cannot be told apart
            views = [v if v.state in ("failed", "stopped") else v.model_copy(update={"state": "unreachable"})
                     for v in views]
        if self.on_view:
            self.on_view(self.current.apply(HostView(snapshot=snap, sessions=views)))

    # ---- Backend
    async def start(self, on_view, on_log, on_audit) -> None:
        self.on_view, self.on_log = on_view, on_log
        self.push()

    async def stop(self) -> None:
        pass

    async def follow_log(self, host: str, sid: str, tail_lines: int = 500) -> list[str]:
        self.following.add(sid)  # as the tracker: new lines via on_log from now on, the tail now
        return list(self.lines.get(sid, []))[-tail_lines:]

    async def unfollow_log(self, host: str, sid: str) -> None:
        self.following.discard(sid)

    def launch_template(self, host: str, gpu: int) -> LaunchRequest:
        return LaunchRequest(host=host, flags=argv(gpu)[3:], gpus=[gpu], port=31000 + gpu)

    def acknowledge(self, host: str, sid: str) -> None:
        self.current.acknowledge(sid)
        self.push()

    async def launch(self, req: LaunchRequest, on_steps) -> OperationResult:
        sid = self.new_sid()
        self.current.launch_sent(PendingLaunch(host=HOST, session_id=sid, gpus=list(req.gpus),
                                               argv=[*req.command, *req.flags], port=req.port, sent_at=NOW,
                                               replaces=req.replaces))
        self.push()
        fut = asyncio.get_running_loop().create_future()
        self.inflight[sid] = (fut, req)
        result = await fut
        self.current.launch_done(sid, result)
        self.push()
        return result

    def _stop(self, target: KillTarget) -> None:
        if target.session_id:
            s = self.sessions[target.session_id]
            self.sessions[target.session_id] = s.model_copy(update={"state": "stopped", "ended_at": NOW,
                                                                    "stopped_by": "an operator"})
        else:
            for i, f in list(self.foreign.items()):
                if f.launcher_pid == target.pid:
                    del self.foreign[i]

    async def kill(self, target: KillTarget, on_steps) -> OperationResult:
        self._stop(target)
        r = OperationResult(op="kill", host=HOST, ok=True, session_id=target.session_id, state="stopped")
        self.current.kill_done(target.session_id, target.pid, r, target.start_ticks)
        self.push()
        return r

    async def relaunch(self, target: KillTarget, req: LaunchRequest, on_steps) -> OperationResult:
        await self.kill(target, on_steps)
        r = await self.launch(req.model_copy(update={"replaces": target.session_id}), on_steps)
        return r.model_copy(update={"op": "relaunch"})

    # ---- the host, as rules drive it
    def spawn(self, sid: str) -> None:
        req = self.inflight[sid][1]
        self.sessions[sid] = SessionView(host=HOST, session_id=sid, state="launching", gpus=list(req.gpus),
                                         port=req.port, argv=[*req.command, *req.flags], started_at=NOW, step=1,
                                         pids=[5000 + self.n], replaces=req.replaces)
        self.push()

    def end_launch(self, sid: str, ok: bool) -> None:
        fut, req = self.inflight.pop(sid)
        self.finish(sid, ok)
        fut.set_result(OperationResult(op="launch", host=HOST, ok=ok, session_id=sid, state="ready" if ok else "failed",
                                       cause=None if ok else "gpu_oom"))

    def refuse(self, sid: str) -> None:
        fut, _req = self.inflight.pop(sid)
        fut.set_result(OperationResult(op="launch", host=HOST, ok=False, session_id=None, state="failed",
                                       cause="gpu_oom", error="memory plan: does not fit"))

    def finish(self, sid: str, ok: bool) -> None:
        """The session becomes READY (ok) or FAILED, as the host's next sample says."""
        s = self.sessions[sid]
        upd = {"state": "ready", "step": None} if ok else {"state": "failed", "cause": "gpu_oom", "step": None,
                                                             "ended_at": NOW, "pids": [],
                                                             "line": "Not enough memory"}
        self.sessions[sid] = s.model_copy(update=upd)
        self.push()

    def cli_launch(self, gpu: int) -> str:
        sid = self.new_sid()
        self.sessions[sid] = SessionView(host=HOST, session_id=sid, state="launching", gpus=[gpu], port=31000 + gpu,
                                         argv=argv(gpu), started_at=NOW, step=0, pids=[5000 + self.n])
        self.push()
        return sid

    def log(self, sid: str, line: str) -> None:
        self.lines.setdefault(sid, []).append(line)
        if self.on_log and sid in self.following:
            self.on_log(HOST, sid, [line])


class Model:
    """What each GPU must show: (session id or 'foreign:<pid>' or None, badge)."""

    def __init__(self) -> None:
        self.cur: dict[int, tuple[str | None, str]] = {i: (None, "IDLE") for i in range(GPUS)}
        self.before: dict[str, tuple[str | None, str]] = {}
        """pending launch id -> what its GPU showed before (a refusal puts it back)."""


class TruthMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        os.environ["TZ"] = "UTC"
        time.tzset()
        from console.ui.app import make_app

        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.be = ScriptedHost()
        self.app = make_app(self.be, clock=lambda: NOW)
        self.app.animation_level = "none"
        record_toasts(self.app)
        self.queue: asyncio.Queue = asyncio.Queue()
        started = self.loop.create_future()
        self.driver = self.loop.create_task(self._drive(started))
        self.loop.run_until_complete(started)
        self.model = Model()
        self.sel = 0
        self.lines = 0
        self.run(self._focus(0))

    async def _drive(self, started: asyncio.Future) -> None:
        """Runs the app for the whole example: every step's coroutine is awaited here, inside the
        app's context (Textual's run_test must be entered and left by one task)."""
        async with self.app.run_test(size=(120, 40)) as pilot:
            self.pilot = pilot
            started.set_result(None)
            while True:
                coro, fut = await self.queue.get()
                if coro is None:
                    fut.set_result(None)
                    return
                try:
                    fut.set_result(await coro)
                except Exception as e:  # handed back to the rule that sent it
                    fut.set_exception(e)

    def run(self, coro):
        """Await ``coro`` inside the running app; returns its result."""
        fut = self.loop.create_future()
        self.queue.put_nowait((coro, fut))
        return self.loop.run_until_complete(fut)

    async def _call(self, fn, *args):
        return fn(*args)

    def teardown(self) -> None:
        for fut, _ in self.be.inflight.values():
            if not fut.done():
                fut.cancel()
        try:
            if not self.driver.done():
                self.run(None)
            self.loop.run_until_complete(self.driver)
        finally:
            self.loop.close()
            asyncio.set_event_loop(None)

    async def _shown(self) -> None:
        """Let the app run until it shows what the model says (every invariant holds), bounded; the
        failure names the invariant that never held."""
        await until(self.pilot, self.shows_the_model)

    def shows_the_model(self) -> bool:
        self.panels_show_the_current_session()
        self.log_pane_shows_the_selected_panels_session()
        self.header_counts_equal_the_panels()
        return True

    async def _focus(self, i: int) -> None:
        await until(self.pilot, lambda: len(self.app.query(GpuPanel)) == GPUS)
        self.panel(i).focus()
        await until(self.pilot, lambda: self.panel(i).has_class("selected"))
        await self._shown()

    async def _key(self, key: str, screen: type) -> bool:
        """Press ``key``; True once ``screen`` is up, False once the app said why not (a toast)."""
        said = len(toasts(self.app))
        await self.pilot.press(key)
        await until(self.pilot, lambda: isinstance(self.app.screen, screen) or len(toasts(self.app)) > said)
        return isinstance(self.app.screen, screen)

    async def _sent(self, before: int) -> None:
        """Wait until one more launch is in flight (the app sent it)."""
        await until(self.pilot, lambda: len(self.be.inflight) > before)

    async def _submit(self) -> None:
        """Once the form's Check run at open is done: Confirm launch when it passed (one key), else the form's
        Launch (the checks run), then Confirm launch once the button is out of its pressed effect."""
        form = self.app.screen
        button = form.query_one("#launch")
        await until(self.pilot, lambda: not form.opening and not button.has_class("-active"))
        if str(button.label) != "Confirm launch":
            await self.pilot.click("#launch")
            await until(self.pilot, lambda: str(button.label) == "Confirm launch" and not button.has_class("-active"))
        await self.pilot.click("#launch")
        await until(self.pilot, lambda: not isinstance(self.app.screen, FlagForm))

    def panel(self, i: int) -> GpuPanel:
        return next(p for p in self.app.query(GpuPanel) if p.index == i)

    # ---- helpers on the model
    def live_on(self, i: int) -> bool:
        sid, badge = self.model.cur[i]
        return badge.startswith(("LAUNCHING", "READY", "LOADING", "FOREIGN"))

    def app_busy(self) -> bool:
        return bool(self.be.inflight)

    def pending_on(self, i: int) -> str | None:
        return next((sid for sid, (_f, r) in self.be.inflight.items() if i in r.gpus), None)

    def launched(self, i: int, before: tuple[str | None, str]) -> None:
        sid = max(self.be.inflight)  # the launch just sent
        self.model.before[sid] = before
        self.model.cur[i] = (sid, "LAUNCHING")

    # ---- rules: the host and other consoles
    @precondition(lambda self: self.be.up)
    @rule(i=st.integers(0, GPUS - 1))
    def cli_launch(self, i):
        if self.live_on(i) or self.pending_on(i):
            return
        sid = self.be.cli_launch(i)
        self.model.cur[i] = (sid, "LAUNCHING")
        self.run(self._shown())

    @precondition(lambda self: self.be.up)
    @rule(i=st.integers(0, GPUS - 1), ok=st.booleans())
    def cli_session_ends(self, i, ok):
        """A launch by another console becomes READY or FAILED (or a READY one is stopped elsewhere)."""
        sid, badge = self.model.cur[i]
        if sid is None or sid in self.be.inflight or sid.startswith("foreign") or sid not in self.be.sessions:
            return
        if badge == "LAUNCHING":
            self.be.finish(sid, ok)
            self.model.cur[i] = (sid, "READY" if ok else "FAILED: gpu_oom")
        elif badge == "READY" and not ok:
            self.be.sessions[sid] = self.be.sessions[sid].model_copy(update={"state": "stopped", "ended_at": NOW,
                                                                             "stopped_by": "an operator"})
            self.be.push()
            self.model.cur[i] = (sid, "STOPPED")
        self.run(self._shown())

    @precondition(lambda self: self.be.up and not self.app_busy())
    @rule(i=st.integers(0, GPUS - 1))
    def app_launch(self, i):
        """A launch from this console (the operations controller, as the flag form's Launch calls it)."""
        if self.live_on(i):
            return  # a busy GPU: the real preflight refuses it (the refuse rule covers refusals)
        before = self.model.cur[i]
        req = self.be.launch_template(HOST, i)
        n = len(self.be.inflight)
        self.run(self._call(lambda: self.app.ops.run(f"launch · {HOST} · GPUs {i}", "launch", HOST,
                                                     lambda cb: self.be.launch(req, cb), gpus=req.gpus, req=req)))
        self.run(self._sent(n))
        self.launched(i, before)
        self.run(self._shown())

    @precondition(lambda self: self.be.up and any(s not in self.be.sessions for s in self.be.inflight))
    @rule(data=st.data())
    def spawn(self, data):
        sid = data.draw(st.sampled_from(sorted(s for s in self.be.inflight if s not in self.be.sessions)))
        self.be.spawn(sid)
        self.run(self._shown())

    @precondition(lambda self: self.be.up and any(s not in self.be.sessions for s in self.be.inflight))
    @rule(data=st.data())
    def refuse(self, data):
        sid = data.draw(st.sampled_from(sorted(s for s in self.be.inflight if s not in self.be.sessions)))
        i = self.be.inflight[sid][1].gpus[0]
        self.be.refuse(sid)
        self.model.cur[i] = self.model.before.pop(sid)
        self.run(self._shown())

    @precondition(lambda self: self.be.up and any(s in self.be.sessions for s in self.be.inflight))
    @rule(data=st.data(), ok=st.booleans())
    def launch_ends(self, data, ok):
        sid = data.draw(st.sampled_from(sorted(s for s in self.be.inflight if s in self.be.sessions)))
        i = self.be.inflight[sid][1].gpus[0]
        self.be.end_launch(sid, ok)
        self.model.cur[i] = (sid, "READY" if ok else "FAILED: gpu_oom")
        self.run(self._shown())

    @rule(i=st.integers(0, GPUS - 1))
    def log_line(self, i):
        sid = self.model.cur[i][0]
        if sid and not sid.startswith("foreign") and sid in self.be.sessions:
            self.lines += 1
            self.be.log(sid, f"{sid} line {self.lines}")
            self.run(self._shown())

    @precondition(lambda self: self.be.up)
    @rule(i=st.integers(0, GPUS - 1))
    def foreign_appears(self, i):
        if self.live_on(i) or self.pending_on(i) or i in self.be.foreign:
            return
        pid = 7000 + i  # the same pid again later: another process (another start time)
        self.be.n += 1
        self.be.foreign[i] = SessionView(host=HOST, state="foreign", gpus=[i], launcher_pid=pid, pids=[pid],
                                         launcher_start_ticks=self.be.n, argv=argv(i), port=31000 + i)
        self.be.push()
        self.model.cur[i] = (f"foreign:{pid}", "FOREIGN")
        self.run(self._shown())

    @precondition(lambda self: self.be.up and bool(self.be.foreign))
    @rule(data=st.data())
    def foreign_vanishes(self, data):
        i = data.draw(st.sampled_from(sorted(self.be.foreign)))
        del self.be.foreign[i]
        self.be.push()
        self.model.cur[i] = (None, "IDLE")
        self.run(self._shown())

    @rule()
    def link_flaps(self):
        self.be.up = not self.be.up
        self.be.push()
        self.run(self._shown())

    # ---- rules: the operator's keys
    @rule()
    def tab(self):
        self.run(self.pilot.press("tab"))
        self.sel = (self.sel + 1) % GPUS
        self.run(until(self.pilot, lambda: self.panel(self.sel).has_class("selected")))
        self.run(self._shown())

    @precondition(lambda self: self.be.up and not self.app_busy())
    @rule()
    def key_k(self):
        i = self.sel
        sid, badge = self.model.cur[i]
        dialog = self.run(self._key("k", ConfirmScreen))
        running = sid is not None and (sid.startswith("foreign") or (sid in self.be.sessions and self.live_on(i)))
        if not running:
            assert not dialog, f"kill offered on {badge} GPU {i}"
            assert "nothing is running" in self.last_note() or "not reported" in self.last_note(), self.last_note()
            return
        assert dialog, f"no kill dialog on {badge} ({self.last_note()})"
        self.check_dialog(sid)
        self.run(self.pilot.click("#confirm"))
        self.model.cur[i] = (None, "IDLE") if sid.startswith("foreign") else (sid, "STOPPED")
        self.run(self._shown())

    @precondition(lambda self: self.be.up and not self.app_busy())
    @rule()
    def key_r(self):
        i = self.sel
        sid, badge = self.model.cur[i]
        dialog = self.run(self._key("r", ConfirmScreen))
        if sid is None or (badge == "LAUNCHING" and sid not in self.be.sessions):
            assert not dialog, f"relaunch offered on {badge} GPU {i}"
            return
        assert dialog, f"no relaunch dialog on {badge} ({self.last_note()})"
        self.check_dialog(sid)
        n = len(self.be.inflight)
        self.run(self.pilot.click("#confirm"))
        self.run(self._sent(n))
        self.launched(i, (None, "IDLE") if sid.startswith("foreign") else
                      (sid, "STOPPED") if self.live_on(i) else (sid, badge))
        self.run(self._shown())

    @precondition(lambda self: self.be.up and not self.app_busy())
    @rule()
    def key_e(self):
        i = self.sel
        sid, badge = self.model.cur[i]
        form = self.run(self._key("e", FlagForm))
        if sid is None or (badge == "LAUNCHING" and sid not in self.be.sessions):
            assert not form, f"edit offered on {badge} GPU {i}"
            return
        assert form, f"no edit form on {badge} ({self.last_note()})"
        assert ("foreign server" if sid.startswith("foreign") else sid) in self.app.screen.title_text
        n = len(self.be.inflight)
        self.run(self._submit())
        self.run(self._sent(n))
        self.launched(i, (None, "IDLE") if sid.startswith("foreign") else
                      (sid, "STOPPED") if self.live_on(i) else (sid, badge))
        self.run(self._shown())

    def check_dialog(self, sid: str) -> None:
        """Every offered action targets what is on screen: the dialog names the panel's session."""
        body = str(self.app.screen.query_one(".dialog-body").render())
        want = f"pids:     {sid.split(':')[1]}" if sid.startswith("foreign") else f"session:  {sid}"
        assert want in body, (want, body)

    def last_note(self) -> str:
        notes = toasts(self.app)
        return notes[-1] if notes else ""

    # ---- what must hold after every step
    @invariant()
    def panels_show_the_current_session(self):
        for i in range(GPUS):
            p = self.panel(i)
            sid, badge = self.model.cur[i]
            shown = p.session
            got = None if shown is None else shown.session_id or f"foreign:{shown.launcher_pid}"
            assert got == sid, f"GPU {i}: panel shows {got}, the current session is {sid}"
            want = badge if self.be.up else "UNREACHABLE"
            assert p.badge_label.startswith(want), f"GPU {i}: badge {p.badge_label}, want {want} ({sid})"
            if shown is not None and shown.state in ("failed", "stopped"):
                assert badge.startswith(("FAILED", "STOPPED")), f"GPU {i}: ended {got} shown as current"

    @invariant()
    def log_pane_shows_the_selected_panels_session(self):
        if isinstance(self.app.screen, (ConfirmScreen, FlagForm)):
            return
        sel = [p.index for p in self.app.query(GpuPanel) if p.has_class("selected")]
        assert sel == [self.sel], (sel, self.sel)
        sid, _badge = self.model.cur[self.sel]
        pane = self.app.query_one(LogPane)
        banner = str(pane.query_one(".banner").render())
        if sid is None:
            assert self.app.following is None and banner.startswith("no server on"), banner
        elif sid.startswith("foreign"):
            assert self.app.following is None and f"pid {sid.split(':')[1]}" in banner, banner
        else:
            assert self.app.following == (HOST, sid), (self.app.following, sid)
            assert banner.startswith(f"session {sid} ·"), banner
            assert all(line.startswith(f"{sid} line") for line in pane.lines), list(pane.lines)
            assert list(pane.lines) == self.be.lines.get(sid, [])[-len(pane.lines):] if pane.lines else True

    @invariant()
    def header_counts_equal_the_panels(self):
        if not self.be.up:
            return
        kinds = Counter(self.panel(i).badge[1] for i in range(GPUS))
        text = self.app.query_one(HostHeader).render().plain
        assert text.endswith(counts_text(kinds)), (text, kinds)


TruthMachine.TestCase.settings = settings(max_examples=int(os.environ.get("TRUTH_EXAMPLES", "8")),
                                          stateful_step_count=25, deadline=None,
                                          suppress_health_check=list(HealthCheck),
                                          # shrinking replays the app hundreds of times: on demand only
                                          phases=[Phase.explicit, Phase.reuse, Phase.generate]
                                          + ([Phase.shrink] if os.environ.get("TRUTH_SHRINK") else []))
test_ui_truth_model = TruthMachine.TestCase
