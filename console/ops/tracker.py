"""HostTracker: turns one link's stream (samples, events, logs) into HostViews.

Two steps on each sample, change of the link's state, or tick with no view for an interval (the age rule,
STALE, runs while nothing arrives): :meth:`HostTracker.emit` derives the view from what is known (no I/O),
then :meth:`HostTracker.schedule` starts, in the background, the reads that view calls for:

- every live session's log followed once through the link's one :class:`~console.ops.session_log.SessionLogs`
  (from a bounded tail, then by byte offset; shared with a launch's own watch): classified incrementally,
  its ring of lines kept for the UI;
- an ended session classified once from the tail of its own log;
- GET /health of READY sessions (:func:`~console.ops.session_log.probe_health`) so a green badge is verified now;
- ``/server_info`` + ``/model_info`` of READY sessions (:class:`~console.ops.server_facts.FactsProbe`: after
  READY, then every ``PROBE_EVERY_S``; never a condition of READY), carried in ``HostView.server_facts``;
- the served models' shapes (read once) and the hand-started servers' own output (their stdout files, as
  ``status`` reads them, every few seconds) for the advice each view carries (at most once a second, from
  a ring of each server's serving figures, the followed logs and those shapes).

No UI imports.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Collection
from functools import lru_cache
from typing import Callable

from console.core.advisor import Validator
from console.core.current import CurrentState
from console.core.flags import FlagSchema
from console.core.flags.sources import bundled_schema
from console.core.model_config import ModelShape
from console.core.sessions import ViewMemo
from console.link.client import HostClient, LinkListener
from console.link.errors import LinkDown, RequestError
from console.link.link import HostLink
from console.model import (
    Advice,
    AgentEvent,
    Classification,
    ConnectionInfo,
    ExitRecord,
    HostSnapshot,
    HostView,
    OperationResult,
    PendingLaunch,
    ServingFigures,
    SessionEnded,
)
from console.ops.advice_host import (
    LIVE_STATES,
    LOG_TAIL_LINES,
    LiveLogs,
    OrphanMemo,
    argv_model_path,
    figures_for,
    host_advice,
    load_shapes,
    read_foreign_logs,
    schema_validator,
    view_key,
)
from console.ops.server_facts import FactsProbe
from console.ops.session_log import TAIL_BYTES, SessionLog, SessionLogs, probe_health, read_whole

HEALTH_EVERY_S = 5.0
HEALTH_RETRY_S = 1.0
"""A session whose log reads READY but whose /health did not answer 200 (SGLang's warmup: its own request's
prefill line comes before ``fired up`` and /health answers 503 until then) is asked again this soon."""
ADVICE_EVERY_S = 1.0
"""The advisor runs at most once a second per host (its rules read trends over minutes)."""
ADVICE_HISTORY = 60
"""Serving figures kept per server for the advisor's trends (about a minute at 1 Hz)."""
FOREIGN_LOG_EVERY_S = 5.0
"""Seconds between the end of one read of the hand-started servers' stdout files and the start of the next
(a few requests and a bounded tail per server; one read at a time)."""
FOREIGN_TAIL_BYTES = 64 * 1024
"""How much of that file each read takes: its last ``Decode batch`` line and the lines the advisor reads."""


@lru_cache(maxsize=1)
def _bundled_validator() -> Validator:
    """The flag validator over the bundled schema (read once): used until the host's own is learned."""
    return schema_validator(bundled_schema())


class _Stream(LinkListener):
    """What a tracker hears of its link (an object of its own: the tracker's ``on_log`` is the UI's callback)."""

    def __init__(self, tracker: HostTracker) -> None:
        self.tracker = tracker

    def on_sample(self, snapshot: HostSnapshot) -> None:
        self.tracker.update()

    def on_state(self, connection: ConnectionInfo) -> None:
        self.tracker.update()

    def on_tick(self) -> None:
        self.tracker.tick()

    def on_event(self, event: AgentEvent) -> None:
        if isinstance(event, SessionEnded):
            self.tracker.ended(event)


