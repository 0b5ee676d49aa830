"""A kill: SIGTERM to the recorded process group, a grace period, SIGKILL, then confirmed gone.

Confirmed when no process of the group or session remains, no sglang worker of it survives, the driver no
longer lists the pids and GPU memory is back near its baseline, and the port is closed. Its steps carry the
``kill`` phase (a relaunch shows them before its launch's).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from console.core.sessions import server_port, session_state
from console.link.client import HostClient
from console.link.errors import LinkDown, NoSuchProcess, RequestError
from console.link.link import HostLink
from console.model import HostSnapshot, KillTarget, OperationResult, ServerProc, SessionInfo, SessionState
from console.ops.lifecycle.steps import Check, OnSteps, Skip, Stepper, fresh_snapshot, record_result, wait_for

KILL_STEPS = ["target", "SIGTERM", "exited", "no orphans", "GPU released", "port closed"]
NOT_RECORDED = "the stop request could not be recorded on disk"
"""Said by a kill whose ``stop-request.json`` could not be written (a full disk): the session was stopped all the
same, and its supervisor, told by signal, records it as stopped by an operator."""
GPU_RELEASE_TOLERANCE_MIB = 1024


@dataclass
class _Target:
    """What a kill signals and then confirms gone, resolved on a fresh snapshot."""

    pid: int | None
    start: int | None
    pgid: int | None = None
    port: int | None = None
    gpus: list[int] = field(default_factory=list)
    members: list[ServerProc] = field(default_factory=list)
    baseline: dict[int, int] = field(default_factory=dict)
    """GPU index -> its memory use without the members' (what it should come back to)."""

    @property
    def ident(self) -> list[list[int]]:
        return [[m.pid, m.start_ticks] for m in self.members]


async def kill(link: HostLink, target: KillTarget, on_steps: OnSteps | None = None, *, grace: float = 20.0,
               release_timeout: float = 30.0) -> OperationResult:
    """SIGTERM the group, escalate after ``grace``, and confirm everything is gone (see module doc)."""
    return record_result(link, await _kill(link, target, on_steps, grace=grace, release_timeout=release_timeout))


async def _kill(link: HostLink, target: KillTarget, on_steps: OnSteps | None, *, grace: float,
                release_timeout: float) -> OperationResult:
    st = Stepper(KILL_STEPS, on_steps, phase="kill")
    res = dict(op="kill", host=link.name, session_id=target.session_id)
    st.start("target")
    ended = None
    try:
        snap = await fresh_snapshot(link)
        ended = await _already_ended(link, snap, target)
        t = await _resolve(link, snap, target) if ended is None else ""
    except (LinkDown, RequestError, asyncio.TimeoutError) as e:
        t = str(e) or type(e).__name__
    if ended is not None:  # nothing of it runs: a no-op that says so (a newer session may hold its port now)
        state, why = ended
        st.finish("target", "ok", why)
        st.skip_pending()
        return OperationResult(**res, ok=True, steps=st.steps, state=state)
    if isinstance(t, str):
        st.finish("target", "failed", t)
        return OperationResult(**res, ok=False, steps=st.steps, error=t)
    st.finish("target", "ok", f"pid {t.pid} (start {t.start})" + (f", group {t.pgid}" if t.pgid else "")
              + (f"; {len(t.members)} process(es): " + ", ".join(str(m.pid) for m in t.members) if t.members
                 else "; no process of it is running")
              + (f"; GPUs {','.join(map(str, t.gpus))}" if t.gpus else ""))
    k = _Kill(link, st, target, t)
    try:
        await k.signal_and_wait(grace)
        left = await k.confirm_gone(release_timeout)
    except (LinkDown, RequestError, asyncio.TimeoutError) as e:
        name = st.running() or "SIGTERM"
        st.finish(name, "failed", f"lost contact with the host: {e}")
        return OperationResult(**res, ok=False, steps=st.steps, error=str(e), state="stopping")
    ok = all(s.state in ("ok", "skipped") for s in st.steps if s.name != "exited")
    return OperationResult(**res, ok=ok, steps=st.steps, state="stopped" if ok else "stopping",
                           left=left, error=None if ok else "kill not confirmed: " + "; ".join(left),
                           hint=f"{NOT_RECORDED} ({k.stop_error})" if k.stop_error else None)


