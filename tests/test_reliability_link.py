"""Connection faults over a real sshd with real processes: the SSH connection aborted while idle, during a
launch and during a kill; the sshd restarted; the agent killed. Servers keep running, HostLink.run
reconnects with backoff and re-attaches; logs followed by offset lose nothing and repeat nothing; the audit
log has every request exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest

from console.audit import Audit
from console.model import KillTarget
from console.ops import lifecycle
from tests.conftest import free_port
from tests.helpers.heard import Heard
from tests.helpers.rel_util import agent_pids, cleanup_runs, req, ssh_link
from tests.helpers.wait import await_until

pytestmark = pytest.mark.sshd


class LogSink(Heard):
    """Everything the link pushed for one session, in order."""

    def __init__(self, link, sid):
        super().__init__(link, sid)

    def assert_exact(self, log_path, min_len: int = 1):
        """What arrived is exactly the file's prefix: contiguous offsets, nothing lost, nothing twice."""
        raw = open(log_path, "rb").read()
        text = self.text()
        assert len(text) >= min_len
        assert raw.decode("utf-8", "replace").startswith(text), (text[-200:], raw[-200:])
        off = 0
        for o, d in ((c.offset, c.data) for c in self.chunks):
            assert o == off, (o, off)
            off += len(d.encode())


@pytest.fixture
def audit(tmp_path):
    a = Audit(tmp_path / "audit.jsonl")
    yield a
    a.close()


def audit_ops(path) -> list[dict]:
    return [json.loads(x) for x in open(path).read().splitlines()]


async def _reconnected(link, timeout=20.0):
    await asyncio.wait_for(link.connected.wait(), timeout)


async def test_idle_abort_reconnects_log_exact_audit_once(sshd, runs_dir, audit, tmp_path):
    lk = ssh_link(sshd, runs_dir)
    lk.audit = audit
    await lk.open()
    runner = asyncio.create_task(lk.run())
    try:
        sink = LogSink(lk, sid := lifecycle.new_session_id([0], time.time()))
        r = await lifecycle.launch(lk, req(free_port(), "--delay", "0.2"), wait=False, session_id=sid)
        assert r.ok, r
        log = runs_dir / r.session_id / "output.log"
        heard = Heard(lk)
        for _ in range(2):  # two drops in a row while idle
            await asyncio.sleep(0.6)
            lk.abort_connection()
            await await_until(lambda: lk.chan is None, 5)
            await _reconnected(lk)
        await await_until(lambda: "ready to roll" in sink.text(), 15)
        after = sink.text().count("Decode batch")
        assert await await_until(lambda: sink.text().count("Decode batch") >= after + 2, 15)  # more after the drops
        sink.assert_exact(log, min_len=100)
        assert "ready to roll" in sink.text() and "Decode batch" in sink.text()
        states = [c.state for c in heard.states]
        assert states.count("reconnecting") >= 2 and states[-1] == "connected"
        sessions = await lk.request("sessions")
        s = next(x for x in sessions if x["session_id"] == r.session_id)
        assert s["server_alive"] and not s["exit"]  # the server never noticed
        launches = [e for e in audit_ops(tmp_path / "audit.jsonl") if e["op"] == "launch"]
        assert len(launches) == 1 and launches[0]["ok"]
    finally:
        await lk.close()
        runner.cancel()
        cleanup_runs(runs_dir)


