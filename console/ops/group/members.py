"""A group as the hosts hold it: its members found by their spec (group id, rank), each member's true state,
the group's (the worst), and its members' logs interleaved by time.

Clock skew: each log line's time is the host's own wall clock (SGLang's ``[YYYY-mm-dd HH:MM:SS]`` prefix).
The console measures each host's offset from its own clock (the agent's sample time against the console's
receipt time, as the link records it) and subtracts it before merging; lines without a time keep the time of
the line before them on the same node (so a traceback stays in one piece). The offset is printed per node.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import re
import time
from dataclasses import dataclass

from console.core.group import GroupMember, group_state, member_session_id
from console.core.sessions import derive_views
from console.link.client import HostClient
from console.link.link import HostLink
from console.model import HostSnapshot
from console.ops.lifecycle import fresh_snapshot
from console.ops.session_log import probe_health

MISSING_GRACE_S = 60.0
"""A member the host does not hold reads LAUNCHING this long after its group's newest member was created (another
console may be starting it), then FAILED: positive evidence that the group cannot come up."""
TS_RE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


@dataclass(frozen=True)
class GroupView:
    """A group found on the opened hosts."""

    group: str
    state: str
    nnodes: int
    hosts: list[str]
    members: list[GroupMember]
    kill_on_failure: bool = True
    """False when a member's spec says the group was launched with ``--no-kill-on-failure``."""


async def _classes(link: HostLink, snap: HostSnapshot, sids: set[str]) -> dict:
    from console.core.classify import classify

    out = {}
    for s in snap.sessions:
        if s.session_id in sids:
            try:
                chunk = await HostClient.of(link).read_log(s.session_id, tail_bytes=256 * 1024)
                out[s.session_id] = classify(chunk.data, s.exit)
            except Exception:  # an unreadable log: the state comes from the processes and the exit record
                continue
    return out


async def find_groups(links: list[HostLink], only: str | None = None, *, fresh: bool = True) -> list[GroupView]:
    """Every group (or only ``only``) whose members the opened hosts hold, each member's state derived like any
    session's; a rank >= 1 (no ready line: SGLang's dummy health server) reads READY when its server runs and its
    port answers ``/health`` 200. A member of a host not opened reads UNREACHABLE; one its (answering) host holds no
run directory of reads LAUNCHING for MISSING_GRACE_S, then FAILED."""
    found: dict[str, dict[int, GroupMember]] = {}
    meta: dict[str, tuple[int, list[str]]] = {}
    created: dict[str, float] = {}
    keep: set[str] = set()
    """Groups a member's spec says were launched with ``--no-kill-on-failure``."""

    async def host(link: HostLink) -> None:
        try:
            snap = await fresh_snapshot(link) if fresh else link.snapshot()
            every = await HostClient.of(link).sessions()
            snap = snap.model_copy(update={"sessions": every})
        except Exception:  # the host is down: its members read unreachable below
            return
        mine = {s.session_id: s for s in snap.sessions if s.spec is not None and s.spec.group
                and (only is None or s.spec.group == only)}
        if not mine:
            return
        classes = await _classes(link, snap, set(mine))
        views = {v.session_id: v for v in derive_views(snap, classes, time.time(), interval=1e9)
                 if v.session_id in mine}
        for sid, s in mine.items():
            sp = s.spec
            assert sp is not None and sp.group
            v = views.get(sid)
            state = v.state if v is not None else "unreachable"
            rank = sp.node_rank or 0
            if state == "loading" and rank > 0 and s.server_alive and sp.port:
                try:
                    if (await probe_health(link, sp.port, 2)).status == 200:
                        state = "ready"
                except Exception:  # no answer: it stays loading
                    pass
            meta.setdefault(sp.group, (sp.nnodes or 1, list(sp.group_hosts or [])))
            created[sp.group] = max(created.get(sp.group, 0.0), sp.created_at or 0.0)
            if sp.group_kill_on_failure is False:
                keep.add(sp.group)
            found.setdefault(sp.group, {})[rank] = GroupMember(
                host=link.name, rank=rank, session_id=sid, state=state, port=sp.port, gpus=list(sp.gpus),
                cause=(f"{v.cause}" + (f": {v.line}" if v.line else "")) if v is not None and v.cause else None)

    await asyncio.gather(*(host(lk) for lk in links))
    out = []
    for gid, ranks in sorted(found.items()):
        nnodes, hosts = meta[gid]
        members = []
        for r in range(max(nnodes, max(ranks) + 1)):
            m = ranks.get(r)
            if m is None:
                h = hosts[r] if r < len(hosts) else "?"
                if h not in {lk.name for lk in links}:
                    m = GroupMember(host=h, rank=r, session_id=member_session_id(gid, r), state="unreachable",
                                    cause="not among the opened hosts")
                else:  # the host answered and holds no run directory of it: never started (a console died mid-launch)
                    young = time.time() - created.get(gid, 0.0) < MISSING_GRACE_S
                    m = GroupMember(host=h, rank=r, session_id=member_session_id(gid, r),
                                    state="launching" if young else "failed",
                                    cause=f"no run directory of it on {h}: never started" + (
                                        "" if young else "; the group cannot come up (mtpconsole kill "
                                        + " ".join(f"--host {x}" for x in hosts) + f" {gid})"))
            members.append(m)
        out.append(GroupView(group=gid, state=group_state(m.state for m in members), nnodes=nnodes,
                             hosts=hosts, members=members, kill_on_failure=gid not in keep))
    return out


