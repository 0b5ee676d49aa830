"""Issue 30: the failure policy for a console that only sees a group (console/ops/group/guard.py), data layer.

- which groups the views hand to it (``guard_candidates``): a member FAILED (not acknowledged) while another runs;
- over the two hosts of tests/test_group.py: a group launched with ``--no-kill-on-failure`` (recorded in each
  member's spec) whose rank 1 died is left running, and the step says why; the same group's dead member is proven
  dead from a fresh snapshot of its host (the evidence line names it).
"""

from __future__ import annotations

import os
import signal

import pytest

from console.core.group import POLICY_OFF, guard_candidates
from console.model import SessionView
from console.ops import group as grp
from console.ops.group.guard import dead_member
from console.ops.lifecycle import fresh_snapshot
from tests.helpers.sshd import free_port
from tests.helpers.wait import await_until
from tests.test_group import close, group_request, nodes, open_links  # noqa: F401  (fixtures)


def _v(host: str, rank: int, state: str, group: str = "g", **kw) -> SessionView:
    return SessionView(host=host, session_id=f"{group}-r{rank}", state=state, group=group,  # type: ignore[arg-type]
                       node_rank=rank, nnodes=2, **kw)


def test_guard_candidates_a_failed_member_while_another_runs():
    assert guard_candidates([_v("a", 0, "ready"), _v("b", 1, "failed")]) == ["g"]
    assert guard_candidates([_v("a", 0, "loading"), _v("b", 1, "failed")]) == ["g"]
    assert guard_candidates([_v("a", 0, "stopped"), _v("b", 1, "failed")]) == []  # nothing left running
    assert guard_candidates([_v("a", 0, "ready"), _v("b", 1, "ready")]) == []
    assert guard_candidates([_v("a", 0, "ready"), _v("b", 1, "failed", acknowledged=True)]) == []
    assert guard_candidates([_v("a", 0, "ready", group="h"), _v("b", 1, "failed", group="g")]) == []  # other groups
    assert guard_candidates([SessionView(host="a", session_id="s", state="failed")]) == []  # no group


@pytest.mark.sshd
@pytest.mark.slow
async def test_no_kill_on_failure_group_left_running_and_the_dead_member_proven_from_its_host(open_links, nodes):  # noqa: F811
    links = await open_links()
    try:
        res = await grp.launch_group(links, group_request(links, nodes[0].model, free_port(), kill_on_failure=False),
                                     timeout=60)
        assert res.ok, res
        for lk in links:  # the choice is in every member's spec: any console reads it
            snap = await fresh_snapshot(lk)
            assert all(s.spec.group_kill_on_failure is False for s in snap.sessions if s.spec and s.spec.group)
        snap = await fresh_snapshot(links[1])
        rec = next(s.record for s in snap.sessions if s.session_id == res.members[1].session_id)
        assert rec is not None
        os.killpg(rec.pgid, signal.SIGKILL)

        async def failed():
            v = await grp.find_groups(links, res.group)
            return v[0] if v and v[0].members[1].state == "failed" else None
        view = await await_until(failed, 30)
        assert not view.kill_on_failure
        dead, found = await dead_member(links, view.members)
        assert dead is not None and dead.host == "testhost" and dead.rank == 1
        assert f"no process of {res.members[1].session_id} alive on testhost" in found[-1], found

        steps = []
        r = await grp.guard_group(links, res.group, steps.append)
        assert not r.ok and r.refused and POLICY_OFF in r.refused and not r.killed, r
        assert steps[-1][0].name == "evidence" and steps[-1][0].state == "skipped", steps[-1]
        snap0 = await fresh_snapshot(links[0])
        assert any(p.session_id == res.members[0].session_id and p.alive for p in snap0.servers)  # left running
        lines = await grp.kill_members(links, res.members)
        assert "stopped, confirmed" in lines[0], lines
    finally:
        await close(links)


@pytest.mark.sshd
@pytest.mark.slow
async def test_no_evidence_nothing_killed_a_failed_member_whose_processes_still_run(open_links, nodes, monkeypatch):  # noqa: F811
    """A member that reads FAILED (a failure line in its log, say) while its processes still run on its host is no
    evidence that it died: the policy kills nothing and says what it found."""
    from console.ops.group import guard as group_guard

    links = await open_links()
    try:
        res = await grp.launch_group(links, group_request(links, nodes[0].model, free_port()), timeout=60)
        assert res.ok, res
        real = group_guard.find_groups

        async def rank1_reads_failed(*a, **kw):
            views = await real(*a, **kw)
            return [v.__class__(**{**v.__dict__, "members": [m.model_copy(update={"state": "failed"}) if m.rank == 1
                                                               else m for m in v.members]}) for v in views]

        monkeypatch.setattr(group_guard, "find_groups", rank1_reads_failed)
        steps = []
        r = await grp.guard_group(links, res.group, steps.append)
        assert not r.ok and not r.killed and r.refused and "reads FAILED but its processes still run" in r.refused, r
        assert steps[-1][0].state == "failed" and "nothing was killed" in (steps[-1][0].evidence or "")
        for lk, m in zip(links, res.members):  # both still run
            snap = await fresh_snapshot(lk)
            assert any(p.session_id == m.session_id and p.alive for p in snap.servers)
        await grp.kill_members(links, res.members)
    finally:
        await close(links)
