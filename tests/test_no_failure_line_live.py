"""No decisive line is a valid answer; one server run at a time - on real processes (issue 24, items 3, 4).

A READY stand-in session whose launcher is SIGKILLed leaves a log that ends in the ready line and health
probes: the session view (panel, ``sessions``) and the report's classification say the log holds no failure
line and what ended the server; neither shows the ready line or a ``GET /health`` line as decisive. With an
older server run in front of that log, the report reads (and excerpts) the last run only and says so.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from console.core.classify.rules import NO_FAILURE_LINE
from console.core.sessions import derive_views
from console.link.link import HostLink
from console.model import LaunchRequest
from console.ops import lifecycle
from console.ops.report_gather import gather
from console.sim.demo import FIXED_FLAGS
from tests.conftest import free_port
from tests.helpers.sim_files import make_sim, sim_link
from tests.helpers.wait import await_until


@pytest.fixture
def sim(tmp_path):
    return make_sim(tmp_path, 1, tag="n")


@pytest.fixture
async def link(sim, runs_dir):
    async with sim_link(runs_dir, sim[0]) as lk:
        yield lk


async def _ended(link: HostLink, sid: str, timeout: float = 30.0):
    """(the snapshot, the session) once the session has an exit record (bounded: the last one read)."""
    last: list = []

    async def ended() -> bool:
        snap = await lifecycle.fresh_snapshot(link)
        last[:] = [snap, next(x for x in snap.sessions if x.session_id == sid)]
        return last[1].exit is not None
    await await_until(ended, timeout, step=0.2)
    return last[0], last[1]


def _no_decisive_log_line(line: str | None) -> None:
    assert line is not None and line.startswith(NO_FAILURE_LINE + "; "), line
    assert "HTTP" not in line and "fired up" not in line, line


async def _launch_then_kill_launcher(link: HostLink, model):
    req = LaunchRequest(host="local", command=[sys.executable, "-m", "console.sim.sglang"],
                        flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=free_port())
    r = await lifecycle.launch(link, req, timeout=60)
    assert r.ok and r.session_id, r
    snap = await lifecycle.fresh_snapshot(link)
    info = next(x for x in snap.sessions if x.session_id == r.session_id)
    assert info.record is not None
    os.kill(info.record.pid, signal.SIGKILL)  # the launcher, as an operator's kill -9 would
    snap, info = await _ended(link, r.session_id)
    assert info.exit is not None, "the supervisor should record the launcher's end"
    return r, snap, info


async def test_launcher_sigkilled_after_ready_shows_no_failure_line(link, sim, tmp_path):
    _, model = sim
    r, snap, info = await _launch_then_kill_launcher(link, model)

    from console.commands.sessions import classify_sessions

    classes = await classify_sessions(link, snap)
    (view,) = [v for v in derive_views(snap, classes, time.time()) if v.session_id == r.session_id]
    assert view.state == "failed", view
    _no_decisive_log_line(view.line)

    inp = await gather(link, r.session_id, audit_path=str(tmp_path / "audit.jsonl"), since_s=600)
    assert inp.classification is not None and inp.classification.state == "failed"
    _no_decisive_log_line(inp.classification.line)
    assert not inp.classification.line_in_log
    assert any("ready to roll" in x for x in inp.log_lines)  # the log did reach ready: it is not what decided


OLD_RUN = (
    "[2026-03-01 09:00:00] server_args=ServerArgs(model_path='/models/old', port=30000)\n"
    "[2026-03-01 09:00:30] The server is fired up and ready to roll!\n"
    "[2026-03-01 09:05:00] Decode batch, #running-req: 48, #token: 90000, token usage: 0.40, cuda graph: True, "
    "gen throughput (token/s): 27.00, #queue-req: 8, \n"
)


async def test_report_reads_the_last_server_run_of_its_log(link, sim, tmp_path):
    _, model = sim
    r, snap, info = await _launch_then_kill_launcher(link, model)
    log = Path(info.run_dir) / "output.log"
    log.write_text(OLD_RUN + log.read_text())  # an older run in front, as a restart appending to one file leaves
    inp = await gather(link, r.session_id, audit_path=str(tmp_path / "audit.jsonl"), since_s=600)
    c = inp.classification
    assert c is not None and c.runs_skipped == 1 and c.state == "failed", c
    assert c.metrics is None or c.metrics.gen_throughput != 27.0
    assert not any("2026-03-01" in x for x in inp.log_lines) and any("ready to roll" in x for x in inp.log_lines)
    from console.core.report import build_report

    md = build_report(inp)
    assert "earlier runs skipped" in md and "27.00" not in md
