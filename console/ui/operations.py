"""The operations controller: launch, kill, relaunch and edit-and-relaunch from the UI.

One operation at a time (``busy``). Each is confirmed in a dialog or the flag form first,
then runs as a worker that calls the backend, draws its steps in the steps view and
reports the result. The app owns one :class:`Operations`; the GPU panels' keys call it (``console/ui/main_screen.py``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from functools import partial
from typing import Any, Callable, Coroutine

from console.backend import Backend, OnSteps
from console.model import (
    HostSnapshot,
    KillTarget,
    LaunchRequest,
    OperationResult,
    SessionView,
    Step,
)
from console.ui.flag_values import from_argv, split_argv
from console.ui.format import clean, gpu_list, short
from console.ui.protocols import Console
from console.ui.screens.confirm import ConfirmScreen
from console.ui.screens.flag_form import FlagForm
from console.ui.screens.impact import impact_lines
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.steps import StepsView

OpCall = Callable[[OnSteps], Coroutine[Any, Any, OperationResult]]
"""One backend call of an operation, given the steps callback."""

ENDED = ("failed", "stopped")
KILL_CHECKS = "process group gone · no sglang:: orphans · GPU memory released · port closed"


def kill_target(s: SessionView) -> KillTarget:
    """What a kill of ``s`` hits: its session, or the (pid, start time) of a foreign server."""
    if s.session_id:
        return KillTarget(host=s.host, session_id=s.session_id)
    pid = s.launcher_pid or (s.pids[0] if s.pids else None)
    return KillTarget(host=s.host, pid=pid, start_ticks=s.launcher_start_ticks)


def relaunch_request(s: SessionView) -> LaunchRequest:
    """The launch that repeats session ``s``: its command, flags, GPUs and port."""
    command, flags = split_argv(s.argv)
    return LaunchRequest(host=s.host, command=command or LaunchRequest.model_fields["command"].get_default(
        call_default_factory=True), flags=flags, gpus=s.gpus or [0], port=s.port, replaces=s.session_id)


def who(s: SessionView, snap: HostSnapshot | None = None, now: float | None = None) -> list[str]:
    """The lines of a confirmation dialog that name exactly what is hit: pids, port, model, uptime,
    current traffic and the GPU memory freed (``console/ui/screens/impact.py``)."""
    return impact_lines(s, snap, time.time() if now is None else now)


def on_ok(fn: Callable[[], None]) -> Callable[[bool | None], None]:
    """A dialog callback that runs ``fn`` when the operator confirmed."""
    def cb(ok: bool | None) -> None:
        if ok:
            fn()
    return cb


def on_request(fn: Callable[[LaunchRequest], None]) -> Callable[[LaunchRequest | None], None]:
    """A flag-form callback that runs ``fn`` with the request when the operator launched."""
    def cb(req: LaunchRequest | None) -> None:
        if req is not None:
            fn(req)
    return cb


class Operations:
    """Launch / kill / relaunch / edit for the app (see the module docstring)."""

    def _last_session(self, host: str, index: int) -> SessionView | None:
        """The newest session with a known command line that ran on GPU ``index`` of ``host`` (any state)."""
        view = self.console.views.get(host)
        on = [s for s in (view.sessions if view else []) if index in s.gpus and s.argv and not s.pending]
        return max(on, key=lambda s: s.started_at or 0.0) if on else None

    def _who(self, s: SessionView) -> list[str]:
        view = self.console.views.get(s.host)
        return who(s, view.snapshot if view else None, self.console.clock())

    def __init__(self, console: Console) -> None:
        self.console = console
        self.busy = False
        self.form_memory: dict[tuple[str, int], dict[str, Any]] = {}
        """(host, GPU) → what the operator last typed in a launch form there (kept until it launches)."""
        self.results: list[OperationResult] = []
        self._loop_thread = threading.get_ident()

    @property
    def backend(self) -> Backend:
        return self.console.backend

    @property
    def steps(self) -> StepsView:
        return self.console.main.steps

    def _checkers(self) -> dict[str, Any]:
        return {"validator": self.backend.validator, "planner": self.backend.planner}

    def _busy(self) -> bool:
        if self.busy:
            self.console.say("an action is already running; wait for its steps to finish", severity="warning")
        return self.busy

    def _current(self) -> tuple[GpuPanel, SessionView | None] | None:
        """The selected panel and its current session (what the operator sees on it)."""
        p = self.console.main.selected
        if p is None or not p.is_attached:
            self.console.say("select a GPU panel first (tab / enter)", severity="warning")
            return None
        return p, p.session

    def _running(self, verb: str) -> tuple[GpuPanel, SessionView] | None:
        """The selected panel's current session when a server runs there; otherwise says what there is."""
        t = self._current()
        if t is None:
            return None
        p, s = t
        if s is None:
            self.console.say(f"nothing is running on {p.host} GPU {p.index} (l launches)", severity="warning")
            return None
        if s.state in ENDED:
            offer = f": r relaunches {clean(s.session_id or 'its', 80)}'s flags, e edits them" if s.argv else ""
            self.console.say(f"nothing is running on {p.host} GPU {p.index} ({s.state.upper()}){offer}",
                         severity="warning")
            return None
        if s.pending or not (s.session_id or s.pids):
            self.console.say(f"the launch on {p.host} GPU {p.index} is not reported by the host yet: {verb} it "
                         "once it is", severity="warning")
            return None
        return p, s

    # ---- the four actions
    def launch(self) -> None:
        t = self._current()
        if t is None or self._busy():
            return
        p = t[0]
        tpl: LaunchRequest | None = None
        try:
            tpl = self.backend.launch_template(p.host, p.index)
        except Exception as e:
            self.console.say(f"no launch template: {short(clean(str(e)), 200)}", severity="warning")
        raw = self.form_memory.get((p.host, p.index))
        last = self._last_session(p.host, p.index)
        if raw is None and last is not None and not (tpl and tpl.profile):
            raw = from_argv(last.argv, last.gpus or [p.index], last.port)  # the model and flags last run here
        if raw is None:
            raw = from_argv([*tpl.command, *tpl.flags], tpl.gpus, tpl.port) if tpl else {"gpus": str(p.index)}
        if str(p.index) not in str(raw.get("gpus") or "").replace(" ", "").split(","):
            raw = {**raw, "gpus": str(p.index)}  # the focused panel's GPU, never a leftover value
        form = FlagForm(p.host, raw, title=f"Launch on {p.host} · GPU {p.index}", **self._checkers(), template=tpl,
                        profiles=self.backend.launch_profiles(p.host),
                        remember=partial(self.form_memory.__setitem__, (p.host, p.index)))
        self.console.push_screen(form, callback=on_request(lambda req: self._launch_op(req, forget=(p.host, p.index))))

    def kill(self) -> None:
        t = self._running("kill")
        if t is None or self._busy():
            return
        s = t[1]
        target = kill_target(s)  # captured now: a list shifting underneath cannot change it
        lines = [*self._who(s), "", "then checks: " + KILL_CHECKS]
        self.console.push_screen(ConfirmScreen(f"Kill {clean(s.session_id or 'foreign server', 80)}?", lines, "Kill"),
                             callback=on_ok(lambda: self.run(
                                 f"kill · {s.host} · {s.session_id or 'pid ' + str(target.pid)}", "kill", s.host,
                                 lambda cb: self.backend.kill(target, cb))))

    def relaunch(self) -> None:
        t = self._current()
        if t is None or self._busy():
            return
        p, s = t
        if s is not None and s.state in ENDED:
            self._launch_again(s)
            return
        t2 = self._running("relaunch")
        if t2 is None:
            return
        s = t2[1]
        if not s.argv:
            self.console.say("the server's command line is unknown: use e to relaunch with edited flags",
                         severity="warning")
            return
        target, req = kill_target(s), relaunch_request(s)
        lines = [*self._who(s), f"flags:    {short(clean(' '.join(req.flags)), 300)}", "",
                 "kill checks: " + KILL_CHECKS, "then the same flags are launched and confirmed step by step"]
        self.console.push_screen(ConfirmScreen(f"Relaunch {clean(s.session_id or 'foreign server', 80)}?", lines,
                                           "Relaunch"), callback=on_ok(lambda: self._start_relaunch(target, req)))

    def _launch_again(self, s: SessionView) -> None:
        """``r`` on an ended session: nothing to kill; launch that session's flags again, and say so."""
        if not s.argv:
            self.console.say(f"{clean(s.session_id or 'this session', 80)}'s command line is unknown: "
                         "use l to launch", severity="warning")
            return
        req = relaunch_request(s)
        sid = clean(s.session_id or "the ended session", 80)
        ended = f"{s.state.upper()}" + (f": {s.cause}" if s.state == "failed" and s.cause else "")
        lines = [*self._who(s), f"flags:    {short(clean(' '.join(req.flags)), 300)}", "",
                 f"it ended ({ended}): nothing to kill; its flags are launched again and confirmed step by step"]
        self.console.push_screen(ConfirmScreen(f"Relaunch {sid}'s flags?", lines, "Relaunch"),
                             callback=on_ok(lambda: self._launch_op(
                                 req, title=f"relaunch of {sid} (its flags) · {req.host} · GPUs {gpu_list(req.gpus)}",
                                 say=f"relaunching {sid}'s flags on {req.host} GPUs {gpu_list(req.gpus)}")))

    def edit(self, flags: list[str] | None = None, why: str | None = None) -> None:
        """Edit and relaunch the selected GPU's session; ``flags``: start the form from these server
        flags instead of the running ones (the advisor's suggestion, ``why`` names it in the title)."""
        t = self._current()
        if t is None or self._busy():
            return
        p, s = t
        if s is not None and s.state in ENDED and s.argv:
            self._edit_stopped(s)  # nothing to kill: edit its flags and launch them
            return
        t2 = self._running("edit")
        if t2 is None:
            return
        s = t2[1]
        target = kill_target(s)
        argv = s.argv if flags is None else [*split_argv(s.argv)[0], *flags]
        form = FlagForm(s.host, from_argv(argv, s.gpus, s.port), running_argv=s.argv, replaces=s.session_id,
                        impact=self._who(s),
                        title=f"Edit and relaunch {clean(s.session_id or 'foreign server', 80)} on {s.host}"
                              f" · GPUs {gpu_list(s.gpus)}" + (f" · advice: {clean(why, 80)}" if why else ""),
                        **self._checkers())
        self.console.push_screen(form, callback=on_request(lambda req: self._start_relaunch(target, req)))

    def _edit_stopped(self, s: SessionView) -> None:
        named = f"{clean(s.session_id, 80)} " if s.session_id and s.cause else ""  # which failure: its session too
        title = (f"Edit and launch again {named}({s.state.upper()}: {clean(s.cause or s.session_id or 'not started', 80)})"
                 f" on {s.host} · GPUs {gpu_list(s.gpus)}")
        form = FlagForm(s.host, from_argv(s.argv, s.gpus, s.port), running_argv=s.argv, title=title,
                        replaces=s.session_id, **self._checkers())
        self.console.push_screen(form, callback=on_request(self._launch_op))

    def _launch_op(self, req: LaunchRequest, *, forget: tuple[str, int] | None = None, title: str | None = None,
                   say: str | None = None) -> None:
        self.run(title or f"launch · {req.host} · GPUs {gpu_list(req.gpus)}", "launch", req.host,
                 lambda cb: self.backend.launch(req, cb), forget=forget, gpus=req.gpus, req=req, say=say)

    def _start_relaunch(self, target: KillTarget, req: LaunchRequest) -> None:
        self.run(f"relaunch · {req.host} · GPUs {gpu_list(req.gpus)}", "relaunch", req.host,
                 lambda cb: self.backend.relaunch(target, req, cb), gpus=req.gpus, req=req)

    # ---- running one
    def run(self, title: str, op: str, host: str, call: OpCall, *, forget: tuple[str, int] | None = None,
            gpus: list[int] | None = None, req: LaunchRequest | None = None, say: str | None = None) -> None:
        if self._busy():
            return
        self.busy = True
        self.steps.begin(title)
        if say:
            self.console.say(say)
        self.console.run_worker(self._op(op, host, call, forget, req), group="op", exit_on_error=False)

    def on_steps(self, steps: list[Step]) -> None:
        """Backend callback for progress; safe from another thread."""
        if threading.get_ident() == self._loop_thread:
            self.steps.set_steps(steps)
        else:
            self.console.call_from_thread(self.steps.set_steps, steps)

    async def _op(self, op: str, host: str, call: OpCall, forget: tuple[str, int] | None,
                  req: LaunchRequest | None = None) -> None:
        try:
            result = await call(self.on_steps)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            result = OperationResult(op=op, host=host, ok=False, error=f"{type(e).__name__}: {e}")
        finally:
            self.busy = False
        self.results.append(result)
        self.steps.finish(result)
        app = self.console
        app.apply_views()  # the backend pushed the result's view: show it now, not at the next tick
        if result.ok:
            app.say(f"{op} confirmed" + (f": {result.state.upper()}" if result.state else ""))
            if forget:
                self.form_memory.pop(forget, None)
        elif req is not None and (result.session_id is None or result.session_id == req.replaces):
            # refused before anything started (preflight, bad flags, busy GPU): no session, GPU untouched
            why = result.refused or result.error or "refused"
            app.say(f"{op} refused, nothing started: {short(clean(why), 200)}", severity="error", timeout=10)
        else:
            why = result.cause or result.error or "failed"
            app.say(f"{op} FAILED: {short(clean(why), 200)}", severity="error", timeout=10)

    def acknowledge(self, host: str, session_id: str) -> None:
        """The operator has seen an ended session: its GPU reads IDLE (for the sessions table)."""
        self.backend.acknowledge(host, session_id)
