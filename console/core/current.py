"""The current session of each GPU: one rule, defined once, below the UI (issue 13).

For each GPU the *current session* is

1. the newest launch aimed at it, from the moment this console sent the request
   (LAUNCHING 0/6, before the host reports a run directory), else
2. the newest live server on it (loading, ready, stopping, foreign, or stale/unreachable
   while the host cannot tell), else
3. the newest ended session (FAILED, or STOPPED when an operator stopped it — by this
   console or another — never an earlier failure), until the GPU is used again, the
   operator relaunches it elsewhere (a later launch ``replaces`` it) or acknowledges it;
   then the GPU is IDLE.

Ended sessions stay in ``HostView.sessions`` (history) but are never current unless rule 3
picks them. A refused launch (preflight, bad flags, busy GPU) creates no session: it is an
event and leaves the GPU as it was.

:func:`current_by_gpu` is the rule as a pure function. :class:`CurrentState` holds what only
the console knows (launches it sent, results it got, sessions the operator acknowledged,
ended sessions the GPU has moved on from, foreign servers seen) and applies the rule to each
HostView; the tracker of a live host and the UI test fakes both use it. Pure: no I/O, no UI.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable

from console.core.events import failed_text, orphan_text, proven_orphans
from console.core.sessions import flags_summary
from console.core.text import launch_progress
from console.model import GpuCurrent, HostEvent, HostSnapshot, HostView, OperationResult, PendingLaunch, SessionView

ENDED = ("failed", "stopped")
EVENTS_KEPT = 200


def is_ended(s: SessionView) -> bool:
    """An ended session: its server is gone for good (FAILED or STOPPED)."""
    return s.state in ENDED


def pending_view(p: PendingLaunch, host_state: str = "launching") -> SessionView:
    """The view of a launch request sent but not yet reported by the host: LAUNCHING ``step``/6."""
    return SessionView(host=p.host, session_id=p.session_id, state="launching", gpus=list(p.gpus), port=p.port,
                       argv=list(p.argv), flags_summary=flags_summary(p.argv[1:]) if p.argv else "", step=p.step,
                       started_at=p.sent_at, replaces=p.replaces, pending=True)


def _age_key(s: SessionView) -> tuple[float, str]:
    return (s.started_at or 0.0, s.session_id or "")


def current_by_gpu(sessions: Iterable[SessionView], indices: Iterable[int], *,
                   superseded: Iterable[str] = ()) -> list[GpuCurrent]:
    """The current session of every GPU in ``indices`` (the rule in the module docstring).

    ``superseded``: ended sessions whose GPU has been used since (they are history).
    """
    sessions = list(sessions)
    gone = set(superseded) | {s.replaces for s in sessions if s.replaces}
    out = []
    for i in indices:
        on = [s for s in sessions if i in s.gpus and not s.acknowledged]
        live = [s for s in on if not is_ended(s)]
        launching = [s for s in live if s.state == "launching"]
        if launching:
            out.append(GpuCurrent(index=i, session=max(launching, key=_age_key), why="launch"))
        elif live:
            out.append(GpuCurrent(index=i, session=max(live, key=_age_key), why="live"))
        else:
            ended = [s for s in on if s.session_id not in gone]
            out.append(GpuCurrent(index=i, session=max(ended, key=_age_key), why="ended") if ended
                       else GpuCurrent(index=i))
    return out


def session_key(s: SessionView) -> str:
    """One key per session: its id, or the (pid, start time) of a foreign server."""
    return s.session_id or f"pid:{s.launcher_pid}:{s.launcher_start_ticks}"


def header_counts(current: Iterable[GpuCurrent]) -> dict[str, int]:
    """GPUs' current sessions by state for the host header; a session on several GPUs counts once,
    every IDLE GPU counts."""
    seen: set[str] = set()
    counts: dict[str, int] = {}
    for c in current:
        s = c.session
        if s is None:
            counts["idle"] = counts.get("idle", 0) + 1
            continue
        k = session_key(s)
        if k in seen:
            continue
        seen.add(k)
        counts[s.state] = counts.get(s.state, 0) + 1
    return counts


class CurrentState:
    """What one console knows about one host beyond its snapshot, and the rule applied to it."""

    def __init__(self, host: str, clock: Callable[[], float] = time.time) -> None:
        self.host, self.clock = host, clock
        self.pending: dict[str, PendingLaunch] = {}
        """Launch requests sent and not yet reported by the host (nor refused)."""
        self.confirmed: dict[str, str] = {}
        """session id -> state an operation just confirmed (READY, STOPPED), shown until the sample agrees."""
        self.stopped_here: dict[str, float] = {}
        """session id -> when this console confirmed it stopped."""
        self.killed: dict[tuple[int, int | None], float] = {}
        """(foreign launcher pid, start ticks) -> when this console confirmed it gone; forgotten once a
        sample no longer lists it (a later process with that pid is another server)."""
        self.acknowledged: set[str] = set()
        self.superseded: set[str] = set()
        self.events: deque[HostEvent] = deque(maxlen=EVENTS_KEPT)
        self._foreign: dict[str, SessionView] | None = None
        self._states: dict[str, str] = {}
        self._ready_seen: set[str] = set()
        """Sessions whose READY this console has reported (an event once per session)."""
        self._orphans: set[str] = set()
        """The keys of foreign views that appeared as proven orphans (their vanishing names them so)."""
        self._current_key: tuple | None = None
        self._current: list[GpuCurrent] = []
        """The last GPUs' current sessions and what they were made of (made again only when that changed)."""

    # ---- what the console did
    def launch_sent(self, p: PendingLaunch) -> None:
        """A launch request is about to be sent: its GPUs read LAUNCHING 0/6 from now on."""
        self.pending[p.session_id] = p

    def launch_step(self, session_id: str, step: int) -> None:
        p = self.pending.get(session_id)
        if p is not None and p.step != step:
            self.pending[session_id] = p.model_copy(update={"step": step})

    def launch_done(self, session_id: str, result: OperationResult) -> None:
        """The launch of ``session_id`` ended with ``result``. Refused (no session started): the
        pending entry goes and an event says why; the GPU is left as it was."""
        p = self.pending.get(session_id)
        started = result.session_id == session_id
        if not started:
            self.pending.pop(session_id, None)
            why = result.error or result.cause or "refused"
            self.event("launch_refused", f"launch refused on GPUs {_gpus(p.gpus if p else [])}, nothing started: "
                                         f"{why}", gpus=list(p.gpus) if p else [])
            return
        if result.ok and result.state:
            self.confirmed[session_id] = result.state

    def kill_done(self, session_id: str | None, pid: int | None, result: OperationResult,
                  start_ticks: int | None = None) -> None:
        """A kill this console ran was confirmed (or not). One that signalled nothing (the session had already
        ended: its state is what it was, FAILED stays FAILED) stopped nothing here."""
        if not result.ok or any(s.name == "SIGTERM" and s.state == "skipped" for s in result.steps):
            return
        now = self.clock()
        if session_id:
            self.stopped_here[session_id] = now
            self.confirmed[session_id] = "stopped"
        elif pid is not None:
            self.killed[(pid, start_ticks)] = now

    def _killed(self, s: SessionView) -> float | None:
        """When this console confirmed foreign server ``s`` gone, if it did."""
        if s.launcher_pid is None:
            return None
        at = self.killed.get((s.launcher_pid, s.launcher_start_ticks))
        return at if at is not None else self.killed.get((s.launcher_pid, None))

    def acknowledge(self, session_id: str) -> None:
        """The operator has seen this ended session: it no longer is its GPU's current session."""
        self.acknowledged.add(session_id)

    def event(self, kind: str, text: str, *, session_id: str | None = None, gpus: list[int] | None = None,
              pid: int | None = None) -> None:
        self.events.append(HostEvent.model_validate(dict(at=self.clock(), host=self.host, kind=kind, text=text,
                                                         session_id=session_id, gpus=gpus or [], pid=pid)))

    # ---- the rule, applied
    def apply(self, view: HostView) -> HostView:
        """``view`` with pending launches, confirmed results and the current session of every GPU."""
        snap = view.snapshot
        now = self.clock()
        reported = {s.session_id for s in view.sessions if s.session_id}
        for sid in [k for k in self.pending if k in reported]:
            del self.pending[sid]  # the host reports it now: its own view takes over
        out: list[SessionView] = []
        for raw in view.sessions:
            s = self._overlay(raw, now)
            if s is not None:
                out.append(s)
        out += [pending_view(p) for p in self.pending.values()]
        connected = snap.connection.state == "connected"
        if connected:
            self._supersede(out)
            self._watch(out, snap)
            listed = {(s.launcher_pid, s.launcher_start_ticks) for s in view.sessions if s.session_id is None}
            listed |= {(pid, None) for pid, _t in listed}
            for k in [k for k in self.killed if k not in listed]:
                del self.killed[k]  # the sample agrees it is gone: a later server with that pid is another
        key = (tuple(out), tuple(g.index for g in snap.gpus), frozenset(self.superseded))
        if key != self._current_key:  # the same sessions as last time (a sample that changed numbers only)
            self._current = current_by_gpu(out, key[1], superseded=self.superseded)
        self._current_key = key  # equal or not: the next sample's unchanged sessions are these very objects
        current = self._current
        counts = header_counts(current)
        if snap.connection.state == "stale" and "idle" in counts:
            counts["stale"] = counts.get("stale", 0) + counts.pop("idle")  # IDLE is a fact with an age too
        return view.model_copy(update={"sessions": out, "current": current, "counts": counts,
                                       "events": list(self.events)})

    def _overlay(self, s: SessionView, now: float) -> SessionView | None:
        sid = s.session_id
        upd: dict = {}
        if sid is None:
            if s.state in ("foreign", "stale") and self._killed(s) is not None:
                return None  # confirmed gone by this console; the next sample agrees
            return s
        if sid in self.acknowledged:
            upd["acknowledged"] = True
        want = self.confirmed.get(sid)
        if want == "ready":
            if s.state in ("launching", "loading"):
                upd["state"], upd["step"] = "ready", None
            elif s.state not in ("stale", "unreachable"):
                self.confirmed.pop(sid, None)  # the sample caught up (or moved on)
        elif want == "stopped":
            if s.state in ("launching", "loading", "ready", "stopping"):
                upd.update(state="stopped", ended_at=s.ended_at or now, cause=None, line=None, hint=None)
            elif s.state == "stopped":
                self.confirmed.pop(sid, None)
        state = upd.get("state", s.state)
        if state == "stopped":
            upd["stopped_by"] = "this console" if sid in self.stopped_here else (s.stopped_by or "an operator")
        return s.model_copy(update=upd) if upd else s

    def _supersede(self, sessions: list[SessionView]) -> None:
        """An ended session is history once its GPU is used again by a server the host reports."""
        used = {i for s in sessions if not is_ended(s) and not s.pending for i in s.gpus}
        for s in sessions:
            if s.session_id and is_ended(s) and used.intersection(s.gpus) and s.session_id not in self.superseded:
                self.superseded.add(s.session_id)

    def _watch(self, sessions: list[SessionView], snap: HostSnapshot | None = None) -> None:
        """Events: foreign servers appearing (a proven orphan as ``orphan``, judged on ``snap``) and vanishing,
        managed sessions becoming READY (once each: seen here, or new since the first view), stopping or
        failing."""
        baseline = self._foreign is None  # the host's first view: what exists already is no event
        foreign = {session_key(s): s for s in sessions if s.session_id is None and s.state == "foreign"}
        if self._foreign is not None:
            new = [(k, s) for k, s in foreign.items() if k not in self._foreign]
            proven = {o.pid: o for o in proven_orphans(snap)} if new and snap is not None else {}
            for k, s in new:
                o = proven.get(s.launcher_pid or -1)
                if o is not None:
                    self._orphans.add(k)
                    self.event("orphan", orphan_text(o), gpus=o.gpus, pid=o.pid, session_id=o.session_id)
                    continue
                self.event("foreign_appeared", f"foreign server pid {s.launcher_pid} appeared on GPUs "
                                               f"{_gpus(s.gpus)}" + (f" (port {s.port})" if s.port else ""),
                           gpus=list(s.gpus), pid=s.launcher_pid)
            for k, s in self._foreign.items():
                if k not in foreign:
                    at = self._killed(s)
                    who = ("killed by this console" if at is not None
                           else "not stopped by this console (another console, the CLI or by hand)")
                    what = "orphan" if k in self._orphans else "foreign server"
                    self._orphans.discard(k)
                    self.event("foreign_vanished", f"{what} pid {s.launcher_pid} on GPUs {_gpus(s.gpus)} "
                                                   f"is gone: {who}", gpus=list(s.gpus), pid=s.launcher_pid)
        self._foreign = foreign
        for s in sessions:
            if not s.session_id or s.pending:
                continue
            old = self._states.get(s.session_id)
            if s.state == "ready" and s.session_id not in self._ready_seen:
                # once per session (a /health flap back to READY is health_flap's event); one already READY
                # in the host's first view is no event
                self._ready_seen.add(s.session_id)
                if old is not None or not baseline:
                    self.event("ready", f"session {s.session_id} READY on GPUs {_gpus(s.gpus)}"
                                        + (f" (port {s.port})" if s.port else ""), session_id=s.session_id,
                               gpus=list(s.gpus))
            if old is not None and old not in ENDED and s.state in ENDED:
                if s.state == "stopped":
                    self.event("session_stopped", f"session {s.session_id} stopped by {s.stopped_by or 'an operator'}",
                               session_id=s.session_id, gpus=list(s.gpus))
                else:
                    self.event("session_failed", failed_text(s.session_id, s.cause, s.line),
                               session_id=s.session_id, gpus=list(s.gpus))
            self._states[s.session_id] = s.state


