"""Staleness is a state everywhere (issue 24, item 8), with real processes: a real sshd, the real agent, the
SGLang stand-in (``python -m console.sim.sglang``) READY on simulated GPUs. The agent is SIGSTOPped (its TCP
connection stays up, so nothing drops): within 2 ticks + the ping timeout the TUI's tracker, the real TUI and
the exporter say the host is stale and its session is not READY; after SIGCONT all come back to connected and
READY. Views are derived on the link's ticks, so they go stale while nothing arrives."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from console.config import Config, HostConfig
from console.core.sessions import derive_views
from console.link.link import SILENT_TICKS, HostLink
from console.link.ssh import parse_host_spec
from console.model import (
    ConnectionInfo,
    HostSnapshot,
    HostView,
    KillTarget,
    LaunchRequest,
    LaunchSpec,
    SessionInfo,
    SessionView,
    SupervisorRecord,
)
from console.ops import lifecycle
from console.ops.tracker import HostTracker
from console.sim.demo import FIXED_FLAGS
from console.ui.widgets.badge import badge_for, staleness
from tests.conftest import free_port
from tests.helpers.rel_util import REPO, agent_pids, cleanup_runs, popen_cli, write_config
from tests.helpers.sim_files import make_sim
from tests.helpers.wait import aholds_for, await_until, until

INTERVAL = 0.3
PING_TIMEOUT = 1.0
BOUND = SILENT_TICKS * INTERVAL + PING_TIMEOUT
"""How long a frozen agent may still read as connected: 2 ticks + the ping timeout."""
SLACK = 2.0
"""Scheduling slack on a loaded 2-core machine (the sample that was already on its way, the event loop)."""


@pytest.fixture
def sim(tmp_path):
    return make_sim(tmp_path, 2, tag="st")


def host_cfg(runs_dir: Path, d: Path) -> HostConfig:
    env = {"MTPCONSOLE_SIM_DIR": str(d), "MTPCONSOLE_SIM_SPEED": "20", "PYTHONPATH": str(REPO)}
    return HostConfig(runs_dir=str(runs_dir), python=sys.executable, gpu_source="sim", sim_dir=str(d),
                      launch_env=env, ping_timeout=PING_TIMEOUT)


def sim_link(sshd, runs_dir: Path, d: Path) -> HostLink:
    return HostLink(parse_host_spec(sshd.alias), host_cfg(runs_dir, d), ssh_config=str(sshd.ssh_config),
                    interval=INTERVAL)


async def launch_ready(lk: HostLink, model: Path) -> str:
    r = await lifecycle.launch(lk, LaunchRequest(
        host="testhost", command=[sys.executable, "-m", "console.sim.sglang"],
        flags=["--model-path", str(model), *FIXED_FLAGS], gpus=[0], port=free_port()), timeout=60)
    assert r.ok and r.state == "ready", r
    return r.session_id


def session_of(view: HostView | None, sid: str) -> SessionView | None:
    return next((s for s in view.sessions if s.session_id == sid), None) if view else None


def gpu0(view: HostView) -> SessionView | None:
    return next((c.session for c in view.current if c.index == 0), None)


@pytest.mark.sshd
async def test_frozen_agent_makes_the_trackers_views_stale_and_sigcont_brings_them_back(sshd, runs_dir, sim):
    d, model = sim
    lk = sim_link(sshd, runs_dir, d)
    views: list[tuple[float, HostView]] = []
    HostTracker(lk, interval=INTERVAL, on_view=lambda v: views.append((time.monotonic(), v)),
                on_log=lambda *a: None)
    runner = asyncio.create_task(lk.run())
    pid = None
    try:
        await asyncio.wait_for(lk.connected.wait(), 20)
        sid = await launch_ready(lk, model)

        def latest() -> HostView | None:
            return views[-1][1] if views else None

        def state() -> str | None:
            s = session_of(latest(), sid)
            return s.state if s else None
        assert await await_until(lambda: state() == "ready", 15), state()
        # a healthy agent with the short ping timeout never reads stale (pings answered, samples arriving)
        assert await aholds_for(lambda: lk.state == "connected" and state() == "ready", 1.5, step=0.05), (
            lk.state, state())

        pid = lk.hello["pid"]
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        assert await await_until(lambda: latest().snapshot.connection.state == "stale", BOUND + SLACK), lk.state
        took = time.monotonic() - t0
        assert took <= BOUND + SLACK, took
        v = latest()
        now = time.time()
        assert state() == "stale" and gpu0(v).state == "stale"
        assert badge_for(gpu0(v), v.snapshot, now, INTERVAL) == ("STALE", "stale")
        assert staleness(v.snapshot, now, INTERVAL) == "red"
        assert v.counts == {"stale": 2}, v.counts  # the READY GPU and the idle one: no fact without its age
        assert "answered no ping within 1 s" in (v.snapshot.connection.error or "")
        assert v.snapshot.connection.rtt_ms is None and v.advice == []
        # views are derived on a timer while nothing arrives: more of them, each older, none READY
        n, age0 = len(views), v.snapshot.age_s(now)
        assert await await_until(lambda: len(views) >= n + 3, 5 * INTERVAL + SLACK), len(views) - n
        later = latest()
        assert later.snapshot.age_s(time.time()) > age0
        assert not [x for at, x in views if at >= t0 + INTERVAL * 3 + 0.5 and session_of(x, sid).state == "ready"]

        os.kill(pid, signal.SIGCONT)
        t1 = time.monotonic()
        assert await await_until(lambda: latest().snapshot.connection.state == "connected" and state() == "ready",
                                 10), (lk.state, state())
        assert time.monotonic() - t1 < 10
        assert latest().snapshot.connection.error is None and gpu0(latest()).state == "ready"
        k = await lifecycle.kill(lk, KillTarget(host="testhost", session_id=sid), grace=5)
        assert k.ok, k
    finally:
        if pid:
            os.kill(pid, signal.SIGCONT)
        await lk.close()
        runner.cancel()
        cleanup_runs(runs_dir)


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def metric(m: dict, name: str, **labels: str) -> float | None:
    return m.get((name, tuple(sorted({"host": "testhost", **labels}.items()))))


def try_scrape(port: int) -> dict:
    try:
        return scrape(port)
    except OSError:
        return {}


@pytest.mark.sshd
async def test_ready_is_shown_once_health_agrees_and_never_flickers_back_to_loading(sshd, runs_dir, sim):
    """SGLang's warmup prints its own request's prefill line (serving evidence in the log) a moment before it says
    it is fired up, and /health answers 503 until then: the tracker's views read LOADING until /health answers
    200, then READY, never READY, LOADING, READY (the CI run of 507c7da caught that flicker: a first probe's 503
    made a READY session LOADING for 5 s); the warmup's 503 is no ``health_flap`` event."""
    d, model = sim
    lk = sim_link(sshd, runs_dir, d)
    views: list[HostView] = []
    tr = HostTracker(lk, interval=INTERVAL, on_view=views.append, on_log=lambda *a: None)
    runner = asyncio.create_task(lk.run())
    try:
        await asyncio.wait_for(lk.connected.wait(), 20)
        sid = await launch_ready(lk, model)
        assert await await_until(lambda: session_of(views[-1], sid) is not None
                                 and session_of(views[-1], sid).state == "ready", 15)
        await asyncio.sleep(2.0)
        states = [s.state for v in views if (s := session_of(v, sid)) is not None]
        first = states.index("ready")
        assert "loading" not in states[first:], states
        assert tr.health.get(sid) is True and sid in tr.healthy_once
        assert not [e for e in views[-1].events if e.kind == "health_flap"], views[-1].events
        k = await lifecycle.kill(lk, KillTarget(host="testhost", session_id=sid), grace=5)
        assert k.ok, k
    finally:
        await lk.close()
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        cleanup_runs(runs_dir)


