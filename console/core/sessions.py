"""Deriving what the operator sees (SessionView) from a HostSnapshot: pure functions.

A managed session's state comes from its run directory (record, exit, stop request),
the process table, and its classified log. Servers started by hand are FOREIGN; sglang
workers of no live server are FOREIGN too, marked orphaned only when the orphan hunter proves it. A host whose sample is old makes
every view on it STALE, a disconnected host UNREACHABLE: a badge is green only when
verified now.
"""

from __future__ import annotations

import datetime as _dt
import os
import secrets
from typing import Iterable

from console.core.flags.argv import flag_text, resolve_cmdline
from console.model import DEFAULT_PORT, Classification, HostSnapshot, ServerProc, SessionInfo, SessionView

STALE_FACTOR = 3.0


def new_session_id(gpus: Iterable[int], now: float) -> str:
    """Sortable, readable, unique: ``20261129-201530-gpu0-7f3a``."""
    t = _dt.datetime.fromtimestamp(now).strftime("%Y%m%d-%H%M%S")
    g = "gpu" + "_".join(str(i) for i in gpus) if gpus else "cpu"
    return f"{t}-{g}-{secrets.token_hex(2)}"


def flag_value(argv: list[str], *names: str) -> str | None:
    """The value of a flag in a server's argv, read as its argparse reads it (abbreviations, aliases, ``=``).

    The one resolver (``console.core.flags.argv``) against the bundled SGLang schema; the
    launcher (``python -m sglang.launch_server``) is split off first.
    """
    return flag_text(resolve_cmdline([str(a) for a in argv]), *names)


def has_flag(argv: list[str], *names: str) -> bool:
    return any(a in names or a.split("=", 1)[0] in names for a in argv)


def flags_summary(argv: list[str]) -> str:
    """Key flags in one line, e.g. ``EAGLE 3/1/4 · mem 0.90 · run 48``."""
    parts = []
    algo = flag_value(argv, "--speculative-algorithm", "--speculative-algo")
    if algo:
        nums = [flag_value(argv, f) for f in ("--speculative-num-steps", "--speculative-eagle-topk",
                                               "--speculative-num-draft-tokens")]
        parts.append(algo + (" " + "/".join(n or "?" for n in nums) if any(nums) else ""))
    else:
        parts.append("no spec")
    mem = flag_value(argv, "--mem-fraction-static")
    if mem:
        parts.append(f"mem {mem}")
    run = flag_value(argv, "--max-running-requests")
    parts.append(f"run {run or (48 if algo else 'auto')}")
    tp = flag_value(argv, "--tp-size", "--tp")
    if tp and tp != "1":
        parts.append(f"tp {tp}")
    ctx = flag_value(argv, "--context-length")
    if ctx:
        parts.append(f"ctx {ctx}")
    if has_flag(argv, "--enable-hierarchical-cache", "--enable-hicache"):
        parts.append("hicache")
    return " · ".join(parts)


def server_port(argv: list[str]) -> int | None:
    v = flag_value(argv, "--port")
    try:
        return int(v) if v else (DEFAULT_PORT if argv else None)
    except ValueError:
        return None


def _gpus_of(procs: list[ServerProc]) -> list[int]:
    """The GPUs the host's GPU source attributes memory of ``procs`` to (never CUDA_VISIBLE_DEVICES alone:
    its indexes may be remapped, and a kill by GPU must hit what truly holds that GPU)."""
    gpus: set[int] = set()
    for p in procs:
        gpus.update(p.gpu_mem_mib)
    return sorted(gpus)


def session_state(s: SessionInfo, cls: Classification | None) -> str:
    """The badge of a managed session from its run dir, processes and log."""
    if s.exit is not None:
        if cls is not None and cls.state == "failed" and not s.exit.stopped_by_operator:
            return "failed"
        if s.exit.stopped_by_operator or (cls is not None and cls.state == "stopped"):
            return "stopped"  # the console's stop, or one from outside that the log shows (a drained SIGTERM)
        if s.exit.error or s.exit.signal or (s.exit.exit_code not in (0, None)):
            return "failed"
        return "stopped"
    if s.broken is not None:  # a run directory that cannot be trusted: shown with its reason, never used
        return "foreign" if s.untrusted else "failed"  # another user's is none of this console's sessions
    if s.record_stale is not None:
        return "stopped"  # ended (host rebooted / record stale): nothing it names is the session's
    if s.record is None:
        return "launching"
    if not s.server_alive:
        if not s.supervisor_alive:
            return "failed"  # both gone and no exit record: the supervisor itself was killed
        return "stopping" if s.stop_requested else "failed"
    if s.stop_requested:
        return "stopping"
    if cls is not None and cls.state == "failed":
        return "failed"
    if cls is not None and cls.state == "ready":
        return "ready"
    return "loading"


