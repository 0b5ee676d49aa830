"""The orphan hunter: processes of no live server that hold GPU memory or look like server workers, each
with the evidence that proves it. Pure functions over a :class:`HostSnapshot`; no I/O, no UI.

An orphan may be killed, so every verdict rests on **positive evidence**; a recogniser that fails to
match (a wrapper script, a router, another runs directory, another user) proves nothing. A process is

* **claimed** (not listed) when it belongs to a live server: a live session of any runs directory (its
  ``MTPCONSOLE_SESSION``, its recorded process group) or a descendant of a live launcher or of a live
  mtpconsole supervisor (which kills its session's leftovers itself);
* an **orphan** only when one of these holds, for a process of this console's user:
  (a) it carries a session whose run directory is found (ours, or another console's through
  ``MTPCONSOLE_RUN_DIR`` or the user's list of runs directories), owned by the process's user, and that
  session has ended; and its parent is pid 1, an adopter, or a leftover of that session too (only that
  session's processes carry its mark);
  (b) it is a server process (titled ``sglang::…``/``VLLM::…`` by its framework, or carrying a session id)
  whose original parent is proven dead, and no live process-group leader may have started it. Proof of the
  death is one of: the agent saw its parent die (its ppid changed: only adoption changes it); its parent is pid 1 or the
  user's service manager and that is a known init, or its session (setsid) is neither its own nor its
  parent's (a child inherits its parent's session, so its parent is not who started it);
* **foreign** otherwise when it is worth naming (a server-shaped process, a GPU memory holder): with its
  owner and the reason it is not this console's to kill (another user, a live parent that started it, a
  session found nowhere, pid 1 that may be its parent, not visible in /proc). ``orphans --kill`` refuses it.

Every evidence line is a fact of the snapshot it was derived from; a kill re-derives the verdict from a
fresh snapshot (:func:`recheck`) before it signals anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import Field

from console.core.text import gpu_source_name
from console.model import Frozen, HostSnapshot, ProcRef, ServerProc, SessionInfo

WORKER_TITLE = re.compile(r"^(sglang::|sgl_diffusion::|VLLM::)")
"""Titles of server worker processes (set by the frameworks with setproctitle)."""

KNOWN_INIT = re.compile(r"(^|/)(systemd|init|tini|dumb-init|docker-init|catatonit|s6-svscan|runit|openrc-init|"
                        r"containerd-shim[\w-]*|conmon|launchd)(\s|$)")
"""Titles of pid 1 (or of a subreaper) that only adopt: they never start a server's workers themselves."""

USER_SUBREAPER = re.compile(r"(^|/)systemd\s+--user(\s|$)")
"""A user's service manager, a subreaper: the processes it adopts were started by someone else."""

MAX_DEPTH = 64


class Orphan(Frozen):
    """A proven orphan: a process of no live server, identified by (pid, start_ticks)."""

    host: str
    pid: int
    start_ticks: int
    ppid: int
    pgid: int
    sid: int | None = None
    user: str | None = None
    title: str = ""
    framework: str = "unknown"
    role: str = "other"
    session_id: str | None = None
    """The (ended) session it carries in its environment, if any."""
    gpu_mem_mib: dict[int, int] = Field(default_factory=dict)
    """GPU index -> MiB the driver attributes to it: what a kill frees."""
    port: int | None = None
    """A port it holds (listening), when known."""
    evidence: list[str] = Field(default_factory=list)
    """Why it is an orphan, one fact per entry (each true of the snapshot it came from)."""

    @property
    def gpus(self) -> list[int]:
        return sorted(self.gpu_mem_mib)

    @property
    def held_mib(self) -> int:
        return sum(self.gpu_mem_mib.values())


class Foreign(Frozen):
    """A server-shaped process or GPU memory holder that belongs to no live session of this console but is
    not proven an orphan: listed with its owner and why the orphan hunter will not kill it."""

    host: str
    pid: int
    start_ticks: int = 0
    ppid: int = 0
    pgid: int = 0
    user: str | None = None
    uid: int | None = None
    title: str = ""
    framework: str = "unknown"
    role: str = "other"
    session_id: str | None = None
    gpu_mem_mib: dict[int, int] = Field(default_factory=dict)
    why: str
    """Why it is not killable as an orphan (one sentence naming the fact)."""
    evidence: list[str] = Field(default_factory=list)
    """The other facts seen (what it holds, its session, its parent)."""


