"""Liveness that does not trust the head, and the failure policy.

After READY a :class:`GroupWatch` holds each member's baseline (its live processes, pid + start time, from
its own host's snapshot) and each member's exit watch (the agent pushes a session's end, pidfd). A member
whose server ended, or one of whose baseline processes is gone from its host's fresh snapshot, fails the
group at once, named by node, rank and cause — whatever rank 0's ``/health`` says (it is asked once and
recorded: SGLang's head keeps answering 200 while a rank is dead). A host whose link is down is no evidence
either way: it is reported, never acted on. Then (``kill_on_failure``, default on) every other member is
killed — SIGTERM, the grace, SIGKILL (a hung rank >= 1 ignores SIGTERM) — and each kill is confirmed on its
own host (processes gone, GPU memory back, port closed).
"""

from __future__ import annotations

import asyncio
import time

from console.core.group import GroupMember, GroupResult
from console.link.link import HostLink
from console.model import KillTarget, ServerProc
from console.ops.lifecycle import SessionWatch, kill
from console.ops.session_log import probe_health

POLL_S = 0.1
SPAWN_RACE_S = 5.0
"""A member whose launch was cancelled while its request was in flight may appear a moment later (or have its run
directory but no supervisor record yet): its kill looks again for this long before it says what it found."""
OWN_END_WAIT_S = 1.0
"""How long the failed member is given to end by itself before it is killed with the rest (its own end keeps its
cause: FAILED, not STOPPED)."""
GROUP_KILL_GRACE_S = 8.0
"""The failure policy's grace before SIGKILL: every member gone within 30 s of the failure, escalation included."""


def _alive(procs: list[ServerProc]) -> set[tuple[int, int]]:
    return {(p.pid, p.start_ticks) for p in procs if p.alive}


async def kill_members(links: list[HostLink], members: list[GroupMember], *, grace: float | None = None,
                       skip: set[int] | None = None) -> list[str]:
    """Kill every member (but the ranks in ``skip``) concurrently on its own host, each kill confirmed there;
    one line per member saying what its kill confirmed (or why it could not)."""
    by_name = {lk.name: lk for lk in links}
    todo = [m for m in members if m.rank not in (skip or set())]

    async def one(m: GroupMember) -> str:
        lk = by_name.get(m.host)
        if lk is None:
            return f"{m.host} (rank {m.rank}): not opened by this console: kill it there"
        deadline = time.monotonic() + SPAWN_RACE_S
        while True:
            try:
                r = await kill(lk, KillTarget(host=m.host, session_id=m.session_id),
                               grace=GROUP_KILL_GRACE_S if grace is None else grace)
            except Exception as e:  # a lost link: said, never assumed gone
                return f"{m.host} (rank {m.rank}): kill not confirmed: {e}"
            said = r.error or r.refused or ""
            unknown = not r.ok and f"no session {m.session_id}" in said
            spawning = not r.ok and "has no supervisor record" in said  # its run directory made, its record not yet
            if not (unknown or spawning) or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.5)  # a launch cancelled mid-request may still be spawning it: look again
        if unknown:
            return f"{m.host} (rank {m.rank}): no run directory of {m.session_id} there: nothing of it was started"
        done = "; ".join(s.evidence or s.name for s in r.steps if s.state == "ok" and s.evidence)[:400]
        if r.ok:
            return f"{m.host} (rank {m.rank}): stopped, confirmed: {done}"
        return f"{m.host} (rank {m.rank}): kill not confirmed: {r.error or r.refused or r.state}"

    return list(await asyncio.gather(*(one(m) for m in todo)))


class GroupWatch:
    """Guards a READY group (see module doc); :meth:`run` returns when the group failed or every member ended."""

    def __init__(self, links: list[HostLink], ready: GroupResult, *, kill_on_failure: bool = True,
                 kill_grace: float | None = None, until: float | None = None) -> None:
        self.links = {lk.name: lk for lk in links}
        self.ordered = links
        self.ready = ready
        self.kill_on_failure = kill_on_failure
        self.kill_grace = kill_grace
        self.until = until
        self.watches: dict[int, SessionWatch] = {}
        self.baseline: dict[int, set[tuple[int, int]]] = {}

    def _procs(self, m: GroupMember) -> list[ServerProc]:
        snap = self.links[m.host].snapshot()
        return [p for p in snap.servers if p.session_id == m.session_id and p.role != "supervisor"]

    def check(self) -> tuple[GroupMember, str] | None:
        """The first member proven gone, with the cause; None while every member's processes live."""
        for m in self.ready.members:
            w = self.watches[m.rank]
            if w.exited.is_set():
                ex = w.exit
                how = ("killed by signal %d" % ex.signal if ex and ex.signal else
                       "exited with code %s" % ex.exit_code if ex and ex.exit_code is not None else "ended")
                c = w.classification()
                cause = f" ({c.cause}" + (f": {c.line}" if c.line else "") + ")" if c.state == "failed" else ""
                return m, f"its server {how}{cause}"
            lk = self.links[m.host]
            if not lk.connected.is_set():
                continue  # no evidence either way
            now = _alive(self._procs(m))
            gone = self.baseline[m.rank] - now
            if gone:
                pid = sorted(gone)[0][0]
                return m, f"its process {pid} vanished ({len(gone)} of {len(self.baseline[m.rank])} gone)"
        return None

    async def run(self) -> GroupResult:
        for m in self.ready.members:
            w = SessionWatch(self.links[m.host], m.session_id)
            self.watches[m.rank] = w
            self.baseline[m.rank] = _alive(self._procs(m))
        try:
            while self.until is None or time.monotonic() < self.until:
                hit = self.check()
                if hit is not None:
                    return await self.failed(*hit)
                await asyncio.sleep(POLL_S)
            return self.ready
        finally:
            for w in self.watches.values():
                w.close()

    async def failed(self, m: GroupMember, cause: str) -> GroupResult:
        at = time.time()
        head = self.ready.members[0]
        health: int | None = None
        try:
            health = (await probe_health(self.links[head.host], head.port or 0, 2)).status
        except Exception:  # the head's answer is a fact recorded, not a condition of the verdict
            health = None
        why = f"{m.host} (rank {m.rank}): {cause}"
        members = [x.model_copy(update={"state": "failed", "cause": cause}) if x.rank == m.rank else x
                   for x in self.ready.members]
        notes = list(self.ready.notes)
        if health == 200:
            notes.append(f"{head.host} (rank 0) still answered GET /health 200 when the group failed")
        killed: list[str] = []
        if self.kill_on_failure:  # a member whose server ended keeps its own end (FAILED, its cause)
            w = self.watches[m.rank]
            if not w.exited.is_set():  # a vanished process: SGLang's launcher tears its tree down itself, at once
                try:
                    await asyncio.wait_for(w.exited.wait(), OWN_END_WAIT_S)
                except asyncio.TimeoutError:
                    pass  # it hangs on: it is killed with the rest
            ended = {m.rank} if w.exited.is_set() else set()
            killed = await kill_members(self.ordered, members, grace=self.kill_grace, skip=ended)
        return self.ready.model_copy(update={
            "ok": False, "state": "failed", "failed": why, "failed_host": m.host, "failed_rank": m.rank,
            "failed_at": at, "head_health": health, "members": members, "killed": killed, "notes": notes})