async def _resolve(link: HostLink, snap: HostSnapshot, target: KillTarget) -> _Target | str:
    """The target on ``snap``: its identity, group, port, members, GPUs and their baseline; or why nothing may
    be signalled."""
    t = await _session_target(link, snap, target) if target.session_id else _process_target(snap, target)
    if isinstance(t, str):
        return t
    t.port = t.port or target.port
    # a session whose server is not confirmed (pgid None) has only the members the agent attributes to it
    t.members = _members(snap, target.model_copy(
        update={"pid": None if target.session_id and t.pgid is None else t.pid}), t.pgid)
    gpus = set(t.gpus)
    for m in t.members:
        gpus.update(m.gpu_mem_mib)
    t.gpus = sorted(gpus)
    held = {g.index: sum(g2 for m in t.members for i, g2 in m.gpu_mem_mib.items() if i == g.index)
            for g in snap.gpus if g.index in t.gpus}
    t.baseline = {g.index: (g.mem_used_mib or 0) - held.get(g.index, 0) for g in snap.gpus if g.index in t.gpus}
    return t


async def _already_ended(link: HostLink, snap: HostSnapshot, target: KillTarget) -> tuple[SessionState, str] | None:
    """(its state, why nothing is signalled) when the target session has ended and nothing of it runs: its exit
    is recorded, its supervisor is gone and no live process carries it. None: there is something to kill."""
    sid = target.session_id
    if not sid:
        return None
    s = await find_session(link, snap, sid)
    if s is None or s.exit is None or s.supervisor_alive or s.server_alive:
        return None
    if any(p.alive and p.session_id == sid and p.role != "supervisor" for p in snap.servers):
        return None  # leftovers of it still run: they are killed
    state: SessionState = "failed" if session_state(s, None) == "failed" else "stopped"
    return state, f"session {sid} had already ended ({state.upper()}): nothing of it runs, nothing signalled"


async def _session_target(link: HostLink, snap: HostSnapshot, target: KillTarget) -> _Target | str:
    sid = target.session_id or ""
    s = await find_session(link, snap, sid)
    if s is None:
        return f"no session {sid} on {link.name}"
    if s.record is None or s.broken or s.record_stale:
        return (f"session {sid} is broken ({s.broken}): nothing signalled" if s.broken else
                f"session {sid} ended (host rebooted / record stale: {s.record_stale}): "
                "nothing signalled" if s.record_stale else
                f"session {sid} has no supervisor record (never started)")
    # the recorded group counts only while the server is confirmed as the session's: else only its members
    return _Target(pid=s.record.pid, start=s.record.start_ticks, pgid=s.record.pgid if s.server_alive else None,
                   port=s.spec.port if s.spec else None, gpus=list(s.spec.gpus) if s.spec else [])


def _process_target(snap: HostSnapshot, target: KillTarget) -> _Target | str:
    p = next((x for x in snap.servers if x.pid == target.pid), None)
    if p is None or (target.start_ticks is not None and p.start_ticks != target.start_ticks):
        return f"process {target.pid} is gone or is no longer the one targeted"
    if target.as_orphan:  # every evidence line must still be true now, on this fresh snapshot
        from console.core.orphans import recheck

        proven, why = recheck(snap, p.pid, p.start_ticks)
        if proven is None:
            return f"{why}: nothing signalled"
    return _Target(pid=target.pid, start=p.start_ticks, pgid=p.pgid if p.pgid == p.pid else None,
                   port=server_port(p.argv) if p.role == "launcher" else None)


