"""What happened on a host, as one list of :class:`HostEvent` built from what exists.

Sources, each event saying which one it came from (``source``):

- ``run_dir``: every session's run directory — launched (spec: when, by whom, with which
  profile), acknowledged (ack.json);
- ``exit_record``: exits (code, signal, stopped by an operator, could not start) and the
  kernel's OOM killer firing while the session ran (``oom_kill`` counter before/after);
- ``log``: READY, from the time stamp of the ready line in the session's own log;
- ``kernel_log``: OOM kills from ``dmesg`` where it is readable (often it is not: then a
  note says so);
- ``audit``: actions sent to the host by consoles on this machine (launch, kill, ack);
- ``console``: what a live console saw itself (foreign servers appearing and vanishing,
  refused launches, sessions becoming READY, stopping or failing: ``HostView.events``); a foreign
  server's vanishing that this console did not cause is attributed to another console on this
  machine when the shared audit log holds that console's kill of it (:func:`name_other_killers`).

The one list of a host's events is built by :func:`host_events`, for the CLI (``mtpconsole events``: every run
directory, the classified logs, the kernel log, the audit log) and the TUI (``v``: its views, through
:func:`view_events`) alike: a failed session is ``session_failed`` with its cause (``gpu_oom``), not only the
signal that ended it; a proven orphan is ``orphan`` (never ``foreign_appeared``); an acknowledgement is listed
once; an event whose time a run directory holds unusable (NaN, infinite, past year 9999) is left out with a
note instead of breaking the list.

Pure functions: the caller reads the sources (the CLI through the agent, the UI from its
views) and hands them to :func:`host_events`. No I/O, no UI.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from console.model import AuditEntry, Classification, HostEvent, HostSnapshot, HostView, SessionInfo

if TYPE_CHECKING:
    from console.core.orphans import Orphan

READY_LINE = re.compile(r"The server is fired up and ready to roll")
LOG_TIME = re.compile(r"^\[(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})")
"""SGLang's line prefix ``[2026-10-30 12:02:00`` (host local time)."""
OOM_LINE = re.compile(r"(?:Out of memory|Memory cgroup out of memory): Killed process (\d+) \(([^)]*)\)")
ISO_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:[,.](\d+))?([+-]\d{2}:?\d{2})?")
AUDITED_ACTIONS = {"launch": "launch sent", "kill": "kill signal sent", "ack": "acknowledged"}
KILL_BEFORE_VANISH_S = 120.0
"""A kill sent at most this long before a foreign server was seen gone counts as its end (the kill's
grace before SIGKILL is 20 s, then a sample or two)."""
KILL_AFTER_VANISH_S = 5.0
"""...or at most this long after (the other console writes its audit entry when the agent answered)."""
NOT_BY_THIS_CONSOLE = "not stopped by this console"
LATEST_TIME = 253402300799.0
"""9999-12-31 23:59:59 UTC: a later time (or NaN, or an infinite one) in a run directory is no time at all."""


def _gpus(s: SessionInfo) -> list[int]:
    return list(s.spec.gpus) if s.spec else []


def session_events(host: str, s: SessionInfo) -> list[HostEvent]:
    """Launched, exited, OOM-killed and acknowledged, from one session's run directory."""
    out = []
    sid, gpus, spec = s.session_id, _gpus(s), s.spec
    if spec is not None and spec.created_at:
        who = f" by {spec.launched_by}" if spec.launched_by else ""
        prof = f" (profile {spec.profile})" if spec.profile else ""
        rel = f", relaunching {spec.replaces}" if spec.replaces else ""
        port = f" port {spec.port}" if spec.port else ""
        out.append(HostEvent(at=spec.created_at, host=host, kind="launched", session_id=sid, gpus=gpus,
                             source="run_dir",
                             text=f"session {sid} launched on GPUs {_g(gpus)}{port}{who}{prof}{rel}"))
    ex = s.exit
    if ex is not None:
        if ex.error:
            what = f"could not start: {ex.error}"
        elif ex.stopped_by_operator:
            what = "stopped by an operator" + (f" (signal {ex.signal})" if ex.signal else "")
        elif ex.signal:
            what = f"killed by signal {ex.signal}"
        else:
            what = f"exited with code {ex.exit_code}"
        pid = s.record.pid if s.record else None
        out.append(HostEvent(at=ex.ended_at, host=host, kind="exited", session_id=sid, gpus=gpus, pid=pid,
                             source="exit_record", text=f"session {sid} {what}"))
        if ex.host_oom_killed:
            n = (ex.oom_kill_after or 0) - (ex.oom_kill_before or 0)
            out.append(HostEvent(at=ex.ended_at, host=host, kind="oom_kill", session_id=sid, gpus=gpus, pid=pid,
                                 source="exit_record",
                                 text=f"the kernel's OOM killer fired {n} time(s) while session {sid} ran "
                                      "(/proc/vmstat oom_kill)"))
    if s.acknowledged_at is not None:
        out.append(HostEvent(at=s.acknowledged_at, host=host, kind="acknowledged", session_id=sid, gpus=gpus,
                             source="run_dir", text=f"session {sid} acknowledged by an operator"))
    return out