def derive_views(snap: HostSnapshot, classes: dict[str, Classification], now: float, *,
                 interval: float = 1.0, health: dict[str, bool] | None = None,
                 launching: dict[str, int] | None = None) -> list[SessionView]:
    """Every session (managed, foreign, orphan) on a host, as the operator should see it.

    ``health`` maps session id -> last /health verdict (a READY badge needs it True when
    given); ``launching`` maps session id -> steps confirmed so far by a launch in progress.
    """
    return _age_rule(snap, now, interval, _session_views(snap, classes, health, launching))


def _session_views(snap: HostSnapshot, classes: dict[str, Classification], health: dict[str, bool] | None,
                   launching: dict[str, int] | None) -> list[SessionView]:
    """:func:`derive_views` before the age of the sample and the connection are looked at."""
    if snap.sessions:  # the classifier is not imported before the first frame (tui.LATER_MODULES)
        from console.core.classify import apply_first_death
    health = health or {}
    launching = launching or {}
    by_session: dict[str, list[ServerProc]] = {}
    for p in snap.servers:
        if p.session_id:
            by_session.setdefault(p.session_id, []).append(p)
    views: list[SessionView] = []
    live_ids = set()
    for s in snap.sessions:
        procs = [p for p in by_session.get(s.session_id, []) if p.role != "supervisor"]
        spec = s.spec
        cls = apply_first_death(classes.get(s.session_id), s.first_abnormal_exit, s.exit)  # the first death decides
        state = session_state(s, cls)
        if state == "ready" and health.get(s.session_id) is False:
            state = "loading"
        if state == "loading" and spec and spec.group and spec.node_rank and health.get(s.session_id) is True:
            state = "ready"  # a group's rank >= 1 prints no ready line: SGLang's dummy health server answers instead
        step = None
        if s.session_id in launching and s.exit is None:
            state, step = "launching", launching[s.session_id]
        if s.exit is None and not s.untrusted:
            live_ids.add(s.session_id)
        argv = spec.argv if spec else []
        failed = state == "failed"
        cause = cls.cause if cls and failed else None
        if failed and cause is None and s.exit is not None:
            cause = "signal_killed" if s.exit.signal else "other"
        hint = cls.hint if cls and (failed or state == "stopped") else None  # stopped: who stopped it, if not us
        if failed and s.exit is None and s.record is not None and not s.supervisor_alive:
            cause = cause or "other"
            hint = ("the session's supervisor is gone without writing an exit record (killed on the "
                    "host?): the exit code is unknown; check for leftover processes")
        if s.untrusted:
            cause, hint = None, f"another user's run directory, not this console's session: {s.broken}"
        elif s.broken is not None:
            cause, hint = cause or "other", (f"broken run directory: {s.broken}; nothing of it is used "
                                             f"(remove it: mtpconsole sessions --host {snap.name} --prune {s.session_id})")
        elif s.record_stale is not None:
            hint = f"ended (host rebooted / record stale): {s.record_stale}"
        views.append(SessionView(
            host=snap.name, session_id=s.session_id, state=state,
            gpus=list(spec.gpus) if spec and spec.gpus else _gpus_of(procs),
            port=spec.port if spec and spec.port else server_port(argv),
            pids=sorted(p.pid for p in procs) or ([s.record.pid] if s.record and s.server_alive else []),
            launcher_pid=s.record.pid if s.record else None,
            launcher_start_ticks=s.record.start_ticks if s.record else None,
            argv=argv, flags_summary=flags_summary(argv[1:]) if argv else "",
            cause=cause, line=cls.line if cls and failed else None, hint=hint,
            metrics=cls.metrics if cls and state == "ready" else None, step=step,
            started_at=s.record.started_at if s.record else (spec.created_at if spec else None),
            ended_at=s.exit.ended_at if s.exit else None,
            log_path=os.path.join(s.run_dir, "output.log"),
            replaces=spec.replaces if spec else None,
            group=spec.group if spec else None, node_rank=spec.node_rank if spec else None,
            nnodes=spec.nnodes if spec else None,
            acknowledged=s.acknowledged_at is not None and state in ("failed", "stopped"),
            acknowledged_at=s.acknowledged_at, broken=s.broken,
            stopped_by="an operator" if state == "stopped" and s.exit and s.exit.stopped_by_operator else None))
    # foreign launchers and orphaned workers
    procs_by_pid = {p.pid: p for p in snap.servers}
    foreign = [p for p in snap.servers if not p.session_id and p.role == "launcher" and p.alive]
    claimed: set[int] = set()
    for p in foreign:
        kids = [c for c in snap.servers if _descends(c, p.pid, procs_by_pid)]
        claimed.update(c.pid for c in kids)
        claimed.add(p.pid)
        members = [p] + kids
        views.append(SessionView(
            host=snap.name, session_id=None, state="foreign", gpus=_gpus_of(members),
            port=server_port(p.argv), pids=sorted(m.pid for m in members), launcher_pid=p.pid,
            launcher_start_ticks=p.start_ticks, argv=p.argv, flags_summary=flags_summary(p.argv),
            process_started_at=p.started_at))
    verdicts = _worker_verdicts(snap, live_ids)
    for p in snap.servers:
        if p.role != "worker" or p.pid in claimed or not p.alive or (p.session_id and p.session_id in live_ids):
            continue
        orphan, why = verdicts.get(p.pid, (False, None))
        if why is None:
            continue  # claimed by a live server after all (its recorded group, a live launcher above a wrapper)
        views.append(SessionView(
            host=snap.name, session_id=None, state="foreign", gpus=sorted(p.gpu_mem_mib), pids=[p.pid],
            launcher_pid=p.pid, launcher_start_ticks=p.start_ticks, argv=p.argv, process_started_at=p.started_at,
            flags_summary=("orphaned worker" if orphan else "server worker")
            + (f" of session {p.session_id}" if p.session_id else ""),
            hint=(f"orphan: {why}; kill it by pid (o)" if orphan else f"not proven an orphan: {why}")))
    return views