async def test_abort_during_launch_server_survives_and_state_is_true(sshd, runs_dir, audit, tmp_path):
    lk = ssh_link(sshd, runs_dir)
    lk.audit = audit
    await lk.open()
    runner = asyncio.create_task(lk.run())
    try:
        seen = []

        def on_steps(steps):
            seen.append({s.name: s.state for s in steps})
            if seen[-1].get("spawned") == "ok" and not getattr(on_steps, "done", False):
                on_steps.done = True
                lk.abort_connection()

        r = await asyncio.wait_for(lifecycle.launch(lk, req(free_port(), "--delay", "1.5"), on_steps, timeout=30), 40)
        # Either the link came back before the next request and the launch was confirmed READY, or a
        # request was in flight and the launch says it lost contact, never guessing.
        assert (r.ok and r.state == "ready") or "lost contact with the host" in (r.error or ""), r
        assert on_steps.done and lk.attempts == 0
        await _reconnected(lk)
        sid = r.session_id
        snap = await lifecycle.fresh_snapshot(lk)
        s = next(x for x in snap.sessions if x.session_id == sid)
        assert s.server_alive and s.exit is None
        got = await await_until(lambda: "ready to roll" in (runs_dir / sid / "output.log").read_text(), 15)
        assert got
        k = await lifecycle.kill(lk, KillTarget(host="testhost", session_id=sid), grace=5)
        assert k.ok, k
        ops = audit_ops(tmp_path / "audit.jsonl")
        assert [e["op"] for e in ops].count("launch") == 1
    finally:
        await lk.close()
        runner.cancel()
        cleanup_runs(runs_dir)


async def test_abort_during_kill_then_kill_again_confirms(sshd, runs_dir):
    lk = ssh_link(sshd, runs_dir)
    await lk.open()
    runner = asyncio.create_task(lk.run())
    try:
        r = await lifecycle.launch(lk, req(free_port(), mode="ignore_term"), timeout=30)
        assert r.ok, r

        def on_steps(steps):
            if any(s.name == "SIGTERM" and s.state == "ok" for s in steps) and not getattr(on_steps, "done", False):
                on_steps.done = True
                lk.abort_connection()

        k = await asyncio.wait_for(lifecycle.kill(lk, KillTarget(host="testhost", session_id=r.session_id),
                                                  on_steps, grace=1.0), 30)
        assert not k.ok and k.state == "stopping" and "lost" in (k.error or "") + str(k.steps), k
        await _reconnected(lk)
        k2 = await lifecycle.kill(lk, KillTarget(host="testhost", session_id=r.session_id), grace=1.0)
        assert k2.ok, k2
        ex = json.loads((runs_dir / r.session_id / "exit.json").read_text())
        assert ex["stopped_by_operator"] is True
    finally:
        await lk.close()
        runner.cancel()
        cleanup_runs(runs_dir)


async def test_sshd_down_then_restarted_backoff_and_reattach(sshd, runs_dir):
    lk = ssh_link(sshd, runs_dir, connect_timeout=3.0)
    await lk.open()
    runner = asyncio.create_task(lk.run())
    r = None
    try:
        sink = LogSink(lk, sid := lifecycle.new_session_id([0], time.time()))
        r = await lifecycle.launch(lk, req(free_port()), wait=False, session_id=sid)
        assert r.ok, r
        sshd.stop()
        lk.abort_connection()
        t0 = time.monotonic()
        assert await await_until(lambda: lk.attempts >= 2, 10), lk.state
        snap = lk.snapshot()
        assert snap.connection.state == "unreachable" and "cannot connect" in (snap.connection.error or "")
        assert snap.connection.next_retry_at is not None
        retries = lk.attempts
        sshd.restart()
        await _reconnected(lk, timeout=30)
        assert time.monotonic() - t0 < 40
        assert lk.attempts == 0 and retries >= 2
        await await_until(lambda: "ready to roll" in sink.text() and len(sink.text()) >= 100, 15)
        sink.assert_exact(runs_dir / r.session_id / "output.log", min_len=100)
        assert "ready to roll" in sink.text()
        sessions = await lk.request("sessions")
        assert next(x for x in sessions if x["session_id"] == r.session_id)["server_alive"]
    finally:
        if sshd.proc.poll() is not None:
            sshd.restart()  # the fixture is shared: always leave it running
        await lk.close()
        runner.cancel()
        cleanup_runs(runs_dir)