class OrphanReport(Frozen):
    """The hunter's answer for one host: proven orphans, and what it will not judge."""

    host: str
    orphans: list[Orphan] = Field(default_factory=list)
    foreign: list[Foreign] = Field(default_factory=list)


def live_sessions(snap: HostSnapshot) -> list[SessionInfo]:
    """Sessions (of any runs directory) whose server or supervisor may still run."""
    return [s for s in (*snap.sessions, *snap.other_sessions) if not session_ended(s)]


def session_ended(s: SessionInfo) -> bool:
    """Positively over: an exit record, or a record whose server and supervisor are both confirmed gone."""
    return s.exit is not None or (s.record is not None and not (s.server_alive or s.supervisor_alive))


def looks_like_worker(p: ServerProc) -> bool:
    """A server worker by its title or the agent's classification (never a launcher or supervisor)."""
    return p.role == "worker" or bool(p.argv and WORKER_TITLE.match(p.argv[0]))


def _how_ended(s: SessionInfo) -> str:
    if s.exit is None:
        return "its server and supervisor are confirmed gone"
    e = s.exit
    how = ("stopped by an operator" if e.stopped_by_operator else
           f"signal {e.signal}" if e.signal else f"exit code {e.exit_code}")
    return f"{how} at {e.ended_at:.0f}"


@dataclass
class _Host:
    """What every verdict on one snapshot shares (built once per hunt)."""

    snap: HostSnapshot
    live_ids: set[str]
    live_pgids: set[int]
    procs: dict[int, ServerProc | ProcRef]
    sessions: dict[str, SessionInfo]
    supervisors: dict[int, SessionInfo]
    claimed: set[int]

    @classmethod
    def of(cls, snap: HostSnapshot, live_ids: Iterable[str]) -> _Host:
        live = live_sessions(snap)
        ids = {s.session_id for s in live} | set(live_ids)
        procs: dict[int, ServerProc | ProcRef] = {r.pid: r for r in snap.relatives}
        procs.update({p.pid: p for p in snap.servers})
        sessions = {s.session_id: s for s in snap.other_sessions}
        sessions.update({s.session_id: s for s in snap.sessions})
        supervisors = {s.record.supervisor_pid: s for s in sessions.values()
                       if s.record is not None and s.supervisor_alive and not s.record_stale}
        pgids = {s.record.pgid for s in live if s.record and s.server_alive}
        h = cls(snap, ids, pgids, procs, sessions, supervisors, set())
        launchers = {p.pid for p in snap.servers if p.role == "launcher" and p.alive
                     and (p.session_id is None or p.session_id in ids)}
        # a live supervisor above a process is still managing it (it kills its session's leftovers itself)
        launchers |= {q.pid for q in procs.values() if q.role == "supervisor" and q.alive}
        h.claimed = {p.pid for p in snap.servers if h.under(p, launchers)}
        return h

    def under(self, p: ServerProc, roots: set[int]) -> bool:
        """``p`` is one of ``roots`` or descends from one (through any process, recognised or not)."""
        cur: ServerProc | ProcRef | None = p
        for _ in range(MAX_DEPTH):
            if cur is None:
                return False
            if cur.pid in roots:
                return True
            cur = self.procs.get(cur.ppid) if cur.ppid > 0 else None
        return False

    def is_claimed(self, p: ServerProc) -> bool:
        return (p.pid in self.claimed or (p.session_id is not None and p.session_id in self.live_ids)
                or p.pgid in self.live_pgids)

    def leftover_of(self, q: ServerProc | ProcRef | None, session_id: str | None) -> bool:
        """``q`` is a process of the same (ended) session: a leftover too, not someone else's parent."""
        return (session_id is not None and isinstance(q, ServerProc) and q.session_id == session_id)