@pytest.mark.sshd
async def test_frozen_agent_reads_disconnected_and_stale_in_the_exporter(sshd, runs_dir, sim, tmp_path):
    """`mtpconsole export` as a real process: the frozen host's `host_connected` is 0, its link `stale`, its
    GPU's session `stale` (not `ready`) within the bound; after SIGCONT, 1 and `ready` again."""
    d, model = sim
    lk = sim_link(sshd, runs_dir, d)  # the test's own agent launches the server; the exporter's is frozen
    await lk.open()
    exporter = None
    frozen = None
    try:
        sid = await launch_ready(lk, model)
        hc = host_cfg(runs_dir, d)
        cfg = write_config(tmp_path / "config.toml", {"testhost": {
            "runs_dir": hc.runs_dir, "python": hc.python, "gpu_source": "sim", "sim_dir": str(d),
            "ping_timeout": PING_TIMEOUT}})
        before = agent_pids()
        port = free_port()
        exporter = popen_cli("export", "--host", "testhost", "--config", str(cfg), "--ssh-config",
                             str(sshd.ssh_config), "--interval", str(INTERVAL), "--listen", f"127.0.0.1:{port}",
                             env={"MTPCONSOLE_AUDIT_LOG": str(tmp_path / "audit.jsonl")})

        def ready_now(m: dict) -> bool:
            return (metric(m, "mtpconsole_host_connected") == 1.0
                    and metric(m, "mtpconsole_gpu_session_state", gpu="0", state="ready") == 1.0)
        assert await await_until(lambda: ready_now(try_scrape(port)), 30), try_scrape(port)
        new = agent_pids() - before
        assert len(new) == 1, new
        frozen = new.pop()
        m = scrape(port)
        assert metric(m, "mtpconsole_host_link_state", state="connected") == 1.0

        os.kill(frozen, signal.SIGSTOP)
        t0 = time.monotonic()

        def stale_now(m: dict) -> bool:
            return (metric(m, "mtpconsole_host_connected") == 0.0
                    and metric(m, "mtpconsole_host_link_state", state="stale") == 1.0
                    and metric(m, "mtpconsole_gpu_session_state", gpu="0", state="stale") == 1.0
                    and metric(m, "mtpconsole_gpu_session_state", gpu="0", state="ready") == 0.0)
        assert await await_until(lambda: stale_now(try_scrape(port)), BOUND + SLACK), scrape(port)
        assert time.monotonic() - t0 <= BOUND + SLACK
        m = scrape(port)
        assert metric(m, "mtpconsole_gpu_session_state", gpu="1", state="stale") == 1.0  # no "idle" claim either
        assert metric(m, "mtpconsole_host_sample_age_seconds") > 2 * INTERVAL

        os.kill(frozen, signal.SIGCONT)
        assert await await_until(lambda: ready_now(try_scrape(port)), 10), scrape(port)
        assert metric(scrape(port), "mtpconsole_host_link_state", state="stale") == 0.0
        k = await lifecycle.kill(lk, KillTarget(host="testhost", session_id=sid), grace=5)
        assert k.ok, k
    finally:
        if frozen:
            os.kill(frozen, signal.SIGCONT)
        if exporter is not None:
            exporter.terminate()
            try:
                exporter.wait(10)
            except Exception:
                exporter.kill()
                exporter.wait(5)
        await lk.close()
        cleanup_runs(runs_dir)