def clock_offset(link: HostLink) -> float:
    """The host's clock minus the console's, in seconds, from its latest sample (its ``sampled_at``, host clock,
    against ``received_at``, console clock; the link's transit time, well under a second, is left in). 0.0 when
    unknown."""
    snap = link.snapshot()
    if snap.sampled_at is None or snap.received_at is None:
        return 0.0
    return float(snap.sampled_at) - float(snap.received_at)


def merge_logs(texts: list[tuple[str, int, str, float]], n: int | None = None) -> list[str]:
    """Interleave the members' logs by time: ``(host, rank, text, offset)`` each; every line marked ``host/rN``.

    A line's time is its own ``[...]`` stamp minus its host's offset; an unstamped line keeps the time of the one
    before it on that node; the merge is stable (a node's own order never changes)."""
    rows: list[tuple[float, int, int, str]] = []
    for k, (host, rank, text, offset) in enumerate(texts):
        last = float("-inf")
        for i, line in enumerate(text.splitlines()):
            m = TS_RE.match(line)
            if m:
                try:
                    last = _dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() - offset
                except ValueError:
                    pass
            rows.append((last, k, i, f"{host}/r{rank} | {line}"))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    lines = [r[3] for r in rows]
    return lines[-n:] if n else lines


async def group_logs(links: list[HostLink], view: GroupView, tail_bytes: int = 256 * 1024) -> tuple[list[str],
                                                                                                    list[str]]:
    """(the merged lines, one note per node: its clock offset or why its log is missing)."""
    by = {lk.name: lk for lk in links}
    texts, notes = [], []
    for m in view.members:
        lk = by.get(m.host)
        if lk is None or m.state == "unreachable":
            notes.append(f"{m.host} (rank {m.rank}): no log ({m.cause or 'not reachable'})")
            continue
        try:
            chunk = await HostClient.of(lk).read_log(m.session_id, tail_bytes=tail_bytes)
        except Exception as e:  # said per node; the others still merge
            notes.append(f"{m.host} (rank {m.rank}): no log: {e}")
            continue
        off = clock_offset(lk)
        notes.append(f"{m.host} (rank {m.rank}): clock offset {off:+.2f} s against this console (subtracted)")
        texts.append((m.host, m.rank, chunk.data, off))
    return merge_logs(texts), notes
