"""Issue 29 in the real TUI: a deployment of 2 replicas (``--enable-metrics``) on a simulated 4-GPU local host behind
the REAL gateway (``smg``, the ``router`` extra), with clients sending requests through it the whole time.

- ``deploy status`` (text) prints the requests/s through the gateway and each replica's own;
- the TUI (LiveBackend, Pilot) shows the deployment's row above the host's GPU panels: gateway UP with the age of
  its reading, 2/2 replicas ready, requests/s through the gateway;
- ``r`` on the row: the flags (``--max-running-requests=24``), the confirm dialog naming both replicas, the flag
  diff and their traffic (Cancel focused); ``y`` runs ``deploy roll``'s code path: the row shows each replica's
  step while it runs, the steps pane every step, the roll completes, both replicas replaced, every request answered;
  the audit log has the roll's result.

Under ``CI=true`` a missing smg fails this test; elsewhere it skips.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers.sim_files import REPO
from tests.helpers.wait import until
from tests.test_deploy import Dep, Load, deployed, smg_installed  # noqa: F401  (its module fixture: smg present)

CLIENTS = 3
"""Fewer than test_deploy's 8: the TUI runs in the same two shared cores."""


@pytest.fixture()
def dep_metrics(tmp_path: Path) -> Iterator[Dep]:
    """'web' up: 2 replicas (GPUs 0 and 1, ``--enable-metrics``: their own request counters) on a simulated 4-GPU
    host."""
    yield from deployed(tmp_path, 4, ("--enable-metrics",))


def status_text(d: Dep) -> str:
    p = subprocess.run([sys.executable, "-m", "console", "--config", str(d.config), "--audit-log", str(d.audit),
                        "deploy", "status", "web"], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    return p.stdout


async def test_the_row_shows_the_deployment_and_r_rolls_it_with_every_request_answered(dep_metrics: Dep) -> None:
    from textual.widgets import Button, Input

    from console.audit import Audit
    from console.config import load_config
    from console.link.link import HostLink
    from console.link.ssh import HostSpec
    from console.ops.backend import LiveBackend
    from console.ui.app import make_app
    from console.ui.screens.confirm import ConfirmScreen
    from console.ui.screens.roll import RollFlags
    from console.ui.widgets.deploy_row import DeploymentRowView, row_text
    from console.ui.widgets.steps import StepsView
    from tests.ui_fakes import record_toasts

    d = dep_metrics
    load = Load(d.gateway_port, str(d.model))
    load.threads = load.threads[:CLIENTS]
    with load:
        load.wait_ok(CLIENTS)
        text = status_text(d)
        rates = re.findall(r"^  replica \d .* requests/s (\S+)", text, re.M)
        # each worker's own requests/s (the gateway's policy may send all of it to one)
        assert len(rates) == 2 and sum(float(r) for r in rates) > 0, text
        assert float(re.search(r"requests/s through the gateway: (\S+)", text).group(1)) > 0, text
        cfg = load_config(d.config)
        audit = Audit(d.audit)
        link = HostLink(HostSpec(name="local", local=True), cfg.hosts["local"], interval=0.5, audit=audit)
        backend = LiveBackend(cfg, [link], interval=0.5, audit=audit)
        app = make_app(backend, interval=0.5)
        app.animation_level = "none"
        record_toasts(app)
        try:
            async with app.run_test(size=(180, 60)) as pilot:
                rv = await until(pilot, lambda: app.query_one(DeploymentRowView), 30)

                def said() -> str:
                    return str(rv.render())
                await until(pilot, lambda: rv.row.gateway == "up" and rv.row.ready == 2
                            and (rv.row.requests_per_s or 0) > 0, 90, what=said)
                shown = row_text(rv.row, time.time()).plain
                assert re.match(r"DEPLOY web  gateway UP \(read [\d.]+ s ago\)  replicas 2/2 ready  [\d.]+ req/s$",
                                shown), shown
                assert rv.region.y < min(p.region.y for p in app.panels())
                olds = {r.session_id for r in rv.row.replicas}
                app.main.go(rv)
                await until(pilot, lambda: app.screen.focused is rv)
                await pilot.press("r")
                await until(pilot, lambda: isinstance(app.screen, RollFlags))
                app.screen.query_one(Input).value = "--max-running-requests=24"
                await pilot.press("enter")
                dlg = await until(pilot, lambda: app.screen if isinstance(app.screen, ConfirmScreen) else None)
                assert dlg.focused is dlg.query_one("#cancel", Button)
                body = "\n".join(dlg.lines)
                assert "+ --max-running-requests 24" in body and body.count("traffic: ") == 2
                assert all(f"session {sid}" in body for sid in olds), body
                await pilot.press("y")
                await until(pilot, lambda: any(s.step.startswith("new: ") for s in rv.row.roll), 120, what=said)
                assert "ROLL" in said()
                await until(pilot, lambda: app.ops.results and app.ops.results[-1].op == "deploy-roll", 300,
                            what=lambda: app.query_one(StepsView).text[-600:])
                res = app.ops.results[-1]
                assert res.ok, (res.error, app.query_one(StepsView).text[-1500:])
                steps = app.query_one(StepsView).text
                for i in (0, 1):
                    assert f"replica {i} new: registered" in steps and f"replica {i} old kill: SIGTERM" in steps
                await until(pilot, lambda: not rv.row.rolling and rv.row.ready == 2
                            and not olds & {r.session_id for r in rv.row.replicas}, 60, what=said)
        finally:
            await backend.stop()
            audit.close()
        load.wait_ok(load.ok + CLIENTS)
    assert load.failed == [], load.failed[:5]
    assert '"result:deploy-roll"' in d.audit.read_text()
