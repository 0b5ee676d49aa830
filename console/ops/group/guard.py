"""The failure policy for a console that did not launch the group (the TUI): a member died, the rest are killed.

``launch --wait --watch`` guards the group it launched (:class:`console.ops.group.watch.GroupWatch`). A console
that only sees a group — the TUI, opened before or after the launch — applies the same policy from what its views
show (:func:`console.core.group.guard_candidates`: a group FAILED with a dead member while others are alive), and
acts only on positive evidence re-checked at action time (:func:`guard_group`):

1. ``evidence``: the group found again on fresh snapshots of every host; a member that reads FAILED whose host
   answers and holds its run directory, and of whose session no process is alive there now. A member of a host
   that does not answer, or whose processes still run (a failure line in its log, the process hung on), is no
   evidence: nothing is killed, and the step says why;
2. ``kill <host> r<rank>`` for every other member still running: SIGTERM, the grace, SIGKILL, each confirmed on its
   own host (processes gone, GPU memory back, port closed) — :func:`console.ops.group.watch.kill_members`.

A group launched with ``--no-kill-on-failure`` (its members' specs say so) is left running, and the step says so.

Who calls it says how often (the TUI: once per group) and records it in the audit log.
"""

from __future__ import annotations

import asyncio
import time

from console.core.group import GUARD_LIVE, POLICY_OFF, GroupMember, GroupResult, group_state
from console.link.link import HostLink
from console.ops.group.members import find_groups
from console.ops.group.watch import kill_members
from console.ops.lifecycle import fresh_snapshot
from console.ops.lifecycle.steps import OnSteps, Stepper
from console.ops.session_log import probe_health

EVIDENCE = "evidence"


async def dead_member(links: list[HostLink], members: list[GroupMember]) -> tuple[GroupMember | None, list[str]]:
    """The first member proven dead now (FAILED, its host answering a fresh snapshot, its run directory there, none
    of its processes alive), and one line per FAILED member saying what was found of it."""
    by = {lk.name: lk for lk in links}
    found: list[str] = []
    for m in members:
        if m.state != "failed":
            continue
        lk = by.get(m.host)
        if lk is None:
            found.append(f"{m.host} (rank {m.rank}): not opened by this console: no evidence")
            continue
        try:
            snap = await fresh_snapshot(lk)
        except Exception as e:  # a host that does not answer is no evidence either way
            found.append(f"{m.host} (rank {m.rank}): no fresh snapshot ({e}): no evidence")
            continue
        if not any(s.session_id == m.session_id for s in snap.sessions):
            found.append(f"{m.host} (rank {m.rank}): no run directory of {m.session_id} there: not a member that died")
            continue
        alive = sorted(p.pid for p in snap.servers if p.session_id == m.session_id and p.alive)
        if alive:
            found.append(f"{m.host} (rank {m.rank}): reads FAILED but its processes still run (pid "
                         f"{', '.join(map(str, alive))}): no evidence it died")
            continue
        found.append(f"{m.host} (rank {m.rank}): FAILED ({m.cause or 'its server ended'}); no process of "
                     f"{m.session_id} alive on {m.host} (fresh snapshot)")
        return m, found
    return None, found


async def guard_group(links: list[HostLink], group: str, on_steps: OnSteps | None = None, *,
                      grace: float | None = None) -> GroupResult:
    """Re-check the evidence that a member of ``group`` died, then kill (confirmed) every other member still
    running (see module doc). ``ok``: every kill was confirmed; ``killed`` is empty when nothing was acted on
    (``refused`` then says why)."""
    st = Stepper([EVIDENCE], on_steps, phase="kill")
    st.start(EVIDENCE)
    views = await find_groups(links, group)
    if not views:
        st.finish(EVIDENCE, "failed", f"no group {group} on the opened hosts: nothing was killed")
        return GroupResult(op="guard", session_id=group, group=group, ok=False, state="unreachable", nnodes=0,
                           refused=f"no group {group} on the opened hosts")
    v = views[0]
    base = dict(op="guard", session_id=group, group=group, nnodes=v.nnodes, members=v.members)
    if not v.kill_on_failure:
        why = f"group {group} was {POLICY_OFF}: its members are left running"
        st.finish(EVIDENCE, "skipped", f"{why}: nothing was killed")
        return GroupResult(**base, ok=False, state=v.state, refused=why)
    dead, found = await dead_member(links, v.members)
    rest = [m for m in v.members if dead is not None and m.rank != dead.rank and m.state in GUARD_LIVE]
    if dead is None or not rest:
        why = "; ".join(found) or f"no member of {group} reads FAILED"
        if dead is not None:
            why += "; no other member is running"
        st.finish(EVIDENCE, "failed", f"{why}: nothing was killed")
        return GroupResult(**base, ok=False, state=v.state, refused=why)
    head = v.members[0]
    health = await _head_health(links, head) if head.rank != dead.rank else None
    said = f"; {head.host} (rank 0) still answers GET /health {health}" if health == 200 else ""
    st.finish(EVIDENCE, "ok", "; ".join(found) + said + " — the rest of the group is killed: " + ", ".join(
        f"{m.host} (rank {m.rank}) {m.state.upper()}" for m in rest))
    at = time.time()
    names = {m.rank: f"kill {m.host} r{m.rank}" for m in rest}
    for n in names.values():
        st.add(n)

    async def one(m: GroupMember) -> str:
        st.start(names[m.rank])
        line = (await kill_members(links, [m], grace=grace))[0]
        st.finish(names[m.rank], "ok" if "stopped, confirmed" in line else "failed", line)
        return line

    killed = list(await asyncio.gather(*(one(m) for m in rest)))
    done = {m.rank for m, k in zip(rest, killed) if "stopped, confirmed" in k}
    after = [m.model_copy(update={"state": "stopped"}) if m.rank in done else m for m in v.members]
    return GroupResult(**{**base, "members": after}, ok=all("stopped, confirmed" in k for k in killed),
                       state=group_state(m.state for m in after), failed=f"{dead.host} (rank {dead.rank}): "
                       f"{dead.cause or 'its server ended'}", failed_host=dead.host, failed_rank=dead.rank,
                       failed_at=at, head_health=health, killed=killed)


async def _head_health(links: list[HostLink], head: GroupMember) -> int | None:
    """What rank 0's ``GET /health`` answers now (a fact recorded: SGLang's head answers 200 with a rank dead)."""
    lk = next((x for x in links if x.name == head.host), None)
    if lk is None or not head.port:
        return None
    try:
        return (await probe_health(lk, head.port, 2)).status
    except Exception:  # no answer is recorded as none, never as a verdict
        return None