class _Kill:
    """One kill under way, after its target step: the signals and the confirmations that all is gone."""

    def __init__(self, link: HostLink, st: Stepper, target: KillTarget, t: _Target):
        self.link, self.st, self.target, self.t = link, st, target, t
        self.client = HostClient.of(link)
        self.held: list[str] = []
        """What the last look at the GPUs found still held (pids listed, memory above baseline)."""
        self.stop_error: str | None = None
        """Why the agent could not record the stop request on disk (the signals went all the same)."""

    async def signal(self, sig: int) -> list[int]:
        """Signal the target (its group, its members that still are who they were); [] when already gone."""
        t = self.t
        try:
            r = await self.client.kill(start_ticks=t.start, signal=sig, pid=t.pid, pgid=t.pgid or None,
                                       session_id=self.target.session_id, pids=t.ident, audit=True)
        except NoSuchProcess:
            return []
        self.stop_error = self.stop_error or r.stop_request_error
        return r.signalled

    async def gone(self, name: str, timeout: float) -> list[list[int]]:
        """Wait up to ``timeout`` for every member to end; the ones still running."""
        remaining = list(self.t.ident)

        async def probe() -> str | None:
            out = []
            for pid, start in self.t.ident:
                p = await self.client.proc(pid)
                if p is not None and p.same(start):
                    out.append([pid, start])
            remaining[:] = out
            return "all gone" if not out else None
        await wait_for(Check(name, probe, timeout=timeout, poll=0.1))
        return remaining

    async def signal_and_wait(self, grace: float) -> None:
        """SIGTERM, the grace period, and SIGKILL for what outlived it."""
        st, n = self.st, len(self.t.ident)
        st.start("SIGTERM")
        done = list(dict.fromkeys(await self.signal(15)))  # a pid signalled as itself and as a member: named once
        st.finish("SIGTERM", "ok", "signalled " + (", ".join(f"group {-d}" if d < 0 else f"pid {d}" for d in done)
                                                  or "nothing: already gone") + (
            f"; {NOT_RECORDED} ({self.stop_error}): its supervisor was told by signal" if self.stop_error else ""))
        st.start("exited")
        remaining = await self.gone("exited", grace)
        if not remaining:
            st.finish("exited", "ok", f"all {n} process(es) exited" if n else "nothing of it was running")
            return
        st.add("SIGKILL")
        st.finish("exited", "failed", f"still running after {grace:.0f} s grace: "
                  + ", ".join(str(p) for p, _ in remaining))
        st.start("SIGKILL")
        await self.signal(9)
        remaining = await self.gone("SIGKILL", 10.0)
        st.finish("SIGKILL", "ok" if not remaining else "failed",
                  "all gone" if not remaining else "still alive: " + ", ".join(str(p) for p, _ in remaining))

    async def confirm_gone(self, release_timeout: float) -> list[str]:
        """No process of the target left, its GPU memory released, its port closed: what is left (one line each)."""
        st = self.st
        st.start("no orphans")
        snap = await self.settled()
        orphans = self.orphans(snap)
        left = [f"pid {p.pid} {p.title[:60]}" + (f" holding {sum(p.gpu_mem_mib.values())} MiB on GPU "
                                                  f"{','.join(map(str, p.gpu_mem_mib))}" if p.gpu_mem_mib else "")
                for p in orphans]
        st.finish("no orphans", "ok" if not orphans else "failed",
                  "no process of the target remains" if not orphans else "; ".join(left))
        if not await st.confirm(self.released_check(snap, release_timeout)):
            left.append("; ".join(self.held))
        port = self.t.port
        if not await st.confirm(self.port_check()):
            left.append(f"port {port} still open")
        return left

    async def settled(self) -> HostSnapshot:
        """A fresh snapshot; for a session, once its supervisor recorded the exit (it cleans up the group
        first), or after 10 s."""
        last = [await fresh_snapshot(self.link)]
        sid = self.target.session_id
        if not sid:
            return last[0]
        asked = [False]

        async def recorded() -> str | None:
            if asked[0]:
                last[0] = await fresh_snapshot(self.link)
            asked[0] = True
            done = any(x.session_id == sid and (x.exit or not x.supervisor_alive) for x in last[0].sessions)
            return "the supervisor recorded the exit" if done else None
        await wait_for(Check("no orphans", recorded, timeout=10.0, poll=0.1))
        return last[0]

    def orphans(self, snap: HostSnapshot) -> list[ServerProc]:
        """The target's processes still alive in ``snap``."""
        t, sid = self.t, self.target.session_id
        ident = {(pid, start) for pid, start in t.ident}
        return [p for p in snap.servers if p.alive and p.role != "supervisor" and (
            (p.pid, p.start_ticks) in ident or (sid and p.session_id == sid) or (t.pgid is not None and p.pgid == t.pgid))]

    def released_check(self, snap: HostSnapshot, timeout: float) -> Check:
        """GPU released: the driver lists none of the pids and each GPU's memory is back near its baseline."""
        t = self.t
        pids = {pid for pid, _ in t.ident}

        async def probe() -> str | None:
            if snap.gpu_source == "none" or not t.gpus:
                raise Skip("no GPU information" if snap.gpu_source == "none" else "the target held no GPU memory")
            s = await self.client.snapshot()
            listed, high = [], []
            for g in s.gpus:
                if g.index not in t.baseline:
                    continue
                listed += [f"pid {p.pid} on GPU {g.index}" for p in g.procs if p.pid in pids]
                used, base = g.mem_used_mib, t.baseline[g.index]
                if used is not None and used > base + GPU_RELEASE_TOLERANCE_MIB:
                    high.append(f"GPU {g.index} uses {used} MiB (baseline {base} MiB)")
            self.held = listed + high
            if self.held:
                return None
            return "driver lists none of the pids; memory back to baseline (" + ", ".join(
                f"GPU {i}: ≤{b + GPU_RELEASE_TOLERANCE_MIB} MiB" for i, b in t.baseline.items()) + ")"
        return Check("GPU released", probe, timeout=timeout, poll=0.25, failure=lambda: "; ".join(self.held))

    def port_check(self) -> Check:
        """Port closed: 127.0.0.1:port refuses connections (skipped when no port is known)."""
        port = self.t.port

        async def probe() -> str | None:
            if port is None:
                raise Skip("no port known")
            return None if await self.client.port_open(port) else f"127.0.0.1:{port} refuses connections"
        return Check("port closed", probe, timeout=10.0, poll=0.2,
                     failure=lambda: f"port {port} still accepts connections")


def _members(snap: HostSnapshot, target: KillTarget, pgid: int | None) -> list[ServerProc]:
    """Every process that belongs to the target: its session, its group, its descendants."""
    by_pid = {p.pid: p for p in snap.servers}
    roots = set()
    if target.pid:
        roots.add(target.pid)
    out = []
    for p in snap.servers:
        if p.role == "supervisor":
            continue
        if target.session_id and p.session_id == target.session_id:
            out.append(p)
        elif pgid is not None and p.pgid == pgid:
            out.append(p)
        elif p.pid in roots:
            out.append(p)
        else:
            cur: ServerProc | None = p
            n = 0
            while cur is not None and n < 64:
                if cur.ppid in roots:
                    out.append(p)
                    break
                cur, n = by_pid.get(cur.ppid), n + 1
    return out


async def find_session(link: HostLink, snap: HostSnapshot, session_id: str) -> SessionInfo | None:
    """The session ``session_id``: from the snapshot, else (an older ended one a sample no longer carries)
    from the agent's full list of run directories."""
    s = next((x for x in snap.sessions if x.session_id == session_id), None)
    if s is not None:
        return s
    return next((x for x in await HostClient.of(link).sessions() if x.session_id == session_id), None)