@pytest.mark.sshd
async def test_frozen_agent_in_the_real_tui_badge_and_header_say_stale(sshd, runs_dir, sim):
    """The real app over the real link (LiveBackend): the READY panel's badge reads STALE and the host header
    says ``stale`` with the sample's age while the agent is frozen; READY again after SIGCONT."""
    from console.ops.backend import LiveBackend
    from console.ui.app import make_app
    from console.ui.widgets.gpu_panel import GpuPanel
    from console.ui.widgets.host_header import HostHeader

    d, model = sim
    lk = sim_link(sshd, runs_dir, d)
    backend = LiveBackend(Config(hosts={"testhost": host_cfg(runs_dir, d)}), [lk], interval=INTERVAL)
    app = make_app(backend, interval=INTERVAL)
    app.animation_level = "none"
    pid = None
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            assert await await_until(lambda: lk.chan is not None, 20)
            await launch_ready(lk, model)

            def badge() -> str:
                p = [p for p in app.query(GpuPanel) if p.host == "testhost" and p.index == 0]
                return p[0].badge_label if p else ""

            def header() -> str:
                h = app.query(HostHeader)
                return h.first().render().plain if h else ""

            def shown() -> str:
                return f"badge {badge()!r}, header {header()!r}"
            await until(pilot, lambda: badge() == "READY", 20, what=shown)
            assert " connected " in f" {header()} ".replace("·", " "), header()
            pid = lk.hello["pid"]
            os.kill(pid, signal.SIGSTOP)
            t0 = time.monotonic()
            await until(pilot, lambda: badge() == "STALE" and " stale " in header().replace("·", " "),
                        BOUND + SLACK + 1.0, what=shown)
            assert time.monotonic() - t0 <= BOUND + SLACK + 1.0
            text = header()
            assert "rtt N/A" in text and "age " in text and "STALE 2" in text and "answered no ping" in text, text
            assert "stale-red" in app.query_one(HostHeader).classes
            os.kill(pid, signal.SIGCONT)
            pid = None
            await until(pilot, lambda: badge() == "READY" and " connected " in header().replace("·", " "), 10,
                        what=shown)
    finally:
        if pid:
            os.kill(pid, signal.SIGCONT)
        await backend.stop()
        cleanup_runs(runs_dir)


def test_a_stale_link_makes_live_views_stale_not_unreachable_and_keeps_ended_ones():
    """The rule below every view: on a stale link (channel open, agent silent) a live session reads STALE even
    when its last sample is young; an ended one keeps its verdict; a dropped link reads UNREACHABLE."""
    spec = LaunchSpec(session_id="s1", argv=["python3", "-m", "sglang.launch_server"], gpus=[0], port=30000,
                      created_at=90.0)
    live = SessionInfo(session_id="s1", run_dir="/r/s1", spec=spec, server_alive=True, supervisor_alive=True,
                       record=SupervisorRecord(supervisor_pid=10, pid=11, pgid=11, start_ticks=5, started_at=91.0))
    snap = HostSnapshot(name="h", connection=ConnectionInfo(state="connected"), received_at=100.0, sessions=[live])
    fresh = derive_views(snap, {}, 100.1, interval=1.0)
    assert [v.state for v in fresh] == ["loading"]
    stale = snap.model_copy(update={"connection": ConnectionInfo(state="stale", error="no ping answer")})
    assert [v.state for v in derive_views(stale, {}, 100.1, interval=1.0)] == ["stale"]
    down = snap.model_copy(update={"connection": ConnectionInfo(state="reconnecting")})
    assert [v.state for v in derive_views(down, {}, 100.1, interval=1.0)] == ["unreachable"]