def _adopted(h: _Host, p: ServerProc) -> tuple[str | None, str | None]:
    """(proof that ``p``'s original parent is gone, else None; why not, when its parent tells something)."""
    gone = p.reparented_from
    if gone is not None:
        return (f"its parent pid {gone.pid} ({gone.title[:50] or '?'}) died while the agent watched; "
                f"pid {p.ppid} adopted it"), None
    parent = h.procs.get(p.ppid)
    if parent is None:
        return None, f"its parent pid {p.ppid} could not be read: nothing proves who started it"
    title = parent.title
    if p.ppid == 1 or USER_SUBREAPER.search(title):
        who = "init (pid 1)" if p.ppid == 1 else f"the user's service manager (pid {p.ppid})"
        if KNOWN_INIT.search(title) or USER_SUBREAPER.search(title):
            return f"its parent is {who}, {title[:40]!r}, which only adopts: the process that started it is gone", None
        if p.sid is not None and p.sid != p.pid and p.sid != parent.sid:
            return (f"its parent is {who} but its session (setsid) {p.sid} is neither its own nor its parent's "
                    "(a child inherits its parent's): it was adopted, the process that started it is gone"), None
        return None, (f"its parent is pid {p.ppid} ({title[:60]}), which may be the process that started it "
                      "(no init, and it shares its parent's session)")
    return None, f"its parent pid {p.ppid} ({title[:60]}) is alive: it started this process"


def _judge(h: _Host, p: ServerProc, held_ports: dict[int, int]) -> Orphan | Foreign | None:
    """The verdict on one unclaimed process: an orphan, foreign (with why), or None (not worth naming)."""
    snap = h.snap
    worker = looks_like_worker(p)
    shaped = worker or p.session_id is not None or p.role == "launcher"
    if not (shaped or p.gpu_mem_mib or p.pid in held_ports):
        return None
    facts: list[str] = []
    if worker:
        facts.append(f"titled like a server worker: {p.title[:60]}")
    if p.gpu_mem_mib:
        facts.append("holds " + ", ".join(f"{m:,} MiB on GPU {i}" for i, m in sorted(p.gpu_mem_mib.items()))
                     + f" ({gpu_source_name(snap.gpu_source)})")
    if p.pid in held_ports:
        facts.append(f"listens on port {held_ports[p.pid]}, the port of an ended session")

    def foreign(why: str) -> Foreign:
        return Foreign(host=snap.name, pid=p.pid, start_ticks=p.start_ticks, ppid=p.ppid, pgid=p.pgid, user=p.user,
                       uid=p.uid, title=p.title, framework=p.framework, role=p.role, session_id=p.session_id,
                       gpu_mem_mib=dict(p.gpu_mem_mib), why=why, evidence=facts)

    if p.uid is None or snap.agent_uid is None:
        return foreign("its owner (or this console's user) could not be read: nothing proves it is ours")
    if p.uid != snap.agent_uid:
        return foreign(f"owned by {p.user or 'uid'} (uid {p.uid}), not by this console's user (uid {snap.agent_uid})")
    proof: list[str] = []
    s = h.sessions.get(p.session_id) if p.session_id else None
    if p.session_id and s is None:
        facts.append(f"carries session {p.session_id}, whose run directory is found in no known runs directory "
                     "(which proves nothing)")
    elif s is not None:
        if s.owner_uid is not None and s.owner_uid != p.uid:
            return foreign(f"its session {s.session_id}'s run directory {s.run_dir} is owned by uid {s.owner_uid}, "
                           f"not by the process's user (uid {p.uid})")
        if s.owner_uid is not None and session_ended(s):
            proof.append(f"its session {s.session_id} ended ({_how_ended(s)}; run directory {s.run_dir})")
    parent = h.procs.get(p.ppid)
    adopted, not_adopted = _adopted(h, p)
    leader = h.procs.get(p.pgid) if p.pgid != p.pid else None
    if leader is not None and leader.alive and not h.leftover_of(leader, p.session_id) and p.pgid != p.ppid:
        if not (leader.pid == 1 or h.supervisors.get(leader.pid)):
            return foreign(f"its process group leader pid {leader.pid} ({leader.title[:60]}) is alive "
                           "and may have started it")
    if proof and (adopted or h.leftover_of(parent, p.session_id) or p.ppid == 1):
        ev = proof + ([adopted] if adopted else
                      [f"its parent pid {p.ppid} is a leftover of that session too" if p.ppid != 1 else
                       "its parent is pid 1: only that session's processes carry its mark, so pid 1 adopted it"])
    elif adopted and (worker or p.session_id is not None):
        ev = proof + [adopted]
        if p.pgid != p.pid:
            ev.append(f"its process group {p.pgid} has no live leader")
    elif not_adopted:
        return foreign(not_adopted)
    else:
        return foreign("a GPU user that is not a server process: not the orphan hunter's to judge")
    return Orphan(host=snap.name, pid=p.pid, start_ticks=p.start_ticks, ppid=p.ppid, pgid=p.pgid, sid=p.sid,
                  user=p.user, title=p.title, framework=p.framework, role=p.role, session_id=p.session_id,
                  gpu_mem_mib=dict(p.gpu_mem_mib), port=held_ports.get(p.pid), evidence=ev + facts)