def _gpus(gpus: Iterable[int]) -> str:
    return ",".join(str(g) for g in gpus) or "N/A"


DOWN = {"unreachable", "failed", "closed"}
"""Link states in which every GPU's badge reads UNREACHABLE."""
BADGE_KINDS = (
    "idle", "launching", "loading", "ready", "failed", "stopping", "stopped",
    "foreign", "stale", "unreachable",
)
"""Every kind a badge can be (its CSS class ``badge-<kind>``)."""


def staleness(snap: HostSnapshot, now: float, interval: float) -> str:
    """"fresh", "amber" (older than 3 intervals) or "red" (older than 10 s, or disconnected)."""
    if snap.connection.state != "connected" and snap.connection.state != "connecting":
        return "red"
    age = snap.age_s(now)
    if age is None:
        return "amber" if snap.connection.state == "connecting" else "red"
    if age > 10:
        return "red"
    return "amber" if age > 3 * interval else "fresh"


def badge_for(session: SessionView | None, snap: HostSnapshot, now: float, interval: float) -> tuple[str, str]:
    """(label, kind) for a GPU's session, given how fresh the host's data is."""
    if snap.connection.state in DOWN:
        return "UNREACHABLE", "unreachable"
    state = session.state if session is not None else "idle"
    if state not in ("failed", "stopped") and staleness(snap, now, interval) != "fresh":
        return "STALE", "stale"
    if session is None:
        return "IDLE", "idle"
    if state == "launching":
        return f"LAUNCHING {launch_progress(session.step)}", state
    if state == "failed":
        return f"FAILED: {session.cause or 'unknown'}", state
    return state.upper(), state