def run_dir_events(snap: HostSnapshot) -> list[HostEvent]:
    """Every session's run-directory events on the host."""
    return [e for s in snap.sessions for e in session_events(snap.name, s)]


def log_time(line: str) -> float | None:
    """The epoch time of an SGLang log line's ``[YYYY-MM-DD HH:MM:SS`` prefix (local time), if any."""
    m = LOG_TIME.match(line)
    if not m:
        return None
    try:
        return _dt.datetime.strptime(f"{m.group(1)} {m.group(2)}", "%Y-%m-%d %H:%M:%S").timestamp()
    except ValueError:
        return None


def ready_event(host: str, s: SessionInfo, log_text: str) -> HostEvent | None:
    """READY, at the time stamp of the ready line in the session's own log (None if not there)."""
    for line in log_text.splitlines():
        if READY_LINE.search(line):
            at = log_time(line) or (s.record.started_at if s.record else None)
            if at is None:
                return None
            return HostEvent(at=at, host=host, kind="ready", session_id=s.session_id, gpus=_gpus(s), source="log",
                             text=f"session {s.session_id} READY (its log: the server is fired up)")
    return None


def kernel_oom_events(host: str, dmesg: str) -> list[HostEvent]:
    """OOM kills from ``dmesg --time-format=iso`` output (lines without a time are skipped)."""
    out = []
    for line in dmesg.splitlines():
        m = OOM_LINE.search(line)
        t = ISO_TIME.match(line)
        if not m or not t:
            continue
        stamp = t.group(1) + (f".{t.group(2)[:6]}" if t.group(2) else "") + (t.group(3) or "")
        try:
            at = _dt.datetime.fromisoformat(stamp).timestamp()
        except ValueError:
            continue
        out.append(HostEvent(at=at, host=host, kind="oom_kill", pid=int(m.group(1)), source="kernel_log",
                             text=f"kernel OOM killer killed pid {m.group(1)} ({m.group(2)})"))
    return out


def audit_events(host: str, entries: Iterable[AuditEntry]) -> list[HostEvent]:
    """Actions consoles on this machine sent to ``host`` (launch, kill, ack), with their outcome."""
    out = []
    for e in entries:
        if e.host != host or e.op not in AUDITED_ACTIONS:
            continue
        args = e.args or {}
        raw_spec = args.get("spec")
        spec: dict = raw_spec if isinstance(raw_spec, dict) else {}
        sid = args.get("session_id") or spec.get("session_id")
        pid = args.get("pid") if isinstance(args.get("pid"), int) else None
        what = f"session {sid}" if sid else (f"pid {pid}" if pid else "")
        sig = f" (signal {args.get('signal')})" if e.op == "kill" and args.get("signal") else ""
        res = "" if e.ok else f": FAILED {str(e.result or '')[:120]}"
        out.append(HostEvent(at=e.at, host=host, kind="action", session_id=sid if isinstance(sid, str) else None,
                             pid=pid, gpus=[g for g in spec.get("gpus") or [] if isinstance(g, int)], source="audit",
                             text=f"{AUDITED_ACTIONS[e.op]}{sig} {what}{res}".replace("  ", " ").strip()))
    return out


def other_kill(e: HostEvent, others: Iterable[AuditEntry]) -> AuditEntry | None:
    """The kill that another console on this machine sent to the foreign server of vanish event ``e`` (same
    host and pid, answered ok, shortly before it was seen gone), from ``others``: the shared audit log's
    entries that this console did not write. None when there is none (by hand, from another machine)."""
    if e.kind != "foreign_vanished" or e.pid is None:
        return None
    hits = [a for a in others if a.op == "kill" and a.ok and a.host == e.host and a.args.get("pid") == e.pid
            and e.at - KILL_BEFORE_VANISH_S <= a.at <= e.at + KILL_AFTER_VANISH_S]
    return min(hits, key=lambda a: a.at, default=None)  # the first signal sent (SIGTERM before a SIGKILL)


