"""The orphan hunter: processes that hold GPU memory or look like server workers but belong
to no live server, each with the evidence why it is suspected. Pure functions over a
:class:`HostSnapshot`; no I/O, no UI.

A process is *claimed* (not an orphan) when it belongs to a live server: a live managed
session (its ``MTPCONSOLE_SESSION``, its recorded process group, or a descendant of its
supervisor, which the agent folds into ``session_id``), or the process tree of a live
launcher. Everything else that looks like a server worker (``sglang::…``, ``sgl_diffusion::…``,
``VLLM::EngineCore``, ``VLLM::Worker_TP0``, a multiprocessing child of a launcher) or that
holds GPU memory while adopted by init or a subreaper, or while carrying the id of an ended
session, is a suspect. The evidence says which facts point to it (its session ended, its
launcher is gone, its parent is init or a subreaper, its process group or session has no
live server, the GPU memory it holds, the port it holds) so an operator never kills by name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import Field

from console.model import Frozen, HostSnapshot, ServerProc, SessionInfo

WORKER_TITLE = re.compile(r"^(sglang::|sgl_diffusion::|VLLM::)")
"""Titles of server worker processes (set by the frameworks with setproctitle)."""


class Orphan(Frozen):
    """A suspected orphan: a process of no live server, identified by (pid, start_ticks)."""

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
    """Why it is suspected, one fact per entry."""

    @property
    def gpus(self) -> list[int]:
        return sorted(self.gpu_mem_mib)

    @property
    def held_mib(self) -> int:
        return sum(self.gpu_mem_mib.values())


def live_sessions(snap: HostSnapshot) -> list[SessionInfo]:
    """Sessions whose server (or supervisor) may still run: not ended, and not both gone."""
    out = []
    for s in snap.sessions:
        if s.exit is not None:
            continue
        if s.record is not None and not (s.server_alive or s.supervisor_alive):
            continue
        out.append(s)
    return out


def _tree(servers: Iterable[ServerProc], roots: set[int]) -> set[int]:
    """Pids of ``roots`` and every descendant of them among ``servers`` (bounded walk)."""
    by_pid = {p.pid: p for p in servers}
    out = set()
    for p in by_pid.values():
        cur: ServerProc | None = p
        for _ in range(64):
            if cur is None:
                break
            if cur.pid in roots:
                out.add(p.pid)
                break
            cur = by_pid.get(cur.ppid)
    return out


def looks_like_worker(p: ServerProc) -> bool:
    """A server worker by its title or the agent's classification (never a launcher or supervisor)."""
    return p.role == "worker" or bool(p.argv and WORKER_TITLE.match(p.argv[0]))


def find_orphans(snap: HostSnapshot, *, port_owners: dict[int, int] | None = None,
                 live_ids: Iterable[str] = ()) -> list[Orphan]:
    """Every suspected orphan on the host, with its evidence (see the module docstring).

    ``port_owners`` maps a port -> the pid listening on it, for the ports of ended sessions
    (the agent's ``port_owner`` op); a suspect holding one is said to. ``live_ids``: more
    session ids known to be live (a console's views), beyond the snapshot's run directories.
    """
    port_owners = port_owners or {}
    held_ports = {pid: port for port, pid in port_owners.items() if pid}
    sessions = {s.session_id: s for s in snap.sessions}
    live = live_sessions(snap)
    live_ids = {s.session_id for s in live} | set(live_ids)
    live_pgids = {s.record.pgid for s in live if s.record}
    supervisors = {s.record.supervisor_pid: s.session_id for s in snap.sessions if s.record}
    by_pid = {p.pid: p for p in snap.servers}
    launchers = {p.pid for p in snap.servers if p.role == "launcher" and p.alive
                 and (p.session_id is None or p.session_id in live_ids)}
    claimed = _tree(snap.servers, launchers)
    live_pgids |= {by_pid[x].pgid for x in launchers}
    live_sids = {by_pid[x].sid for x in launchers if by_pid[x].sid is not None}
    out = []
    for p in snap.servers:
        if not p.alive or p.role == "supervisor" or p.pid in claimed:
            continue
        if p.session_id in live_ids or p.pgid in live_pgids:
            continue
        worker = looks_like_worker(p)
        ev: list[str] = []
        ended = sessions.get(p.session_id) if p.session_id else None
        if p.session_id:
            if ended is None:
                ev.append(f"carries session {p.session_id}, which has no run directory on this host")
            elif ended.exit is not None:
                how = ("stopped by an operator" if ended.exit.stopped_by_operator else
                       f"signal {ended.exit.signal}" if ended.exit.signal else f"exit code {ended.exit.exit_code}")
                ev.append(f"its session {p.session_id} ended ({how}) at {ended.exit.ended_at:.0f}")
            else:
                ev.append(f"its session {p.session_id} has no live server or supervisor")
        if p.ppid == 1:
            ev.append("its parent is init (pid 1): the process that started it is gone")
        elif p.ppid in supervisors:
            ev.append(f"adopted by the supervisor (subreaper) of ended session {supervisors[p.ppid]}")
        else:
            parent = by_pid.get(p.ppid)
            if parent is None:
                ev.append(f"its parent pid {p.ppid} is no server launcher (a subreaper or an unrelated process)")
            elif parent.role != "launcher" and not looks_like_worker(parent):
                ev.append(f"its parent pid {p.ppid} ({parent.title[:40]}) is no server launcher")
        if p.pgid not in live_pgids:
            leader = by_pid.get(p.pgid)
            ev.append(f"its process group {p.pgid} has no live server"
                      + ("" if leader is not None and leader.alive else " (the group leader is gone)"))
        if p.sid is not None and p.sid not in live_sids and p.sid != p.pid:
            ev.append(f"its session (setsid) {p.sid} holds no live launcher")
        if p.gpu_mem_mib:
            ev.append("holds " + ", ".join(f"{m:,} MiB on GPU {i}" for i, m in sorted(p.gpu_mem_mib.items()))
                      + " (NVML)")
        if p.pid in held_ports:
            ev.append(f"listens on port {held_ports[p.pid]}, the port of an ended session")
        adopted = p.ppid == 1 or p.ppid in supervisors  # a parent outside the server list proves nothing
        if not (worker or (p.gpu_mem_mib and (adopted or ended is not None or p.session_id))
                or p.pid in held_ports):
            continue  # a GPU user with a live parent (a training job, a notebook): not ours to judge
        if worker:
            ev.insert(0, f"titled like a server worker: {p.title[:60]}")
        out.append(Orphan(host=snap.name, pid=p.pid, start_ticks=p.start_ticks, ppid=p.ppid, pgid=p.pgid, sid=p.sid,
                          user=p.user, title=p.title, framework=p.framework, role=p.role, session_id=p.session_id,
                          gpu_mem_mib=dict(p.gpu_mem_mib), port=held_ports.get(p.pid), evidence=ev))
    listed = {p.pid for p in snap.servers}
    for g in snap.gpus:  # memory the driver attributes to a pid that /proc does not show
        for gp in g.procs:
            if gp.pid not in listed and gp.used_mib:
                out.append(Orphan(host=snap.name, pid=gp.pid, start_ticks=0, ppid=0, pgid=0, title=gp.name or "",
                                  gpu_mem_mib={g.index: gp.used_mib},
                                  evidence=[f"holds {gp.used_mib:,} MiB on GPU {g.index} (NVML)",
                                            ("not visible in this host's /proc (another container or pid "
                                             "namespace): it cannot be killed from here")]))
                listed.add(gp.pid)
    return sorted(out, key=lambda o: (-o.held_mib, o.pid))


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
