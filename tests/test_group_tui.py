"""Issue 30 in the real TUI (LiveBackend over ``local`` and the real sshd, Pilot): a group launched over both hosts
is shown once, above the host sections, with its members by rank, host and state; node1's rank (no ready line:
SGLang's dummy health server) reads READY on its own panel too; when node1's member dies the group line says
FAILED while the head's panel still reads READY (its /health answers 200)."""

from __future__ import annotations

import os
import signal

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
            await grp.kill_members(links, res.members)
    finally:
        await backend.stop()
        await close(links)
