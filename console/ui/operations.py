"""The operations controller: launch, kill, relaunch, edit-and-relaunch and abort from the UI.

Each is confirmed in a dialog or the flag form first, then runs as a worker that calls the backend, draws its
steps in the steps view and reports the result. The app owns one :class:`Operations`; the GPU panels' keys call
it (``console/ui/main_screen.py``).

Operations hold GPUs, not the console: each running one holds the GPUs it acts on (:class:`Running`), and an
action is refused only where it would touch a GPU another one holds — a relaunch of GPU 0 that loads for minutes
leaves GPU 2 free to launch on. What each holds:

- a launch: the GPUs of its request; a kill: its session's GPUs (the panel's GPU when none are known);
- a relaunch and an edit-and-relaunch: the old session's GPUs and the new request's;
- an orphan kill: the GPUs the orphan holds memory on;
- **the whole host** only where the GPUs an action touches are unknown: the kill of an orphan that holds no GPU
  memory the driver reports (on a host without GPU information), and any caller of :meth:`Operations.run` that
  names no GPUs.

One key is never refused for a held GPU: ``x`` (:meth:`Operations.abort`) stops the launch (or the relaunch's
launch) under way on the focused GPU — its session's recorded process group is killed, confirmed like any kill
in a dialog that names the session, the group and its pids. The launch then reports "aborted by the operator"
(not a failure) and its session reads STOPPED. The steps view shows the operation begun last; the others still
running are listed under its title.

Multi-node groups (issue 30): a launch form whose chosen profile is multi-host (``hosts = [..]``) launches a group
over its hosts, after a dialog naming them (:meth:`Operations._group_launch`, the CLI's group launch). And the
failure policy runs here too (:meth:`Operations.guard_groups`): a group the views show FAILED with a dead member
while others run is handed to the backend's guard — the evidence re-checked on the hosts at action time, then the
rest of the group killed, confirmed on each host, audited — once per group, as an operation in the steps view; in
read-only mode it is only said, never done.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Coroutine, Iterable

from console.backend import Backend, OnSteps
from console.core.group import POLICY_OFF
from console.model import (
    ABORTED,
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
from console.ui.screens.flag_form import FlagForm, gpus_words
from console.ui.screens.impact import impact_lines
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.steps import StepsView

OpCall = Callable[[OnSteps], Coroutine[Any, Any, OperationResult]]
"""One backend call of an operation, given the steps callback."""

ENDED = ("failed", "stopped")
GUARD_RETRY_S = 30.0
"""A group whose failure the evidence did not prove (a member's host not answering, its processes still running) is
looked at again this long after, at the earliest; one the policy acted on, never again."""
KILL_CHECKS = "process group gone · no sglang:: orphans · GPU memory released · port closed"
LAUNCHES = ("launch", "relaunch")
"""The operations ``x`` aborts (a relaunch once its launch has started)."""
ABORTABLE = ("launching", "loading")
"""The states of a session whose launch ``x`` aborts."""


@dataclass(eq=False)
class Running:
    """One operation under way: what it holds (``gpus`` of ``host``; None: the whole host), its steps, its result."""

    title: str
    op: str
    host: str
    gpus: frozenset[int] | None
    steps: list[Step] = field(default_factory=list)
    result: OperationResult | None = None
    aborting: bool = False
    """``x`` was confirmed on this launch: its session is being killed."""
    group: str | None = None
    """A group operation: the group id (the failure policy's), or ``*`` for a group launch (its id is not known yet)."""

    def holds(self, host: str, gpus: frozenset[int] | None) -> bool:
        """It holds one of ``gpus`` of ``host`` (None: any of them)."""
        return host == self.host and (self.gpus is None or gpus is None or bool(self.gpus & gpus))

    def where(self) -> str:
        """What it holds, in words: ``GPU 0``, ``GPUs 0,1`` or ``every GPU``."""
        if self.gpus is None:
            return "every GPU"
        return ("GPU " if len(self.gpus) == 1 else "GPUs ") + gpu_list(sorted(self.gpus))

    def step(self) -> str:
        """The step under way (its name), else the last one reported, else ``starting``."""
        running = next((s.name for s in self.steps if s.state == "running"), None)
        return running or (self.steps[-1].name if self.steps else "starting")


def held(gpus: Iterable[int] | None) -> frozenset[int] | None:
    """The GPUs an operation holds: ``gpus``, or None (the whole host) when none are known."""
    got = frozenset(gpus or ())
    return got or None


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
        self.running: list[Running] = []
        """The operations under way, oldest first: each holds its GPUs (see the module docstring)."""
        self.shown: Running | None = None
        """The operation the steps view shows (the one begun last)."""
        self.form_memory: dict[tuple[str, int], dict[str, Any]] = {}
        """(host, GPU) → what the operator last typed in a launch form there (kept until it launches)."""
        self.results: list[OperationResult] = []
        self._loop_thread = threading.get_ident()
        self.guarded: set[str] = set()
        """The groups the failure policy acted on (once per group)."""
        self.guard_looked: dict[str, float] = {}
        """group → when (``time.monotonic``) the policy last looked at it without acting."""
        self.guard_said: set[str] = set()
        """The groups read-only mode said it leaves alone."""

    @property
    def backend(self) -> Backend:
        return self.console.backend

    @property
    def steps(self) -> StepsView:
        return self.console.main.steps

    def _checkers(self) -> dict[str, Any]:
        return {"validator": self.backend.validator, "planner": self.backend.planner}

    @property
    def busy(self) -> bool:
        """An operation runs (on some GPU of some host)."""
        return bool(self.running)

    def holder(self, host: str, gpus: frozenset[int] | None) -> Running | None:
        """The operation under way that holds one of ``gpus`` of ``host`` (None: any GPU of it), if any."""
        return next((r for r in self.running if r.holds(host, gpus)), None)

    def _busy(self, host: str, gpus: Iterable[int] | None, verb: str) -> bool:
        """True (and says which operation holds what) when ``gpus`` of ``host`` are held; None: the whole host."""
        r = self.holder(host, held(gpus))
        if r is not None:
            self._refuse(verb, r)
        return r is not None

    def _refuse(self, verb: str, r: Running) -> None:
        """Say that ``verb`` is refused because ``r`` holds its GPUs (and what is still free to act on)."""
        hint = "; x aborts it" if r.op in LAUNCHES and not r.aborting else ""
        free = "" if r.gpus is None else "; other GPUs are free"
        self.console.say(f"{verb} refused: {r.title} holds {r.host} {r.where()} (step {r.step()}){hint}{free}",
                         severity="warning")

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
        if t is None or self._busy(t[0].host, [t[0].index], "launch"):
            return
        p = t[0]
        tpl: LaunchRequest | None = None
        try:
            tpl = self.backend.launch_template(p.host, p.index)
        except Exception as e:
            self.console.say(f"no launch template: {short(clean(str(e)), 200)}", severity="warning")
        raw = self.form_memory.get((p.host, p.index))
        source = "what was typed here last (kept until it launches)"
        last = self._last_session(p.host, p.index)
        if raw is None and last is not None:  # the model and flags last run here; never an arbitrary profile
            raw = from_argv(last.argv, last.gpus or [p.index], last.port)
            source = (f"the flags of GPU {p.index}'s last session "
                      f"({clean(last.session_id or 'a foreign server', 80)}, {last.state.upper()})")
        if raw is None:
            raw = from_argv([*tpl.command, *tpl.flags], tpl.gpus, tpl.port) if tpl else {"gpus": str(p.index)}
            source = f"{p.host}'s defaults"
        if str(p.index) not in str(raw.get("gpus") or "").replace(" ", "").split(","):
            raw = {**raw, "gpus": str(p.index)}  # the focused panel's GPU, never a leftover value
        host = p.host
        form = FlagForm(host, raw, title=lambda gpus: f"Launch on {host} · {gpus_words(gpus)}", **self._checkers(),
                        gpu_check=self.backend.gpu_check, template=tpl, source=source,
                        profiles=self.backend.launch_profiles(host),
                        remember=partial(self.form_memory.__setitem__, (p.host, p.index)))

        def launched(req: LaunchRequest) -> None:
            prof = form.profiles.get(form.applied) if form.applied else None
            if prof is not None and prof.group_hosts:  # a multi-host profile: a group over its hosts
                self._group_launch(req.model_copy(update={"profile": form.applied}), prof, (p.host, p.index))
            else:
                self._launch_op(req, forget=(p.host, p.index))
        self.console.push_screen(form, callback=on_request(launched))

    def _group_launch(self, req: LaunchRequest, prof: LaunchRequest, forget: tuple[str, int]) -> None:
        """The form's request launched as a multi-node group over the profile's hosts (rank order), after a dialog
        that names them: the backend's group launch (the CLI's: every node's preflight, all members at once)."""
        hosts = list(prof.group_hosts or [])
        lines = [f"profile:  {clean(req.profile or '', 80)}: {clean(prof.description or '', 200)}",
                 "members:  " + ", ".join(f"rank {i} on {clean(h, 80)}" for i, h in enumerate(hosts)),
                 f"GPUs:     {gpu_list(req.gpus)} on every host", f"flags:    {clean(' '.join(req.flags))}", "",
                 "then every node's preflight, all members at once (SGLang's ranks rendezvous), READY when every "
                 "member is and rank 0 answers a one-token generate"]
        title = f"group launch · {' + '.join(hosts)} · GPUs {gpu_list(req.gpus)}"
        self.console.push_screen(
            ConfirmScreen(f"Launch a {len(hosts)}-node group over {clean(', '.join(hosts), 160)}?", lines,
                          "Launch group"),
            callback=on_ok(lambda: self.run(title, "launch", req.host,
                                            lambda cb: self.backend.launch_group(req, hosts, cb), forget=forget,
                                            gpus=req.gpus, req=req, group="*")))

    def kill(self) -> None:
        c = self._current()  # a GPU an operation holds is refused first (a launch under way: x aborts it)
        if c is None or self._busy(c[0].host, {c[0].index, *(c[1].gpus if c[1] else [])}, "kill"):
            return
        t = self._running("kill")
        if t is None:
            return
        s = t[1]
        target = kill_target(s)  # captured now: a list shifting underneath cannot change it
        lines = [*self._who(s), "", "then checks: " + KILL_CHECKS]
        self.console.push_screen(ConfirmScreen(f"Kill {clean(s.session_id or 'foreign server', 80)}?", lines, "Kill"),
                             callback=on_ok(lambda: self.run(
                                 f"kill · {s.host} · {s.session_id or 'pid ' + str(target.pid)}", "kill", s.host,
                                 lambda cb: self.backend.kill(target, cb), gpus=s.gpus or [t[0].index])))

    def relaunch(self) -> None:
        t = self._current()
        if t is None or self._busy(t[0].host, {t[0].index, *(t[1].gpus if t[1] else [])}, "relaunch"):
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
        lines = [*self._who(s), f"flags:    {clean(' '.join(req.flags))}", "",
                 "kill checks: " + KILL_CHECKS, "then the same flags are launched and confirmed step by step"]
        self.console.push_screen(ConfirmScreen(f"Relaunch {clean(s.session_id or 'foreign server', 80)}?", lines,
                                           "Relaunch"), callback=on_ok(lambda: self._start_relaunch(target, req, s.gpus)))

    def _launch_again(self, s: SessionView) -> None:
        """``r`` on an ended session: nothing to kill; launch that session's flags again, and say so."""
        if not s.argv:
            self.console.say(f"{clean(s.session_id or 'this session', 80)}'s command line is unknown: "
                         "use l to launch", severity="warning")
            return
        req = relaunch_request(s)
        sid = clean(s.session_id or "the ended session", 80)
        ended = f"{s.state.upper()}" + (f": {s.cause}" if s.state == "failed" and s.cause else "")
        lines = [*self._who(s), f"flags:    {clean(' '.join(req.flags))}", "",
                 f"it ended ({ended}): nothing to kill; its flags are launched again and confirmed step by step"]
        self.console.push_screen(ConfirmScreen(f"Relaunch {sid}'s flags?", lines, "Relaunch"),
                             callback=on_ok(lambda: self._launch_op(
                                 req, title=f"relaunch of {sid} (its flags) · {req.host} · GPUs {gpu_list(req.gpus)}",
                                 say=f"relaunching {sid}'s flags on {req.host} GPUs {gpu_list(req.gpus)}")))

    def edit(self, flags: list[str] | None = None, why: str | None = None) -> None:
        """Edit and relaunch the selected GPU's session; ``flags``: start the form from these server
        flags instead of the running ones (the advisor's suggestion, ``why`` names it in the title)."""
        t = self._current()
        if t is None or self._busy(t[0].host, {t[0].index, *(t[1].gpus if t[1] else [])}, "edit and relaunch"):
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
        self.console.push_screen(form, callback=on_request(lambda req: self._start_relaunch(target, req, s.gpus)))

    def _edit_stopped(self, s: SessionView) -> None:
        named = f"{clean(s.session_id, 80)} " if s.session_id and s.cause else ""  # which failure: its session too
        head = (f"Edit and launch again {named}({s.state.upper()}: {clean(s.cause or s.session_id or 'not started', 80)})"
                f" on {s.host}")
        form = FlagForm(s.host, from_argv(s.argv, s.gpus, s.port), running_argv=s.argv,
                        title=lambda gpus: f"{head} · {gpus_words(gpus)}", replaces=s.session_id,
                        gpu_check=self.backend.gpu_check, **self._checkers())  # nothing runs there: the GPUs must be free
        self.console.push_screen(form, callback=on_request(self._launch_op))

    def _launch_op(self, req: LaunchRequest, *, forget: tuple[str, int] | None = None, title: str | None = None,
                   say: str | None = None) -> None:
        self.run(title or f"launch · {req.host} · GPUs {gpu_list(req.gpus)}", "launch", req.host,
                 lambda cb: self.backend.launch(req, cb), forget=forget, gpus=req.gpus, req=req, say=say)

    def _start_relaunch(self, target: KillTarget, req: LaunchRequest, old_gpus: list[int]) -> None:
        """Relaunch ``target`` as ``req``: it holds the old session's GPUs (``old_gpus``) and the new ones."""
        self.run(f"relaunch · {req.host} · GPUs {gpu_list(req.gpus)}", "relaunch", req.host,
                 lambda cb: self.backend.relaunch(target, req, cb), gpus=sorted({*old_gpus, *req.gpus}), req=req)

    # ---- aborting a launch
    def abort(self) -> None:
        """``x``: stop the launch under way on the focused GPU now — its session's recorded process group is killed
        (confirmed like any kill, in a dialog that names the session, the group and its pids; Cancel focused). The
        launch then reports aborted by the operator and its session reads STOPPED. A launch of another console
        (``launch --wait`` in a terminal) is aborted the same way."""
        t = self._current()
        if t is None:
            return
        p, s = t
        r = next((x for x in self.running if x.op in LAUNCHES and x.holds(p.host, frozenset([p.index]))), None)
        where = f"{p.host} GPU {p.index}"
        if s is None or s.state not in ABORTABLE:
            if r is not None and r.op == "relaunch":
                self.console.say(f"the relaunch on {where} is stopping the old server (step {r.step()}): x aborts its "
                                 "launch once it has started", severity="warning")
            else:
                now = f" ({s.state.upper()}: k kills it)" if s is not None and s.state not in ENDED else ""
                self.console.say(f"no launch in progress on {where}{now}: x aborts a launch while it loads",
                                 severity="warning")
            return
        if s.pending or not s.session_id:
            self.console.say(f"the launch on {where} has no process yet (its preflight runs): x aborts it once the "
                             "host reports it, in a moment", severity="warning")
            return
        if r is not None and r.aborting:
            self.console.say(f"the launch on {where} is already being aborted", severity="warning")
            return
        other = next((x for x in self.running if x is not r and x.holds(p.host, held(s.gpus or [p.index]))), None)
        if other is not None:
            self._refuse("abort", other)
            return
        self._confirm_abort(s, r, p.index)

    def _confirm_abort(self, s: SessionView, under_way: Running | None, index: int) -> None:
        sid = clean(s.session_id or "", 80)
        target = kill_target(s)  # captured now: the session the dialog names, whatever the panel shows later
        view = self.console.views.get(s.host)
        info = next((x for x in (view.snapshot.sessions if view else []) if x.session_id == s.session_id), None)
        pgid = info.record.pgid if info is not None and info.record is not None else None
        group = (f"group:    process group {pgid} (the launch's recorded group: SIGTERM now, SIGKILL after the grace)"
                 if pgid else "group:    the session's processes (no process group recorded yet)")
        lines = [*self._who(s), group, "",
                 "then checks: " + KILL_CHECKS,
                 f"the launch {'under way here' if under_way is not None else 'under way'} then reports: {ABORTED}; "
                 "the session reads STOPPED"]
        gpus = s.gpus or [index]

        def go() -> None:
            if under_way is not None:
                under_way.aborting = True
            self.run(f"abort · {s.host} · {sid} (its launch; group {pgid or 'N/A'})", "kill", s.host,
                     lambda cb: self.backend.kill(target, cb), gpus=gpus, within=under_way)
        self.console.push_screen(ConfirmScreen(f"Abort the launch of {sid}?", lines, "Abort launch"),
                                 callback=on_ok(go))

    # ---- the group failure policy (issue 30)
    def guard_groups(self, groups: list[str]) -> None:
        """Groups the views show FAILED with a dead member while others run (``console.core.group.guard_candidates``):
        each handed to the backend's guard once (see the module docstring); none while a group launch of this
        console runs (it handles its own members' failures), none in read-only mode (said once per group)."""
        now = time.monotonic()
        for gid in groups:
            if gid in self.guarded or now - self.guard_looked.get(gid, float("-inf")) < GUARD_RETRY_S:
                continue
            if self.console.read_only:
                if gid not in self.guard_said:
                    self.guard_said.add(gid)
                    self.console.say(f"group {clean(gid, 80)} FAILED with members still running: read-only, so they "
                                     "are left running (mtpconsole kill GROUP stops them)", severity="warning")
                continue
            if any(r.group in ("*", gid) for r in self.running):
                continue
            members = [s for v in self.console.views.values() for s in v.sessions if s.group == gid and s.session_id]
            if not members:
                continue
            head = min(members, key=lambda s: s.node_rank or 0)
            if self.holder(head.host, held(head.gpus)) is not None:
                continue  # another operation holds the head's GPUs: looked at again at the next view
            if gid not in self.guard_looked:  # said once: a retry (the evidence did not hold) only shows its steps
                self.console.say(f"group {clean(gid, 80)}: a member died while others run — the rest of the group is "
                                 "killed (the failure policy), each kill confirmed on its host", severity="warning")
            self.guard_looked[gid] = now
            self.run(f"group guard · {gid} · a member died: the rest killed", "kill", head.host,
                     partial(self._guard, gid), gpus=head.gpus or None, group=gid)

    async def _guard(self, gid: str, cb: OnSteps) -> OperationResult:
        r = await self.backend.guard_group(gid, cb)
        if r.refused is None or POLICY_OFF in r.refused:  # it acted, or the group turned the policy off: never again
            self.guarded.add(gid)
        return r

    # ---- running one
    def run(self, title: str, op: str, host: str, call: OpCall, *, forget: tuple[str, int] | None = None,
            gpus: list[int] | None = None, req: LaunchRequest | None = None, say: str | None = None,
            within: Running | None = None, group: str | None = None) -> None:
        """Run one operation holding ``gpus`` of ``host`` (None: the whole host), refused while another holds one
        of them; ``within``: the operation this one acts inside of (an abort's kill of a launch's session: the
        launch's GPUs are not refused to it)."""
        want = held(gpus)
        blocker = next((r for r in self.running if r is not within and r.holds(host, want)), None)
        if blocker is not None:
            self._refuse(op, blocker)
            return
        r = Running(title, op, host, want, group=group)
        self.running.append(r)
        self._show(r)
        if say:
            self.console.say(say)
        self.console.run_worker(self._op(r, call, forget, req), group="op", exit_on_error=False)

    def _show(self, r: Running) -> None:
        """The steps view shows ``r`` (begun just now)."""
        self.shown = r
        self.steps.begin(r.title)
        self._others()

    def _others(self) -> None:
        """Under the shown operation's title: the others still running, each with the step it is at."""
        self.steps.set_others([f"{x.title} · {x.step()}" for x in self.running if x is not self.shown])

    def on_steps(self, steps: list[Step], r: Running | None = None) -> None:
        """Backend callback for the progress of ``r`` (default: the shown operation); safe from another thread."""
        if threading.get_ident() != self._loop_thread:
            self.console.call_from_thread(self.on_steps, steps, r)
            return
        r = r or self.shown
        if r is None:
            return
        r.steps = list(steps)
        if r is self.shown:
            self.steps.set_steps(steps)
        else:
            self._others()

    async def _op(self, r: Running, call: OpCall, forget: tuple[str, int] | None,
                  req: LaunchRequest | None = None) -> None:
        op, host = r.op, r.host
        try:
            result = await call(partial(self.on_steps, r=r))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            result = OperationResult(op=op, host=host, ok=False, error=f"{type(e).__name__}: {e}")
        finally:
            if r in self.running:
                self.running.remove(r)
        r.result = result
        self.results.append(result)
        if r is self.shown:
            self.steps.finish(result)
        self._others()
        app = self.console
        app.apply_views()  # the backend pushed the result's view: show it now, not at the next tick
        if result.ok:
            app.say(f"{op} confirmed" + (f": {result.state.upper()}" if result.state else ""))
            if forget:
                self.form_memory.pop(forget, None)
        elif result.aborted:  # the operator stopped it (x, or a kill from any console): not a failure
            sid = clean(result.session_id or "its session", 80)
            app.say(f"{op} {result.aborted}: {sid} reads {(result.state or 'stopping').upper()}", severity="warning")
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