class HostTracker:
    """One host's views, derived from its link's stream (see module doc)."""

    def __init__(self, link: HostLink, *, interval: float, on_view: Callable[[HostView], None],
                 on_log: Callable[[str, str, list[str]], None], clock: Callable[[], float] = time.time):
        self.link, self.interval, self.on_view, self.on_log, self.clock = link, interval, on_view, on_log, clock
        self.client = HostClient.of(link)
        self.session_logs = SessionLogs.of(link)
        """The link's followed logs (one per session, shared with a launch's watch)."""
        self.logs: dict[str, SessionLog] = {}
        """Each session's log as this tracker knows it: followed (live), or read once (ended, or for the UI)."""
        self.classes: dict[str, Classification] = {}
        self.ui_follows: set[str] = set()
        self.health: dict[str, bool] = {}
        """session id -> its last /health verdict (200 or not)."""
        self.health_at: dict[str, float] = {}
        self.health_tried: set[str] = set()
        """Sessions whose /health was asked at least once (answered or not: an agent that cannot ask leaves READY
        to the log alone, as before any probe)."""
        self.healthy_once: set[str] = set()
        """Sessions whose /health answered 200 once: only a change after that is a flap (the warmup's 503 is not)."""
        self.launching: dict[str, int] = {}
        self.current = CurrentState(link.name, clock)
        """Launches sent, results confirmed, acknowledgements: the current session of each GPU."""
        self.memo = ViewMemo()
        """The host's views, derived again only when what they read changed (issue 31: a fleet's quiet hosts)."""
        self.orphans = OrphanMemo()
        """The advisor's orphans, judged again only when the host's processes changed."""
        self._advised_orphans: list | None = None
        """The orphans ``advice`` was made of while no server was live (the same list: the same advice)."""
        self._busy: set[str] = set()
        self._tasks: set[asyncio.Task] = set()
        self.schema: FlagSchema | None = None
        """The host's server flags as learned from its ``--help`` (set by the backend); else the bundled ones."""
        self._validator: tuple[FlagSchema, Validator] | None = None
        self.shape_cache: dict[str, ModelShape | None] = {}
        """Model path → its parsed config.json (None: unreadable), read once per path."""
        self.figure_history: dict[str, deque[ServingFigures]] = {}
        self.advice: list[Advice] = []
        self.advice_at = float("-inf")
        self.advice_error: str | None = None
        """Why the advisor failed on the last view (its views then carry no advice)."""
        self.foreign_logs = LiveLogs()
        """The last read of the hand-started servers' own output (figures dated when read)."""
        self.foreign_logs_at = float("-inf")
        """When the last read ended (this tracker's clock): the next starts FOREIGN_LOG_EVERY_S later at the earliest."""
        self.facts = FactsProbe(every_session=True)
        """Each READY session's latest ``/server_info`` + ``/model_info`` facts (the panels show them, aged)."""
        self.emitted_at = float("-inf")
        """When the last view was emitted (``time.monotonic``): a tick re-derives one an interval old."""
        link.listen(_Stream(self))
        self.session_logs.readers.append(self._read)

    # -------------------------------------------------------------- stream
    def tick(self) -> None:
        """The link's tick: a view again when none was emitted for an interval."""
        if time.monotonic() - self.emitted_at >= self.interval:
            self.update()  # nothing arrived for an interval: the view's age (STALE) is derived again

    def ended(self, event: SessionEnded) -> None:
        """A session's server ended: classified with its exit record; its log unfollowed a moment later."""
        sid = event.session_id
        log = self.logs.get(sid)
        if log is not None and event.exit is not None:
            log.exit = event.exit
            self.classes[sid] = log.result(event.exit)
        self._spawn(f"unfollow:{sid}", self._unfollow_ended(sid))

    def _followed(self, sid: str) -> bool:
        """This tracker reads the session's followed log (not a one-time read of it)."""
        log = self.logs.get(sid)
        return log is not None and log is self.session_logs.get(sid)

    def _read(self, log: SessionLog, lines: list[str]) -> None:
        """A followed log grew: its session's classification now, its lines to the UI when it shows them."""
        sid = log.session_id
        if self.logs.get(sid) is not log:
            return
        self.classes[sid] = log.result(log.exit)
        if sid in self.ui_follows and lines:
            self.on_log(self.link.name, sid, lines)

    def _spawn(self, key: str, coro) -> None:
        if key in self._busy:
            coro.close()
            return
        self._busy.add(key)

        async def wrap():
            try:
                await coro
            except (LinkDown, RequestError, asyncio.TimeoutError):
                pass
            finally:
                self._busy.discard(key)
        t = asyncio.get_running_loop().create_task(wrap())
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    @property
    def reading(self) -> bool:
        """Background reads a view called for are running (log follows, classifications, /health, shapes,
        the hand-started servers' output)."""
        return bool(self._tasks)

    # -------------------------------------------------------------- views, then the reads they call for
    def update(self) -> None:
        """Something arrived (or time passed): the view now (:meth:`emit`), then its reads (:meth:`schedule`)."""
        self.schedule(self.emit())

    def emit(self) -> HostView:
        """Derive the host's view from the link's latest snapshot and what is known now, and hand it to
        ``on_view`` (no I/O: :meth:`schedule` starts the reads). Returns it."""
        self.emitted_at = time.monotonic()
        snap = self.link.snapshot()
        views = self.memo.views(snap, self.classes, self.clock(), interval=self.interval, health=self._health(snap),
                             launching=self.launching)
        view = self.current.apply(HostView(snapshot=snap, sessions=views))
        ready = {c.session.session_id for c in view.current if c.session is not None and c.session.state == "ready"}
        facts = {sid: f for sid, f in self.facts.latest.items() if sid in ready}
        if snap.connection.state == "connected":
            view = view.model_copy(update={"advice": self.advise(view), "server_facts": facts})
        elif facts:  # the host is gone: its last facts stay shown, and age
            view = view.model_copy(update={"server_facts": facts})
        self.on_view(view)
        return view

    def _health(self, snap: HostSnapshot) -> dict[str, bool]:
        """The /health verdicts the views read: a live session with a port whose log reads READY and whose /health
        was never asked reads not verified yet (LOADING until it answers 200, a moment later: its probe starts with
        this view), so that READY is never shown before the server's own health check agrees — SGLang's warmup
        prints its request's prefill line (serving evidence for the log) a moment before /health answers 200."""
        unasked = {s.session_id: False for s in snap.sessions
                   if s.exit is None and s.spec and s.spec.port and s.session_id not in self.health
                   and s.session_id not in self.health_tried and (c := self.classes.get(s.session_id)) is not None
                   and c.state == "ready"}
        return {**self.health, **unasked} if unasked else self.health

    def schedule(self, view: HostView) -> None:
        """Start in the background what ``view`` calls for (each at most once at a time): follow a new live
        session's log, classify an ended one, probe a READY one's /health, read the served models' shapes and
        the hand-started servers' output; forget the sessions the host no longer reports."""
        snap = view.snapshot
        if snap.connection.state != "connected":
            return
        now = self.clock()
        for s in snap.sessions:
            sid = s.session_id
            if s.exit is None and not self._followed(sid):
                self._spawn(f"follow:{sid}", self._start_follow(sid))
            elif s.exit is not None and sid not in self.classes:
                self._spawn(f"classify:{sid}", self._classify_ended(sid, s.exit))
            c = self.classes.get(sid)
            member = bool(s.spec and s.spec.group and s.spec.node_rank)  # a group's rank >= 1: no ready line
            if (s.exit is None and c is not None and (c.state == "ready" or (member and c.state == "loading"))
                    and now - self.health_at.get(sid, 0) > (HEALTH_EVERY_S if self.health.get(sid) else HEALTH_RETRY_S)
                    and s.spec and s.spec.port):
                self.health_at[sid] = now
                self._spawn(f"health:{sid}", self.probe(sid, s.spec.port))
            if (s.exit is None and c is not None and c.state == "ready" and s.spec and s.spec.port
                    and self.facts.due(sid, s.spec.argv, now)):
                self._spawn(f"facts:{sid}", self.facts.tick(self.client, sid, s.spec.port, s.spec.argv,
                                                            clock=self.clock))
        self._forget(snap)
        self._schedule_advice_reads(view)

    def _schedule_advice_reads(self, view: HostView) -> None:
        """The advisor's inputs that come from the host: each served model's shape (once), the hand-started
        servers' own output (every FOREIGN_LOG_EVERY_S, one read at a time)."""
        live = [s for s in view.sessions if s.state in LIVE_STATES]
        if any(p and p not in self.shape_cache for p in {argv_model_path(s.argv) for s in live}):
            self._spawn("shapes", self._load_shapes(view))
        if (any(s.session_id is None and s.state == "foreign" for s in live) and "foreign-logs" not in self._busy
                and self.clock() - self.foreign_logs_at >= FOREIGN_LOG_EVERY_S):
            self._spawn("foreign-logs", self._read_foreign_logs(view))

    # -------------------------------------------------------------- advice
    def _validate(self) -> Validator:
        if self.schema is None:
            return _bundled_validator()
        if self._validator is None or self._validator[0] is not self.schema:
            self._validator = (self.schema, schema_validator(self.schema))
        return self._validator[1]

    def advise(self, view: HostView) -> list[Advice]:
        """The advisor's findings for ``view``, recomputed at most every :data:`ADVICE_EVERY_S`."""
        now = self.clock()
        if now - self.advice_at < ADVICE_EVERY_S:
            return self.advice
        self.advice_at = now
        live = [s for s in view.sessions if s.state in LIVE_STATES]
        orphans = self.orphans.orphans(view)
        if not live and orphans is self._advised_orphans and self.advice_error is None:
            return self.advice  # no server to advise on, the same orphans: the same host-wide findings
        self._advised_orphans = None if live else orphans
        if not any(s.session_id is None and s.state == "foreign" for s in live):
            self.foreign_logs = LiveLogs()  # no hand-started server left: nothing of their output is current
        shapes = {k: v for k, v in self.shape_cache.items() if v is not None}
        keys = {view_key(s): s for s in live}
        logs = self._live_logs(keys)
        history = {k: list(self.figure_history[k]) for k in keys if k in self.figure_history}
        try:
            self.advice = host_advice(view, shapes, validate=self._validate(), history=history, logs=logs,
                                      orphans=orphans)
            self.advice_error = None
        except Exception as e:  # advice is an extra: a rule's bug must never stop the live view of a host
            self.advice, self.advice_error = [], f"{type(e).__name__}: {e}"
        for k, s in keys.items():  # this reading joins the history after the rules saw the older ones
            self.figure_history.setdefault(k, deque(maxlen=ADVICE_HISTORY)).append(figures_for(view, s, logs))
        for k in [k for k in self.figure_history if k not in keys]:
            del self.figure_history[k]
        return self.advice

    def _live_logs(self, keys: Collection[str]) -> LiveLogs:
        """The logs the advisor reads for the live servers ``keys``: the followed session logs' last lines and
        the hand-started servers' last read output (the same inputs ``status`` gives it)."""
        tails = {k: self.logs[k].tail(LOG_TAIL_LINES) for k in keys if k in self.logs}
        f = self.foreign_logs
        return LiveLogs(tails={**{k: v for k, v in f.tails.items() if k in keys}, **tails},
                        metrics={k: v for k, v in f.metrics.items() if k in keys},
                        read_at={k: v for k, v in f.read_at.items() if k in keys},
                        figures_at={k: v for k, v in f.figures_at.items() if k in keys})

    async def _read_foreign_logs(self, view: HostView) -> None:
        """Read the hand-started servers' stdout files (off the view's path; one read at a time, spaced)."""
        try:
            self.foreign_logs = await read_foreign_logs(self.link, view, tail_bytes=FOREIGN_TAIL_BYTES,
                                                        clock=self.clock)
        finally:
            self.foreign_logs_at = self.clock()

    async def _load_shapes(self, view: HostView) -> None:
        async def read_file(path: str) -> str:
            try:
                return await self.client.read_file(path, 4 << 20)
            except RequestError as e:  # the host's answer (no such file, too big): cached as unreadable
                raise OSError(str(e)) from None

        await load_shapes(view, read_file, self.shape_cache)
        self.advice_at = float("-inf")  # the planner can check suggestions now: at the next view

    # -------------------------------------------------------------- what this console did
    def launch_sent(self, p: PendingLaunch) -> None:
        """A launch request is on its way: its GPUs read LAUNCHING 0/6 now, not at the next sample."""
        self.current.launch_sent(p)
        self.update()

    def launch_step(self, session_id: str, step: int) -> None:
        self.launching[session_id] = step
        self.current.launch_step(session_id, step)

    def launch_done(self, session_id: str, result: OperationResult) -> None:
        """The launch's result is shown at once (READY, or refused: nothing started)."""
        self.launching.pop(session_id, None)
        if result.ok and result.state == "ready" and result.session_id == session_id:
            self.health[session_id], self.health_at[session_id] = True, self.clock()  # just verified
            self.healthy_once.add(session_id)
        self.current.launch_done(session_id, result)
        self.update()

    def kill_done(self, session_id: str | None, pid: int | None, result: OperationResult,
                  start_ticks: int | None = None) -> None:
        self.current.kill_done(session_id, pid, result, start_ticks)
        self.update()

    def acknowledge(self, session_id: str) -> None:
        self.current.acknowledge(session_id)
        self.update()

    def _forget(self, snap: HostSnapshot) -> None:
        """Drop what is kept for sessions the host no longer reports (bounded memory over a long run)."""
        keep = {s.session_id for s in snap.sessions} | self.ui_follows | set(self.launching) | set(self.current.pending)
        for sid in [k for k in self.logs if k not in keep]:
            if self._followed(sid):
                self.session_logs.forget(sid)
        for d in (self.logs, self.classes, self.health, self.health_at):
            for sid in [k for k in d if k not in keep]:
                del d[sid]
        self.health_tried &= keep
        self.healthy_once &= keep
        for sid in [k for k in self.facts.latest if k not in keep]:
            self.facts.forget(sid)

    async def _start_follow(self, sid: str) -> None:
        """Follow a live session's log (from its last TAIL_BYTES, or the follow a launch already runs)."""
        log = self.logs[sid] = await self.session_logs.follow(sid, TAIL_BYTES)
        self.classes[sid] = log.result(log.exit)

    async def _unfollow_ended(self, sid: str) -> None:
        await asyncio.sleep(1.0)  # let the last lines arrive
        if sid not in self.ui_follows:
            await self.session_logs.unfollow(sid)

    async def _classify_ended(self, sid: str, ex: ExitRecord) -> None:
        """An ended session: classified once from its log's tail, with its exit record."""
        log = read_whole(sid, await self.client.read_log(sid, tail_bytes=TAIL_BYTES))
        log.exit = ex
        self.logs[sid], self.classes[sid] = log, log.result(ex)
        self.update()

    async def probe(self, sid: str, port: int) -> None:
        """GET /health of the session's server now; a change of its answer is a ``health_flap`` event."""
        try:
            r = await probe_health(self.client, port, 5)
        finally:
            self.health_tried.add(sid)
        ok = r.status == 200
        was = self.health.get(sid)
        self.health[sid] = ok
        if was is not None and was != ok and sid in self.healthy_once:  # a flap: READY's health check changed
            self.current.event("health_flap", f"session {sid}: GET /health "
                               + ("answers 200 again" if ok else f"now answers {r.status or 'nothing'}"),
                               session_id=sid)
        if ok:
            self.healthy_once.add(sid)
        if ok != was:
            self.update()  # READY (or not) now, not at the next sample

    # -------------------------------------------------------------- UI log
    async def follow(self, sid: str, tail_lines: int) -> list[str]:
        """Start showing a session's lines to the UI: its ring buffer now, new lines via on_log."""
        self.ui_follows.add(sid)
        if sid not in self.logs:
            chunk = await self.client.read_log(sid, tail_bytes=TAIL_BYTES, audit=True)
            self.logs.setdefault(sid, read_whole(sid, chunk))  # a follow that started meanwhile is kept
        return self.logs[sid].tail(tail_lines)

    def unfollow(self, sid: str) -> None:
        self.ui_follows.discard(sid)
