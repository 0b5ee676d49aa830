"""Launch / kill / relaunch over a real sshd with real processes, ports and logs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from console.config import HostConfig
from console.link.client import LinkListener
from console.link.link import HostLink
from console.link.ssh import parse_host_spec
from console.model import KillTarget, LaunchRequest, LogChunk
from console.ops import lifecycle
from tests.conftest import free_port
from tests.helpers.wait import await_until

SERVER = str(Path(__file__).parent / "helpers" / "sgl_like.py")
pytestmark = pytest.mark.sshd


@pytest.fixture
async def link(sshd, runs_dir):
    cfg = HostConfig(runs_dir=str(runs_dir), python="python3", gpu_source="none")
    lk = HostLink(parse_host_spec(sshd.alias), cfg, ssh_config=str(sshd.ssh_config), interval=0.5)
    await lk.open()
    yield lk
    await lk.close()
    _cleanup(runs_dir)


def _cleanup(runs_dir: Path) -> None:
    """Kill whatever a test left (by recorded process group), bounded."""
    for rec in runs_dir.glob("*/record.json"):
        r = json.loads(rec.read_text())
        for fn, arg in ((os.killpg, r["pgid"]), (os.kill, r["pid"])):
            try:
                fn(arg, signal.SIGKILL)
            except OSError:
                pass


def req(port, *extra, mode="ready", **kw):
    return LaunchRequest(host="testhost", command=[sys.executable, SERVER],
                         flags=["--model-path", "/m", "--mode", mode, *extra], gpus=[0], port=port, **kw)


async def test_launch_ready_then_kill(link, runs_dir):
    port = free_port()
    seen = []
    r = await lifecycle.launch(link, req(port), seen.append, timeout=30)
    assert r.ok and r.state == "ready", r
    names = [s.name for s in r.steps]
    assert names == ["preflight", "spawned", "logging", "listening", "healthy", "ready", "on GPU"]
    assert all(s.state in ("ok", "skipped") for s in r.steps)
    assert all(s.elapsed_s is not None for s in r.steps)
    assert [s.state for s in r.steps if s.name == "on GPU"] == ["skipped"]  # no GPU info: said so
    assert seen and seen[-1][-1].state in ("ok", "skipped")
    run_dir = runs_dir / r.session_id
    spec = json.loads((run_dir / "spec.json").read_text())
    assert spec["argv"][-2:] == ["--port", str(port)] and spec["port"] == port
    assert (run_dir / "record.json").exists() and (run_dir / "output.log").stat().st_size > 0
    k = await lifecycle.kill(link, KillTarget(host="testhost", session_id=r.session_id), grace=5)
    assert k.ok, k
    ex = json.loads((run_dir / "exit.json").read_text())
    assert ex["stopped_by_operator"] is True and ex["signal"] == signal.SIGTERM


async def test_incident_oom_fails_fast_with_cause(link):
    port = free_port()
    t0 = time.monotonic()
    r = await lifecycle.launch(link, req(port, "--delay", "2", mode="oom"), timeout=60)
    elapsed = time.monotonic() - t0
    assert not r.ok and r.state == "failed"
    assert r.cause == "gpu_oom"
    assert "Not enough memory" in r.line
    assert r.hint
    assert any("Not enough memory" in line for line in r.log_tail)
    # The server dies ~2 s in; FAILED must be reported within 1 s of the exit (+ startup slack).
    assert elapsed < 2 + 1 + 2.5, elapsed
    failed = [s for s in r.steps if s.state == "failed"]
    assert len(failed) == 1 and "gpu_oom" in failed[0].evidence


async def test_bad_flags_fail_as_bad_flags(link):
    r = await lifecycle.launch(link, req(free_port(), "--mamba-scheduler-strategy", "x"), timeout=30)
    assert not r.ok and r.cause is None and r.session_id is None  # refused by the flags check: nothing ran
    assert "unrecognized arguments" in r.line and r.refusals == [r.line]


async def test_sigterm_ignored_escalates_to_sigkill(link):
    r = await lifecycle.launch(link, req(free_port(), mode="ignore_term"), timeout=30)
    assert r.ok
    k = await lifecycle.kill(link, KillTarget(host="testhost", session_id=r.session_id), grace=1.0)
    assert k.ok, k
    names = {s.name: s.state for s in k.steps}
    assert names["exited"] == "failed" and names["SIGKILL"] == "ok"


async def test_escaped_worker_is_cleaned_and_reported(link, runs_dir):
    r = await lifecycle.launch(link, req(free_port(), mode="escape_worker"), timeout=30)
    assert r.ok
    snap = await lifecycle.fresh_snapshot(link)
    members = [p for p in snap.servers if p.session_id == r.session_id and p.role != "supervisor"]
    groups = {p.pgid for p in members}
    assert len(members) == 2 and len(groups) == 2, members  # the worker left the launcher's group
    k = await lifecycle.kill(link, KillTarget(host="testhost", session_id=r.session_id), grace=5)
    assert k.ok, k
    target = next(s for s in k.steps if s.name == "target")
    assert all(str(p.pid) in target.evidence for p in members)  # reported, by pid
    for p in members:
        assert not Path(f"/proc/{p.pid}").exists() or Path(f"/proc/{p.pid}/stat").read_text().split()[2] == "Z"


async def test_port_and_gpu_conflicts_are_refused_with_holder(link):
    port = free_port()
    r = await lifecycle.launch(link, req(port), timeout=30)
    assert r.ok
    r2 = await lifecycle.launch(link, req(port), timeout=30)
    assert not r2.ok and "held by session " + r.session_id in r2.error
    await lifecycle.kill(link, KillTarget(host="testhost", session_id=r.session_id), grace=5)


async def test_two_consoles_same_gpu_exactly_one_wins(sshd, runs_dir, link):
    cfg = HostConfig(runs_dir=str(runs_dir), python="python3", gpu_source="none")
    other = HostLink(parse_host_spec(sshd.alias), cfg, ssh_config=str(sshd.ssh_config))
    await other.open()
    try:
        a, b = await asyncio.gather(lifecycle.launch(link, req(free_port()), wait=False),
                                    lifecycle.launch(other, req(free_port()), wait=False))
        assert sorted([a.ok, b.ok]) == [False, True]
        loser = a if not a.ok else b
        assert "GPU 0 is held by session" in loser.error
    finally:
        await other.close()


async def test_connection_aborted_after_launch_server_survives_and_log_unbroken(sshd, runs_dir):
    cfg = HostConfig(runs_dir=str(runs_dir), python="python3", gpu_source="none")
    lk = HostLink(parse_host_spec(sshd.alias), cfg, ssh_config=str(sshd.ssh_config), interval=0.5)
    await lk.open()
    r = await lifecycle.launch(lk, req(free_port(), "--delay", "1.5"), wait=False)
    assert r.ok
    lines: list[str] = []

    class Lines(LinkListener):
        def on_log(self, chunk: LogChunk) -> None:
            lines.extend(chunk.data.splitlines())
    lk.listen(Lines())
    await lk.follow_log(r.session_id, 0)
    assert await await_until(lambda: lines, 10), "no log line before the abort"
    lk.abort_connection()  # no goodbye: a dead network
    assert await await_until(lambda: lk.chan is None, 5)
    runner = asyncio.create_task(lk.run())
    try:
        await asyncio.wait_for(lk.connected.wait(), 15)
        await await_until(lambda: any("ready to roll" in x for x in lines), 20, step=0.1)
        log = (runs_dir / r.session_id / "output.log").read_text().splitlines()
        assert lines == log[:len(lines)] and any("ready to roll" in x for x in lines), (lines, log)
        assert len(lines) == len(set(lines)) or lines == log[:len(lines)]  # nothing twice
        sessions = await lk.request("sessions")
        s = next(x for x in sessions if x["session_id"] == r.session_id)
        assert s["server_alive"] and not s["exit"]
    finally:
        await lk.close()
        runner.cancel()
        _cleanup(runs_dir)


async def test_old_log_of_another_session_is_never_shown(link, runs_dir):
    old = runs_dir / "20200101-000000-gpu0-dead"
    old.mkdir()
    (old / "output.log").write_text("speculative_algorithm=None OLD SERVER\n")
    r = await lifecycle.launch(link, req(free_port()), timeout=30)
    assert r.ok
    got = await link.request("read_log", {"session_id": r.session_id, "offset": 0, "max_bytes": 1 << 20})
    assert "OLD SERVER" not in got["data"] and "ready to roll" in got["data"]
    await lifecycle.kill(link, KillTarget(host="testhost", session_id=r.session_id), grace=5)


@pytest.mark.parametrize("evil", ["; touch CANARY #", "$(touch CANARY)", "`touch CANARY`", "a'b\"c", "x\ny && touch CANARY"])
async def test_metacharacters_arrive_literally(link, runs_dir, tmp_path, evil, monkeypatch):
    echo = tmp_path / "argv.json"
    canary_dir = runs_dir
    r = await lifecycle.launch(link, LaunchRequest(
        host="testhost", command=[sys.executable, SERVER],
        flags=["--model-path", evil, "--echo-argv", str(echo), "--lifetime", "2"], gpus=[0],
        port=free_port(), env={"EVIL": evil}), wait=False)
    assert r.ok, r
    assert await await_until(echo.exists, 10, step=0.05), "the server never wrote its argv"
    argv = json.loads(echo.read_text())
    assert evil in argv
    for d in (canary_dir, canary_dir / r.session_id, Path.home(), Path.cwd()):
        assert not (d / "CANARY").exists()
    await lifecycle.kill(link, KillTarget(host="testhost", session_id=r.session_id), grace=5)


async def test_missing_server_binary_clear_error_nothing_left(link, runs_dir):
    r = await lifecycle.launch(link, LaunchRequest(host="testhost", command=["/nonexistent/sglang"], gpus=[0],
                                                   port=free_port()))
    assert not r.ok and "does not exist" in r.error
    assert [p for p in runs_dir.iterdir() if not p.name.startswith(".")] == []


def drop_after_spawned(link):
    """An on_steps callback that aborts the SSH connection once 'spawned' is confirmed."""
    def on_steps(steps):
        if not on_steps.dropped and any(s.name == "spawned" and s.state == "ok" for s in steps):
            on_steps.dropped = True
            asyncio.get_running_loop().call_soon(link.abort_connection)
    on_steps.dropped = False
    return on_steps


async def test_connection_dropped_mid_launch_the_launch_resumes_to_ready(link):
    """The link is kept up (as the TUI and `launch` do): a drop after 'spawned' is waited out."""
    runner = asyncio.create_task(link.run())
    on_steps = drop_after_spawned(link)
    try:
        r = await lifecycle.launch(link, req(free_port(), "--delay", "1.5"), on_steps, timeout=60)
        assert on_steps.dropped and r.ok and r.state == "ready", r
        assert link.state == "connected"
        k = await lifecycle.kill(link, KillTarget(host="testhost", session_id=r.session_id), grace=5)
        assert k.ok
    finally:
        runner.cancel()


async def test_server_dying_while_disconnected_is_still_reported_failed(link):
    runner = asyncio.create_task(link.run())
    on_steps = drop_after_spawned(link)
    try:
        r = await lifecycle.launch(link, req(free_port(), "--delay", "0.5", mode="oom"), on_steps, timeout=60)
        assert on_steps.dropped and not r.ok and r.cause == "gpu_oom", r
    finally:
        runner.cancel()
