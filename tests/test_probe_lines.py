"""Issue 26, "the console's own probes do not flood the log tail": its ``GET /metrics`` and ``/health`` access lines
were 23 % of a session's log lines.

Both remedies are tested: at the source, a launch adds SGLang's ``--uvicorn-access-log-exclude-prefixes /metrics
/health`` when the host's own flag schema has the flag (never when it does not; the operator's own value wins),
and the SGLang stand-in honours the flag as 0.5.23's help describes it; in the view, the log pane folds the probe
lines of servers that still write them (``h`` shows them). The recogniser is checked on every line of the real
logs in ``tests/data/real-logs`` (copied from public SGLang and vLLM threads, each file's URL in its labels file).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from textual.widgets import Static

from console.core.flags.models import FlagSchema
from console.core.flags.sources import bundled_schema
from console.core.probes import EXCLUDE_FLAG, PROBE_PREFIXES, is_probe_line, probe_path, quiet_probe_flags
from console.model import LaunchRequest
from console.ops import lifecycle
from console.ops.session_log import probe_health
from console.ui.widgets.gpu_panel import GpuPanel
from console.ui.widgets.log_pane import LogPane
from tests.conftest import free_port
from tests.helpers.sim_files import make_sim, sim_link
from tests.helpers.wait import await_until, until
from tests.ui_fakes import SESSION_LOG, FakeBackend, frozen_app, started

REAL_LOGS = Path(__file__).parent / "data" / "real-logs"
SGLANG = [sys.executable, "-m", "console.sim.sglang"]


# ---------------------------------------------------------------- the recogniser (pure)
@pytest.mark.parametrize("line,path", [
    ('[2025-09-17 16:23:16] INFO:     10.10.11.1:41712 - "GET /health HTTP/1.1" 200 OK', "/health"),
    ('[2025-03-11 16:44:29] [2025-03-11 01:44:29] INFO:     10.224.73.28:56594 - "GET /metrics HTTP/1.1" 200 OK',
     "/metrics"),
    ('(APIServer pid=851) INFO:     10.109.20.86:59146 - "GET /metrics HTTP/1.1" 200 OK', "/metrics"),
    ('INFO:     127.0.0.1:5123 - "GET /health HTTP/1.1" 503 Service Unavailable', "/health"),
    ('INFO:     ::1:40000 - "GET /health_generate HTTP/1.1" 200 OK', "/health_generate"),  # the flag's prefix rule
    ('INFO:     127.0.0.1:1 - "GET /metrics?name=x HTTP/1.1" 200 OK', "/metrics?name=x"),
    ('INFO:     127.0.0.1:1 - "HEAD /health HTTP/1.0" 200 OK', "/health"),
    ('[2026-04-05 20:02:51] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK', None),
    ('INFO:     127.0.0.1:55504 - "GET / HTTP/1.1" 404 Not Found', None),
    ('[2026-01-01 00:00:00] INFO:     127.0.0.1:31000 - "GET /model_info HTTP/1.1" 200 OK', None),
    ("GET /health failed: connection refused", None),  # prose that quotes a probe: not an access line
    ('[2026-01-01 00:00:00] the console probes "GET /health HTTP/1.1" every 5 s', None),
])
def test_probe_path_of_each_form(line, path):
    assert probe_path(line) == path
    assert is_probe_line(line) is (path is not None)


def test_every_probe_line_of_the_real_logs_and_nothing_else_is_recognised():
    """Each access line of a /metrics or /health path in the real corpus is a probe line; no other line is."""
    lines = [x for f in sorted(REAL_LOGS.glob("*.log")) for x in f.read_text(errors="replace").splitlines()]
    want = [x for x in lines if any(f' - "{m} {p}' in x for m in ("GET", "HEAD") for p in PROBE_PREFIXES)]
    got = [x for x in lines if is_probe_line(x)]
    assert len(lines) > 4000 and len(want) >= 15
    assert got == want


# ---------------------------------------------------------------- the flag a launch adds (pure)
def test_the_flag_is_added_only_when_the_schema_has_it_and_the_operator_did_not_give_it():
    schema = bundled_schema()
    assert schema.get(EXCLUDE_FLAG) is not None  # sglang 0.5.23 has it (console/data/sglang-0.5.23-flags.json)
    base = ["--model-path", "/m", "--tp-size", "1"]
    assert quiet_probe_flags(base, schema) == [EXCLUDE_FLAG, "/metrics", "/health", "/server_info"]
    for own in (["--uvicorn-access-log-exclude-prefixes", "/x"], ["--uvicorn-access-log-exclude-prefixes=/x"],
                ["--uvicorn-access-log-exclude-prefixes"],  # given empty: the operator wants every access line
                ["--uvicorn-access-log-exclude", "/x"]):  # an abbreviation argparse accepts
        assert quiet_probe_flags([*base, *own], schema) == [], own
    older = FlagSchema(version="0.4.0", prog=schema.prog, flags=[f for f in schema.flags if f.name != EXCLUDE_FLAG])
    assert quiet_probe_flags(base, older) == []  # a server without the flag would refuse it: never added
    assert quiet_probe_flags(base, None) == []  # flags not checked against the host: nothing is known


# ---------------------------------------------------------------- a launch on the local host (the stand-in)
@pytest.fixture
def sim(tmp_path):
    return make_sim(tmp_path, 2, tag="h")


@pytest.fixture(autouse=True)
def _private_audit_log(tmp_path, monkeypatch):
    monkeypatch.setenv("MTPCONSOLE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))


def _log(runs_dir: Path, sid: str) -> list[str]:
    return (runs_dir / sid / "output.log").read_text(errors="replace").splitlines()


async def test_a_launch_leaves_the_consoles_probes_out_of_its_log(sim, runs_dir):
    """The schema has the flag: the launch adds it (said in the preflight's evidence), the stand-in honours it —
    the launch's own healthy step, three more GET /health and the agent's GET /metrics every tick leave no line,
    while the server's other access lines stay."""
    d, model = sim
    async with sim_link(runs_dir, d) as lk:
        port = free_port()
        req = LaunchRequest(host="local", command=SGLANG, flags=["--model-path", str(model), "--enable-metrics"],
                            gpus=[0], port=port)
        r = await lifecycle.launch(lk, req, timeout=120)
        assert r.ok and r.state == "ready", r
        info = next(s for s in lk.snapshot().sessions if s.session_id == r.session_id)
        argv = info.spec.argv
        i = argv.index(EXCLUDE_FLAG)
        assert argv[i + 1:i + 4] == ["/metrics", "/health", "/server_info"] and argv.count(EXCLUDE_FLAG) == 1
        pre = next(s for s in r.steps if s.name == "preflight")
        assert f"{EXCLUDE_FLAG} /metrics /health /server_info added" in (pre.evidence or "")
        for _ in range(3):
            assert (await probe_health(lk, port, 5)).status == 200

        async def metrics_fetched() -> bool:
            snap = await lk.refresh()
            return any(p.session_id == r.session_id and p.metrics_text for p in snap.servers)
        assert await await_until(metrics_fetched, 30)  # the agent's GET /metrics reached the server
        lines = _log(runs_dir, r.session_id)
        assert not [x for x in lines if is_probe_line(x)], [x for x in lines if "GET /" in x]
        assert any('"GET /model_info' in x for x in lines)  # access logging itself is on
        await lifecycle.kill(lk, lifecycle.KillTarget(host="local", session_id=r.session_id), grace=5)


async def test_the_operators_own_value_wins_and_the_standin_then_logs_the_probes(sim, runs_dir):
    """Given empty by the operator (every access line wanted), the flag is not added a second time, and the
    stand-in writes the probes' access lines — in the form the recogniser folds."""
    d, model = sim
    async with sim_link(runs_dir, d) as lk:
        port = free_port()
        req = LaunchRequest(host="local", command=SGLANG, flags=["--model-path", str(model), EXCLUDE_FLAG],
                            gpus=[0], port=port)
        r = await lifecycle.launch(lk, req, timeout=120)
        assert r.ok, r
        info = next(s for s in lk.snapshot().sessions if s.session_id == r.session_id)
        assert info.spec.argv.count(EXCLUDE_FLAG) == 1 and "/metrics" not in info.spec.argv
        assert (await probe_health(lk, port, 5)).status == 200
        probes = await await_until(lambda: [x for x in _log(runs_dir, r.session_id) if is_probe_line(x)], 10)
        assert probes and all(probe_path(x) == "/health" for x in probes), probes
        await lifecycle.kill(lk, lifecycle.KillTarget(host="local", session_id=r.session_id), grace=5)


async def test_no_flag_is_added_when_the_flags_are_not_checked(sim, runs_dir):
    """``--no-validate``: the host's schema is not read, so whether its server has the flag is not known."""
    d, model = sim
    async with sim_link(runs_dir, d) as lk:
        req = LaunchRequest(host="local", command=SGLANG, flags=["--model-path", str(model)], gpus=[1],
                            port=free_port(), check_flags=False)
        r = await lifecycle.launch(lk, req, wait=False)
        assert r.ok, r
        info = next(s for s in (await lk.refresh()).sessions if s.session_id == r.session_id)
        assert EXCLUDE_FLAG not in info.spec.argv
        await lifecycle.kill(lk, lifecycle.KillTarget(host="local", session_id=r.session_id), grace=5)


# ---------------------------------------------------------------- the log pane folds them (Pilot)
PROBES = ['[2026-10-30 12:03:01] INFO:     127.0.0.1:40100 - "GET /health HTTP/1.1" 200 OK',
          '[2026-10-30 12:03:02] INFO:     127.0.0.1:40102 - "GET /metrics HTTP/1.1" 200 OK',
          '[2026-10-30 12:03:03] INFO:     127.0.0.1:40104 - "GET /health HTTP/1.1" 200 OK']


def _shown(pane: LogPane) -> list[str]:
    return [str(x) for x in pane.log_widget.lines]


def _fold_line(app) -> str:
    return str(app.query_one("#log .probes", Static).render())


async def test_the_log_pane_folds_probe_lines_and_h_shows_them():
    be = FakeBackend()
    log = [*SESSION_LOG[:5], PROBES[0], PROBES[1], SESSION_LOG[5], PROBES[2]]
    be.logs[("host-a", "s-ready")] = log
    app = frozen_app(be)
    async with app.run_test(size=(160, 40)) as pilot:
        await started(pilot)
        next(p for p in app.query(GpuPanel) if p.index == 0).focus()
        pane = app.query_one(LogPane)
        await until(pilot, lambda: app.following == ("host-a", "s-ready") and len(pane.lines) == len(log))
        await until(pilot, lambda: _shown(pane) == [*SESSION_LOG[:6]])  # every probe line folded
        assert _fold_line(app) == "3 probe lines folded (GET /metrics, GET /health, GET /server_info): h shows them"
        await pilot.press("h")
        await until(pilot, lambda: _shown(pane) == log)
        assert not app.query_one("#log .probes", Static).has_class("-shown")
        be.on_log("host-a", "s-ready", [PROBES[0], "a line of the server"])  # lines that arrive while shown
        await until(pilot, lambda: _shown(pane)[-2:] == [PROBES[0], "a line of the server"])
        await pilot.press("h")
        await until(pilot, lambda: _shown(pane) == [*SESSION_LOG[:6], "a line of the server"])
        assert _fold_line(app).startswith("4 probe lines folded")