async def test_agent_killed_is_restarted_and_sessions_intact(sshd, runs_dir):
    lk = ssh_link(sshd, runs_dir)
    await lk.open()
    runner = asyncio.create_task(lk.run())
    try:
        sink = LogSink(lk, sid := lifecycle.new_session_id([0], time.time()))
        r = await lifecycle.launch(lk, req(free_port()), wait=False, session_id=sid)
        assert r.ok, r
        old = lk.hello["pid"]
        assert old in agent_pids()  # found by its command line, like an operator would
        os.kill(old, signal.SIGKILL)
        await await_until(lambda: lk.chan is None, 5)
        await _reconnected(lk)
        assert lk.hello["pid"] != old and lk.hello["pid"] in agent_pids() and old not in agent_pids()
        await await_until(lambda: "ready to roll" in sink.text() and len(sink.text()) >= 100, 15)
        sink.assert_exact(runs_dir / r.session_id / "output.log", min_len=100)
        snap = await lifecycle.fresh_snapshot(lk)
        s = next(x for x in snap.sessions if x.session_id == r.session_id)
        assert s.server_alive and s.supervisor_alive and s.exit is None
        k = await lifecycle.kill(lk, KillTarget(host="testhost", session_id=r.session_id), grace=5)
        assert k.ok, k
    finally:
        await lk.close()
        runner.cancel()
        cleanup_runs(runs_dir)


async def test_sshd_restarted_while_connected_then_connection_aborted(sshd, runs_dir):
    """A service-manager restart of sshd keeps the open session; a later drop reconnects to the new daemon."""
    lk = ssh_link(sshd, runs_dir)
    await lk.open()
    runner = asyncio.create_task(lk.run())
    try:
        sink = LogSink(lk, sid := lifecycle.new_session_id([0], time.time()))
        r = await lifecycle.launch(lk, req(free_port()), wait=False, session_id=sid)
        assert r.ok, r
        old_agent = lk.hello["pid"]
        sshd.restart()
        assert await lk.request("ping", timeout=5)  # the same channel still answers
        assert lk.hello["pid"] == old_agent and lk.state == "connected"
        lk.abort_connection()
        await await_until(lambda: lk.chan is None, 5)
        await _reconnected(lk)
        await await_until(lambda: "ready to roll" in sink.text(), 15)
        sink.assert_exact(runs_dir / sid / "output.log", min_len=100)
        k = await lifecycle.kill(lk, KillTarget(host="testhost", session_id=sid), grace=5)
        assert k.ok, k
    finally:
        if sshd.proc.poll() is not None:
            sshd.restart()
        await lk.close()
        runner.cancel()
        cleanup_runs(runs_dir)


async def test_dropped_connection_reconnects_at_once_without_false_unreachable(sshd, runs_dir):
    """Regression: after a drop the link reused the dead SSH connection, failed with 'ChannelOpenError: SSH
    connection closed', showed the host UNREACHABLE and waited a backoff before reconnecting."""
    lk = ssh_link(sshd, runs_dir)
    await lk.open()
    runner = asyncio.create_task(lk.run())
    try:
        for _ in range(3):
            probe = Heard(lk)
            t0 = time.monotonic()
            lk.abort_connection()
            await await_until(lambda: lk.chan is None, 5)
            await _reconnected(lk, timeout=10)
            assert time.monotonic() - t0 < 3.0
            assert [c.state for c in probe.states] == ["reconnecting", "connected"], probe.states
            lk.unlisten(probe)
    finally:
        await lk.close()
        runner.cancel()