def hunt_snapshot(snap: HostSnapshot, *, port_owners: dict[int, int] | None = None,
                  live_ids: Iterable[str] = ()) -> OrphanReport:
    """Every proven orphan and every foreign suspect on the host (see the module docstring).

    ``port_owners`` maps a port -> the pid listening on it, for the ports of ended sessions (the agent's
    ``port_owner`` op). ``live_ids``: more session ids known to be live (a console's views)."""
    held_ports = {pid: port for port, pid in (port_owners or {}).items() if pid}
    h = _Host.of(snap, live_ids)
    orphans: list[Orphan] = []
    foreign: list[Foreign] = []
    for p in snap.servers:
        if not p.alive or p.role == "supervisor" or h.is_claimed(p):
            continue
        v = _judge(h, p, held_ports)
        if isinstance(v, Orphan):
            orphans.append(v)
        elif isinstance(v, Foreign):
            foreign.append(v)
    listed = {p.pid for p in snap.servers}
    for g in snap.gpus:  # memory the driver attributes to a pid that /proc does not show
        for gp in g.procs:
            if gp.pid not in listed and gp.used_mib:
                foreign.append(Foreign(host=snap.name, pid=gp.pid, title=gp.name or "", gpu_mem_mib={g.index: gp.used_mib},
                                       why=("not visible in this host's /proc (another container or pid namespace): "
                                            "it cannot be judged or killed from here"),
                                       evidence=[f"holds {gp.used_mib:,} MiB on GPU {g.index} "
                                                 f"({gpu_source_name(snap.gpu_source)})"]))
                listed.add(gp.pid)
    return OrphanReport(host=snap.name, orphans=sorted(orphans, key=lambda o: (-o.held_mib, o.pid)),
                        foreign=sorted(foreign, key=lambda f: (-sum(f.gpu_mem_mib.values()), f.pid)))


def find_orphans(snap: HostSnapshot, *, port_owners: dict[int, int] | None = None,
                 live_ids: Iterable[str] = ()) -> list[Orphan]:
    """The proven orphans of :func:`hunt_snapshot`."""
    return hunt_snapshot(snap, port_owners=port_owners, live_ids=live_ids).orphans


def recheck(snap: HostSnapshot, pid: int, start_ticks: int | None) -> tuple[Orphan | None, str]:
    """Is (pid, start time) still a proven orphan in ``snap``? (the orphan, "") or (None, why not)."""
    rep = hunt_snapshot(snap)
    o = next((x for x in rep.orphans if x.pid == pid), None)
    if o is not None and (start_ticks is None or o.start_ticks == start_ticks):
        return o, ""
    f = next((x for x in rep.foreign if x.pid == pid), None)
    if f is not None and (start_ticks is None or f.start_ticks in (0, start_ticks)):
        return None, f"pid {pid} is not proven an orphan: {f.why}"
    p = next((x for x in snap.servers if x.pid == pid), None)
    if p is None or (start_ticks is not None and p.start_ticks != start_ticks):
        return None, f"pid {pid} is gone or is no longer the process listed"
    return None, f"pid {pid} belongs to a live server now"


def ended_ports(snap: HostSnapshot) -> list[int]:
    """Ports of ended sessions (spec), to ask who still listens on them."""
    live = {s.session_id for s in live_sessions(snap)}
    return sorted({s.spec.port for s in snap.sessions
                   if s.session_id not in live and s.spec is not None and s.spec.port})


def orphans_on(orphans: Iterable[Orphan], gpus: Iterable[int]) -> list[Orphan]:
    """The orphans that hold memory on any of ``gpus``."""
    want = set(gpus)
    return [o for o in orphans if want.intersection(o.gpu_mem_mib)]


def describe(o: Orphan) -> str:
    """One line naming an orphan for a preflight or a dialog: pid, title, what it holds."""
    held = ", ".join(f"{m:,} MiB on GPU {i}" for i, m in sorted(o.gpu_mem_mib.items()))
    return (f"orphan pid {o.pid} ({o.title[:40] or '?'})" + (f" holding {held}" if held else "")
            + (f", port {o.port}" if o.port else ""))
