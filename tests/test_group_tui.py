"""Issue 30 in the real TUI (LiveBackend over ``local`` and the real sshd, Pilot): a group launched over both hosts
is shown once, above the host sections, with its members by rank, host and state; node1's rank (no ready line:
SGLang's dummy health server) reads READY on its own panel too; when node1's member dies the group line says
FAILED while the head's panel still reads READY (its /health answers 200) — in read-only mode it stays so: the
failure policy is not applied, only said.

Not read-only, the TUI applies the failure policy itself (console/ops/group/guard.py): the dead member's processes
re-checked gone on its host, then the head killed, confirmed, shown as an operation in the steps pane, audited
(``group_guard``), once for the group."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest

from console.config import Config
from console.ops import group as grp
from console.ops.lifecycle import fresh_snapshot
from tests.helpers.sshd import free_port
from tests.helpers.wait import until
from tests.test_group import close, group_request, nodes, open_links  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


async def test_group_shown_once_over_the_host_sections_and_its_failure_while_the_head_reads_ready(open_links, nodes):  # noqa: F811
    from console.ops.backend import LiveBackend
    from console.ui.app import make_app
    from console.ui.widgets.gpu_panel import GpuPanel
    from console.ui.widgets.groups_bar import GroupsBar

    links = await open_links()
    backend = LiveBackend(Config(hosts={lk.name: lk.cfg for lk in links}), links, interval=0.3)
    app = make_app(backend, interval=0.3, read_only=True)  # read-only: the failure policy is left to the operator
    app.animation_level = "none"
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            res = await grp.launch_group(links, group_request(links, nodes[0].model, free_port()), timeout=60)
            assert res.ok, res

            def bar() -> str:
                b = app.query(GroupsBar)
                return b.first().text if b else ""

            def badge(host: str) -> str:
                p = [p for p in app.query(GpuPanel) if p.host == host and p.index == 0]
                return p[0].badge_label if p else ""

            def shown() -> str:
                return f"bar {bar()!r}, local {badge('local')!r}, testhost {badge('testhost')!r}"

            want = f"GROUP {res.group}: READY — rank 0 local READY · rank 1 testhost READY"
            await until(pilot, lambda: bar() == want and badge("testhost") == "READY", 30, what=shown)
            assert len(app.query(GroupsBar)) == 1  # once, not per host section
            snap = await fresh_snapshot(links[1])
            rec = next(s.record for s in snap.sessions if s.session_id == res.members[1].session_id)
            assert rec is not None
            os.killpg(rec.pgid, signal.SIGKILL)
            await until(pilot, lambda: bar().startswith(f"GROUP {res.group}: FAILED") and badge("local") == "READY",
                        30, what=shown)
            await asyncio.sleep(2.0)
            await pilot.pause()
            assert badge("local") == "READY" and not app.ops.results  # read-only: nothing was killed
            assert app.ops.guard_said == {res.group}
            await grp.kill_members(links, res.members)
    finally:
        await backend.stop()
        await close(links)


async def test_tui_applies_the_failure_policy_once_with_evidence_in_the_steps_pane_and_audited(open_links, nodes,  # noqa: F811
                                                                                             tmp_path):
    from console.audit import Audit
    from console.ops.backend import LiveBackend
    from console.ui.app import make_app
    from console.ui.widgets.gpu_panel import GpuPanel
    from console.ui.widgets.groups_bar import GroupsBar
    from console.ui.widgets.steps import StepsView

    links = await open_links()
    audit = Audit(tmp_path / "audit.jsonl")
    backend = LiveBackend(Config(hosts={lk.name: lk.cfg for lk in links}), links, interval=0.3, audit=audit)
    app = make_app(backend, interval=0.3)
    app.animation_level = "none"
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            res = await grp.launch_group(links, group_request(links, nodes[0].model, free_port()), timeout=60)
            assert res.ok, res

            def bar() -> str:
                b = app.query(GroupsBar)
                return b.first().text if b else ""

            def badge(host: str) -> str:
                p = [p for p in app.query(GpuPanel) if p.host == host and p.index == 0]
                return p[0].badge_label if p else ""

            def steps() -> str:
                return app.query_one(StepsView).text

            def shown() -> str:
                return f"bar {bar()!r}, local {badge('local')!r}, steps {steps()!r}, results {app.ops.results!r}"

            await until(pilot, lambda: bar().startswith(f"GROUP {res.group}: READY") and badge("testhost") == "READY",
                        30, what=shown)
            snap = await fresh_snapshot(links[1])
            rec = next(s.record for s in snap.sessions if s.session_id == res.members[1].session_id)
            assert rec is not None
            t_kill = time.monotonic()
            os.killpg(rec.pgid, signal.SIGKILL)  # node1's member dies; the head hangs on, its /health 200
            await until(pilot, lambda: app.ops.results, 60, what=shown)
            r = app.ops.results[0]
            assert r.ok and r.op == "kill" and r.host == "local", r
            assert time.monotonic() - t_kill <= 30.0
            text = steps()
            assert f"group guard · {res.group}" in text, text
            ev = next(s for s in r.steps if s.name == "evidence")
            assert ev.state == "ok" and "testhost (rank 1): FAILED" in (ev.evidence or "") \
                and f"no process of {res.members[1].session_id} alive on testhost" in (ev.evidence or "") \
                and "local (rank 0) still answers GET /health 200" in (ev.evidence or ""), ev
            kill = next(s for s in r.steps if s.name == "kill local r0")
            assert kill.state == "ok" and "stopped, confirmed" in (kill.evidence or ""), kill
            assert [s.name for s in r.steps] == ["evidence", "kill local r0"]  # the dead member is not killed again
            snap0 = await fresh_snapshot(links[0])
            assert not any(p.session_id == res.members[0].session_id and p.alive for p in snap0.servers)
            entries = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
            guard = [e for e in entries if e["op"] == "group_guard"]
            assert len(guard) == 1 and guard[0]["args"] == {"group": res.group} and guard[0]["ok"] is True, guard
            await asyncio.sleep(2.0)  # more views of the FAILED group: the policy ran once
            await pilot.pause()
            assert len(app.ops.results) == 1 and app.ops.guarded == {res.group}
            assert bar() == "" or not bar().startswith(f"GROUP {res.group}: READY")
    finally:
        await backend.stop()
        audit.close()
        await close(links)