async def test_frozen_agent_is_reported_not_waited_on(sshd, runs_dir):
    """A host that stops answering mid-session (agent SIGSTOPped: the TCP connection stays up): a snapshot
    request times out with a clear reason within its bound, the host reads STALE (its channel is open, its
    agent silent: not unreachable), with the age of its last sample, and the link recovers when the host does."""
    from console.commands.status import _one, render_text

    lk = ssh_link(sshd, runs_dir)
    await lk.open()
    pid = lk.hello["pid"]
    try:
        assert await await_until(lambda: lk.received_at is not None, 5)  # one sample came before the freeze
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        snap = await _one(lk, 1.5)
        assert time.monotonic() - t0 < 3
        assert snap.connection.state == "stale" and "no snapshot: timed out after 1.5 s" in snap.connection.error
        line = render_text(snap, now=(snap.received_at or 0) + 7.2)
        assert line.startswith("testhost: stale (last sample 7 s ago) — testhost: no snapshot: timed out"), line
        os.kill(pid, signal.SIGCONT)
        assert await lk.request("ping", timeout=5)
        assert lk.snapshot().connection.state == "connected" and lk.snapshot().connection.error is None
    finally:
        os.kill(pid, signal.SIGCONT)
        await lk.close()


async def test_abort_with_request_in_flight_launch_resumes_and_confirms_ready(sshd, runs_dir):
    lk = ssh_link(sshd, runs_dir)
    await lk.open()
    runner = asyncio.create_task(lk.run())
    try:
        def on_steps(steps):
            if any(s.name == "listening" and s.state == "running" for s in steps) and not getattr(on_steps, "done", 0):
                on_steps.done = True
                lk.abort_connection()  # the port_open request goes out on a dying connection

        r = await asyncio.wait_for(lifecycle.launch(lk, req(free_port(), "--delay", "1.0"), on_steps, timeout=30), 40)
        # the link is kept up (HostLink.run): the launch waits out the drop and confirms every step
        assert r.ok and r.state == "ready", r
        assert getattr(on_steps, "done", False)
        snap = await lifecycle.fresh_snapshot(lk)
        s = next(x for x in snap.sessions if x.session_id == r.session_id)
        assert s.server_alive and s.exit is None
        k = await lifecycle.kill(lk, KillTarget(host="testhost", session_id=r.session_id), grace=5)
        assert k.ok, k
    finally:
        await lk.close()
        runner.cancel()
        cleanup_runs(runs_dir)


async def test_tui_tracker_log_path_survives_drops_exactly(sshd, runs_dir):
    """The TUI's path (HostTracker over HostLink.run): the lines a followed session shows are the file's lines,
    in order, none lost and none twice, across two connection drops."""
    from console.ops.tracker import HostTracker

    lk = ssh_link(sshd, runs_dir)
    shown: list[str] = []
    views = []
    tr = HostTracker(lk, interval=0.3, on_view=views.append,
                     on_log=lambda host, sid, lines: shown.extend(lines))
    runner = asyncio.create_task(lk.run())
    try:
        await _reconnected(lk)
        r = await lifecycle.launch(lk, req(free_port(), "--delay", "1.5"), wait=False)
        assert r.ok, r
        assert await await_until(lambda: r.session_id in tr.logs, 10)
        shown[:0] = await tr.follow(r.session_id, 5000)
        for _ in range(2):
            await asyncio.sleep(0.7)
            lk.abort_connection()
            await await_until(lambda: lk.chan is None, 5)
            await _reconnected(lk)
        await await_until(lambda: any("ready to roll" in x for x in shown), 15)
        log_file = runs_dir / r.session_id / "output.log"
        await await_until(lambda: len(shown) >= len(log_file.read_text().splitlines()) - 1, 10)
        file_lines = log_file.read_text().splitlines()
        assert shown == file_lines[:len(shown)] and len(shown) >= len(file_lines) - 1, (shown, file_lines)
        assert any("Load weight end" in x for x in shown)  # written after the first drop

        def live_state() -> str | None:
            live = [v for v in views[-1].sessions if v.session_id == r.session_id] if views else []
            return live[0].state if live else None
        assert await await_until(lambda: live_state() == "ready", 10), live_state()
        k = await lifecycle.kill(lk, KillTarget(host="testhost", session_id=r.session_id), grace=5)
        assert k.ok, k
    finally:
        await lk.close()
        runner.cancel()
        cleanup_runs(runs_dir)