def _age_rule(snap: HostSnapshot, now: float, interval: float, views: list[SessionView]) -> list[SessionView]:
    """A disconnected host's views read UNREACHABLE, an old sample's STALE (ended ones keep their state)."""
    age = snap.age_s(now)
    if snap.connection.state not in ("connected", "stale"):
        views = [v.model_copy(update={"state": "unreachable"}) if v.state not in ("stopped", "failed") else v
                 for v in views]
    elif snap.connection.state == "stale" or age is None or age > STALE_FACTOR * max(interval, 0.5):
        views = [v.model_copy(update={"state": "stale"}) if v.state not in ("stopped", "failed") else v
                 for v in views]
    return views


def process_inputs(snap: HostSnapshot) -> tuple:
    """What a snapshot says of the host's processes: its servers, sessions, other sessions, relatives and each
    GPU's process list (with the host, its agent's uid and its GPU source). Two snapshots with equal inputs give
    the same views and the same orphan verdicts; the items are the link's models (an unchanged one is the very
    object of the last sample: it compares at once, a new one by value)."""
    return (snap.name, snap.agent_uid, snap.gpu_source, tuple(snap.servers), tuple(snap.sessions),
            tuple(snap.other_sessions), tuple(snap.relatives), tuple((g.index, tuple(g.procs)) for g in snap.gpus))


class ViewMemo:
    """:func:`derive_views` for one host, derived again only when what it reads changed: the snapshot's servers,
    sessions, other sessions and relatives (the link keeps an unchanged item's model: one comparison), the GPUs'
    process lists, and the classification, /health verdict and launch step of each session. A host nobody looks at
    and whose processes did not change costs a comparison per tick; the age rule (STALE, UNREACHABLE) is applied
    every time, so a view is never older than its snapshot says."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._views: list[SessionView] = []
        self.derived = 0
        """How many times the views were derived (not reused)."""

    def views(self, snap: HostSnapshot, classes: dict[str, Classification], now: float, *, interval: float = 1.0,
              health: dict[str, bool] | None = None, launching: dict[str, int] | None = None) -> list[SessionView]:
        """What :func:`derive_views` returns for these arguments."""
        health, launching = health or {}, launching or {}
        sids = [x.session_id for x in snap.sessions]
        key = (process_inputs(snap), tuple((classes.get(sid), health.get(sid), launching.get(sid)) for sid in sids))
        if key != self._key:
            self._views = _session_views(snap, classes, health, launching)
            self.derived += 1
        self._key = key  # equal or not: the next sample's unchanged items are these very objects (compared at once)
        return _age_rule(snap, now, interval, self._views)


def _worker_verdicts(snap: HostSnapshot, live_ids: set[str]) -> dict[int, tuple[bool, str]]:
    """pid -> (proven orphan, the first reason) for the unclaimed processes the orphan hunter judges."""
    from console.core.orphans import hunt_snapshot

    rep = hunt_snapshot(snap, live_ids=live_ids)
    out = {f.pid: (False, f.why) for f in rep.foreign}
    out.update({o.pid: (True, o.evidence[0] if o.evidence else "proven orphan") for o in rep.orphans})
    return out


def _descends(p: ServerProc, ancestor: int, by_pid: dict[int, ServerProc]) -> bool:
    seen = 0
    cur: ServerProc | None = p
    while cur is not None and seen < 64:
        if cur.ppid == ancestor:
            return True
        cur = by_pid.get(cur.ppid)
        seen += 1
    return False