def name_other_killers(events: Iterable[HostEvent], others: Iterable[AuditEntry]) -> list[HostEvent]:
    """``events`` with each foreign server's vanishing that this console did not cause ("not stopped by this
    console") saying which console did when the audit log shows it: another console on this machine (the
    CLI or another TUI, writing the same audit log), with the time and signal of its kill. The rest as given."""
    others = list(others)
    out = []
    for e in events:
        hit = other_kill(e, others) if NOT_BY_THIS_CONSOLE in e.text else None
        if hit is None:
            out.append(e)
            continue
        sig = hit.args.get("signal")
        stamp = _dt.datetime.fromtimestamp(hit.at).strftime("%H:%M:%S")
        who = (f"killed by another console on this machine (its kill{f', signal {sig},' if sig else ''} sent at "
               f"{stamp}: the audit log)")
        out.append(e.model_copy(update={"text": e.text.rsplit(" is gone: ", 1)[0] + " is gone: " + who,
                                        "source": "console+audit"}))
    return out


def usable_time(at: float | None) -> bool:
    """Whether ``at`` can be a time an event is listed and printed at (finite, from 1970 to year 9999)."""
    return at is not None and math.isfinite(at) and 0 <= at <= LATEST_TIME


def stamp(at: float, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    """``at`` in local time; an unusable one says so (never raises)."""
    if not usable_time(at):
        return f"(no usable time: {at!r})"
    try:
        return _dt.datetime.fromtimestamp(at).strftime(fmt)
    except (OverflowError, OSError, ValueError):
        return f"(no usable time: {at!r})"


def failed_text(session_id: str, cause: str | None, line: str | None = None) -> str:
    """What a failed session's event says: ``session S FAILED: gpu_oom — <the decisive line>`` (the console's
    own event, :mod:`console.core.current`, and the run directory's say it alike)."""
    tail = f" — {line[:200]}" if line else ""
    return f"session {session_id} FAILED: {cause or 'unknown'}{tail}"


def failure_event(host: str, s: SessionInfo, cls: Classification | None) -> HostEvent | None:
    """``session_failed`` at the session's end, with the cause its log (and exit record) show; None unless
    it ended failed."""
    ex = s.exit
    if ex is None or cls is None or cls.state != "failed" or ex.stopped_by_operator:
        return None
    return HostEvent(at=ex.ended_at, host=host, kind="session_failed", session_id=s.session_id, gpus=_gpus(s),
                     pid=s.record.pid if s.record else None, source="log+exit_record",
                     text=failed_text(s.session_id, cls.cause, cls.line))


def orphan_text(o: Orphan) -> str:
    """What an orphan's event says: its pid and title, what it holds, and the first fact that proves it."""
    held = ", ".join(f"GPU {i} {m:,} MiB" for i, m in sorted(o.gpu_mem_mib.items())) or "no GPU memory"
    why = f": {o.evidence[0]}" if o.evidence else ""
    return f"orphan pid {o.pid} ({o.title[:60]}) holds {held}{why}"


def proven_orphans(snap: HostSnapshot) -> list[Orphan]:
    """The proven orphans of ``snap``, judged as the session views judge them (the snapshot's live sessions
    count as live): ``console.core.sessions.derive_views``."""
    from console.core.orphans import find_orphans

    live = {s.session_id for s in snap.sessions if s.exit is None and not s.untrusted}
    return find_orphans(snap, live_ids=live)


def orphan_events(host: str, orphans: Iterable[Orphan], sessions: Mapping[str, SessionInfo],
                  snap: HostSnapshot) -> list[HostEvent]:
    """One ``orphan`` event per proven orphan of ``snap``: at the end of the session it carries (when it became
    one), else at its process's start, else at the sample's time."""
    out = []
    started = {p.pid: p.started_at for p in snap.servers}
    for o in orphans:
        s = sessions.get(o.session_id or "")
        at = (s.exit.ended_at if s is not None and s.exit is not None else None) or started.get(o.pid) \
            or snap.sampled_at
        if at is None:
            continue
        out.append(HostEvent(at=at, host=host, kind="orphan", session_id=o.session_id, gpus=o.gpus, pid=o.pid,
                             source="processes", text=orphan_text(o)))
    return out


def host_events(host: str, sessions: Iterable[SessionInfo], *, classes: Mapping[str, Classification] | None = None,
                snap: HostSnapshot | None = None, seen: Iterable[HostEvent] = (), found: Iterable[HostEvent] = (),
                audit: Iterable[AuditEntry] = (), others: Iterable[AuditEntry] = (),
                since: float | None = None) -> tuple[list[HostEvent], list[str]]:
    """The one list of a host's events, oldest first from ``since`` on, and notes on what was left out.

    ``sessions``: the run directories (launched, exited, OOM-killed, acknowledged); ``classes``: session id ->
    its log's classification (a failed one is also ``session_failed`` with its cause); ``snap``: the host's
    processes, for its proven orphans (``orphan``); ``seen``: what a live console saw itself
    (``HostView.events``: a session it saw fail is listed once, an orphan once); ``found``: more events the
    caller read (READY from the logs, the kernel's OOM kills); ``audit``: this machine's actions on the host
    (an acknowledgement the run directory records is not listed again); ``others``: other consoles' kills, to
    name who ended a foreign server (:func:`name_other_killers`)."""
    sessions = list(sessions)
    by_id = {s.session_id: s for s in sessions}
    lists: list[list[HostEvent]] = [session_events(host, s) for s in sessions]
    failed = set()
    for sid, cls in (classes or {}).items():
        s = by_id.get(sid)
        ev = failure_event(host, s, cls) if s is not None else None
        if ev is not None:
            failed.add(sid)
            lists.append([ev])
    seen = list(seen)
    told = {e.pid for e in seen if e.kind == "orphan"}  # the console saw it become one: its own time is kept
    orphans = orphan_events(host, proven_orphans(snap), by_id, snap) if snap is not None else []
    mine = [e for e in seen if not (e.kind == "session_failed" and e.session_id in failed)]
    lists += [[e for e in orphans if e.pid not in told], name_other_killers(mine, others), list(found)]
    acked = {s.session_id for s in sessions if s.acknowledged_at is not None}
    entries = [a for a in audit if not (a.op == "ack" and (a.args or {}).get("session_id") in acked)]
    lists.append(audit_events(host, entries))
    notes: list[str] = []
    kept: list[list[HostEvent]] = []
    for lst in lists:
        good = [e for e in lst if usable_time(e.at)]
        for e in lst:
            if not usable_time(e.at):
                where = f"session {e.session_id}" if e.session_id else f"pid {e.pid}" if e.pid else e.source
                notes.append(f"{where}: its {e.kind} event is left out: its time ({e.at!r}, from {e.source}) "
                             "is no usable time")
        kept.append(good)
    return merge(*kept, since=since), notes


def view_events(view: HostView, others: Iterable[AuditEntry] = ()) -> list[HostEvent]:
    """:func:`host_events` of what a live console has of one host (the TUI's ``v``): its snapshot's run
    directories and processes, its views' causes, and what it saw itself."""
    classes = {v.session_id: Classification(state="failed", cause=v.cause, line=v.line)
               for v in view.sessions if v.session_id and v.state == "failed" and v.cause and not v.broken}
    events, _notes = host_events(view.snapshot.name, view.snapshot.sessions, classes=classes, snap=view.snapshot,
                                 seen=view.events, others=others)
    return events


def merge(*lists: Iterable[HostEvent], since: float | None = None) -> list[HostEvent]:
    """One list, oldest first, from ``since`` on; the same (time, kind, session, pid) is kept once."""
    seen: set[tuple] = set()
    out = []
    for e in sorted((e for lst in lists for e in lst), key=lambda e: e.at):
        if since is not None and e.at < since:
            continue
        key = (round(e.at, 3), e.kind, e.session_id, e.pid, e.text)
        if key in seen:
            continue
        seen.add(key)
        out.append(e)
    return out


def parse_since(text: str, now: float) -> float:
    """``--since``: ``90s``, ``15m``, ``1h``, ``2d`` ago, or an ISO time; ValueError when neither."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text or "")
    if m:
        return now - float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    try:
        return _dt.datetime.fromisoformat(text.strip()).timestamp()
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"--since {text!r}: give a duration like 90s, 15m, 1h, 2d or an ISO time") from None


def _g(gpus: Iterable[int]) -> str:
    return ",".join(str(g) for g in gpus) or "N/A"
