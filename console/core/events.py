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

Pure functions: the caller reads the sources (the CLI through the agent, the UI from its
views) and merges them with :func:`merge`. No I/O, no UI.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Iterable

from console.model import AuditEntry, HostEvent, HostSnapshot, SessionInfo

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
    except ValueError:
        raise ValueError(f"--since {text!r}: give a duration like 90s, 15m, 1h, 2d or an ISO time") from None


def _g(gpus: Iterable[int]) -> str:
    return ",".join(str(g) for g in gpus) or "N/A"
