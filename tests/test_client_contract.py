"""The typed wire's contract: every op of the agent's table has one HostClient method, the protocol doc names
exactly those ops, every error kind the agent sends has its class, and every op driven through the client
against a real agent (the `local` host, simulated GPUs, real processes) returns its model."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import subprocess
import sys
import uuid

import pytest

from console.config import HostConfig
from console.host.agent import Agent
from console.host.hostlib import ERROR_KINDS
from console.link import protocol
from console.link.client import HostClient
from console.link.errors import (
    ERRORS,
    BadRequest,
    NoSuchProcess,
    NotEnded,
    NotFound,
    Refused,
    TimedOut,
    UnknownOp,
)
from console.link.link import HostLink
from console.link.ssh import HostSpec
from console.model import (
    AgentHello,
    ExitEvent,
    ForeignOutput,
    GpuSamples,
    HostSnapshot,
    HttpResult,
    LaunchResult,
    LaunchSpec,
    LogChunk,
    PortOwner,
    ProcInfo,
    RunResult,
    SessionEnded,
    SessionInfo,
    Signalled,
    VmStat,
)
from tests.conftest import free_port
from tests.helpers.heard import Heard
from tests.helpers.rel_util import cleanup_runs, kill_quietly
from tests.helpers.wait import await_until

NOT_OPS = {"of", "name", "wire"}
"""HostClient's public names that are not ops."""


def client_ops() -> set[str]:
    return {n for n, _ in inspect.getmembers(HostClient, inspect.iscoroutinefunction) if not n.startswith("_")}


def documented_ops() -> set[str]:
    """The ops the protocol doc lists: the lines of its requests list that begin with ````name````."""
    doc = protocol.__doc__ or ""
    section = doc.split("Console -> agent (requests)", 1)[1].split("Agent -> console (pushed)", 1)[0]
    section = section.split("::\n", 1)[1]  # the list, after its introduction
    return {m.group(1) for line in section.splitlines() if (m := re.match(r"``([a-z_]+)[ `]", line))}


def test_one_client_method_per_agent_op():
    assert client_ops() == set(Agent.answered_ops())
    assert not (NOT_OPS & client_ops())


def test_the_protocol_doc_names_every_op_and_no_other():
    assert documented_ops() == set(Agent.answered_ops())


def test_every_error_kind_has_its_class():
    assert set(ERRORS) == set(ERROR_KINDS)
    assert all(ERRORS[k].kind == k for k in ERRORS)


@pytest.fixture
def sim(tmp_path):
    d = tmp_path / "sim"
    (d / "alloc").mkdir(parents=True)
    (d / "gpus.json").write_text(json.dumps([{"index": i, "uuid": f"GPU-c{i}", "name": "Sim", "mem_total_mib": 97887,
                                              "power_limit_w": 600.0} for i in range(2)]))
    return d


@pytest.fixture
async def link(sim, runs_dir, monkeypatch):
    monkeypatch.setenv("MTPCONSOLE_AUDIT_LOG", str(runs_dir.parent / "audit.jsonl"))
    lk = HostLink(HostSpec(name="local", local=True),
                  HostConfig(python=sys.executable, runs_dir=str(runs_dir), gpu_source="sim", sim_dir=str(sim)),
                  interval=0.3)
    heard = Heard(lk)
    await lk.open()
    lk.heard = heard  # type: ignore[attr-defined]
    sent: set[str] = set()
    real = lk.request

    async def recording(op, args=None, **kw):
        sent.add(op)
        return await real(op, args, **kw)

    lk.request = recording  # type: ignore[method-assign]
    lk.sent = sent  # type: ignore[attr-defined]
    kept = asyncio.create_task(lk.run())  # kept up: the link ticks
    yield lk
    await lk.close()
    await asyncio.wait_for(kept, 10)
    cleanup_runs(runs_dir)


async def test_every_op_through_the_client_returns_its_model(link, tmp_path):
    c: HostClient = link.client
    assert HostClient.of(link) is c and HostClient.of(c) is c
    await _host_ops(c)
    await _file_and_command_ops(c, tmp_path)
    await _session_ops(c, link.heard)
    await _foreign_output(c, tmp_path)
    # the link ticks its listeners only when the agent is quiet: samples every 5 s leave it silent for 0.3 s often
    assert await c.set_interval(5.0) == 5.0
    ticks = link.heard.ticks
    assert await await_until(lambda: link.heard.ticks > ticks, 10)
    with pytest.raises(UnknownOp, match="unknown op"):
        await link.request("no_such_op")
    assert link.sent >= set(Agent.answered_ops()), set(Agent.answered_ops()) - link.sent
    assert link.heard.states and link.heard.states[-1].state == "connected"


async def test_a_link_ticks_its_listeners_only_while_its_agent_is_quiet(link):
    c: HostClient = link.client
    assert await c.set_interval(0.1) == 0.1  # samples three times per link interval (0.3 s): never quiet
    await asyncio.sleep(0.5)
    ticks = link.heard.ticks
    await asyncio.sleep(1.5)
    assert link.heard.ticks == ticks
    assert await c.set_interval(5.0) == 5.0  # quiet for 0.375 s after each sample: a tick, then one per 0.375 s
    assert await await_until(lambda: link.heard.ticks >= ticks + 2, 5)


async def _host_ops(c: HostClient) -> None:
    hello = await c.hello()
    assert isinstance(hello, AgentHello) and hello.hostname and hello.gpu_source == "sim"
    assert isinstance(await c.ping(), float)
    assert await c.set_interval(0.2) == 0.2
    snap = await c.snapshot()
    assert isinstance(snap, HostSnapshot) and [g.index for g in snap.gpus] == [0, 1]
    assert isinstance(await c.vmstat(), VmStat)
    samples = await c.gpu_samples(since=0)
    assert isinstance(samples, GpuSamples) and all(p.gpu in (0, 1) for p in samples.points)
    assert await c.sessions() == []
    assert await c.proc(2 ** 22 + 7) is None
    me = await c.proc(os.getpid())
    assert isinstance(me, ProcInfo) and me.pid == os.getpid() and me.alive and me.argv


async def _file_and_command_ops(c: HostClient, tmp_path) -> None:
    f = tmp_path / "note.txt"
    f.write_text("hello\n")
    assert await c.read_file(str(f)) == "hello\n"
    with pytest.raises(NotFound):
        await c.read_file(str(tmp_path / "absent"))
    r = await c.run(["echo", "hi"], timeout=10)
    assert isinstance(r, RunResult) and (r.rc, r.stdout) == (0, "hi\n")
    with pytest.raises(NotFound, match="not found"):
        await c.run(["/no/such/command"], timeout=10)
    with pytest.raises(TimedOut):
        await c.run([sys.executable, "-c", "import time; time.sleep(10)"], timeout=0.3)
    with pytest.raises(BadRequest):
        await c.read_log("../escape")


async def _session_ops(c: HostClient, heard: Heard) -> None:
    port = free_port()
    sid = "contract-" + uuid.uuid4().hex[:8]
    spec = LaunchSpec(session_id=sid, argv=[sys.executable, "-u", "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                      gpus=[0], port=port)
    check = await c.launch(spec, preflight={"check_only": True})
    assert isinstance(check, LaunchResult) and check.session is None and check.preflight
    launched = await c.launch(spec)
    assert isinstance(launched, LaunchResult) and launched.session is not None and launched.session.record
    rec = launched.session.record
    with pytest.raises(Refused, match="held by session"):
        await c.launch(spec.model_copy(update={"session_id": sid + "b"}))
    with pytest.raises(NotEnded):
        await c.ack(sid)
    await c.follow_log(sid, 0)
    assert await await_until(lambda: any("Serving HTTP" in ch.data for ch in heard.chunks), 20)
    assert all(isinstance(ch, LogChunk) and ch.session_id == sid for ch in heard.chunks)
    assert heard.samples
    chunk = await c.read_log(sid, offset=0)
    assert isinstance(chunk, LogChunk) and "Serving HTTP" in chunk.data and chunk.end > 0 and chunk.mtime
    assert (await c.read_log(sid, tail_lines=1)).lines[-1].startswith("Serving HTTP")
    assert "Serving HTTP" in (await c.read_log(sid, tail_bytes=4096)).data
    assert await c.port_open(port) is True  # it printed "Serving HTTP" once it listened
    owner = await c.port_owner(port)
    assert isinstance(owner, PortOwner) and owner.pid == rec.pid
    assert await c.port_owner(free_port()) is None
    got = await c.http_get(port, "/")
    assert isinstance(got, HttpResult) and got.status == 200
    assert (await c.http_get(free_port(), "/")).status == 0
    await c.watch(rec.pid, rec.start_ticks)
    done = await c.kill(pid=rec.pid, pgid=rec.pgid, start_ticks=rec.start_ticks, session_id=sid, signal=15)
    assert isinstance(done, Signalled) and -rec.pgid in done.signalled
    assert await await_until(lambda: any(isinstance(e, SessionEnded) and e.session_id == sid for e in heard.events), 20)
    assert any(isinstance(e, ExitEvent) and e.pid == rec.pid for e in heard.events)
    with pytest.raises(NoSuchProcess):
        await c.kill(pid=rec.pid, start_ticks=rec.start_ticks, signal=15)
    with pytest.raises(NoSuchProcess):
        await c.kill(pid=rec.pid, pgid=rec.pgid, start_ticks=rec.start_ticks, session_id=sid, signal=15)
    await c.unfollow_log(sid)
    acked = await c.ack(sid, by="contract@test")
    assert isinstance(acked, SessionInfo) and acked.acknowledged_at is not None
    with pytest.raises(NotFound):
        await c.ack("contract-absent")
    with pytest.raises(Refused, match="is not broken"):  # an ended session is no broken run directory
        await c.prune(sid)
    with pytest.raises(NotFound):
        await c.prune("contract-absent")
    assert [s.session_id for s in await c.sessions() if s.session_id.startswith(sid)] == [sid]


async def _foreign_output(c: HostClient, tmp_path) -> None:
    log = tmp_path / "server.log"
    chatty = "import sys, time\nfor i in range(3): print('line', i, flush=True)\ntime.sleep(60)"
    with open(log, "wb") as f:
        to_file = subprocess.Popen([sys.executable, "-c", chatty], stdout=f, stderr=subprocess.STDOUT)
    to_pipe = subprocess.Popen([sys.executable, "-c", chatty], stdout=subprocess.PIPE)
    try:
        assert to_pipe.stdout is not None and to_pipe.stdout.readline()
        assert await await_until(lambda: log.read_text().count("line") == 3, 10)
        me = await c.proc(to_file.pid)
        assert me is not None
        out = await c.foreign_output(to_file.pid, me.start_ticks)
        assert isinstance(out, ForeignOutput) and out.path == str(log) and out.lines == ["line 0", "line 1", "line 2"]
        assert out.size == log.stat().st_size and out.mtime > 0 and out.offset == 0
        tail = await c.foreign_output(to_file.pid, me.start_ticks, tail_bytes=9)  # "line 2\n" whole, "1\n" dropped
        assert tail.lines == ["line 2"] and tail.offset == out.size - 7
        with pytest.raises(Refused, match="is a pipe, not a file"):
            await c.foreign_output(to_pipe.pid)
        with pytest.raises(NoSuchProcess, match="gone"):
            await c.foreign_output(to_file.pid, me.start_ticks + 1)
    finally:
        kill_quietly([to_file.pid, to_pipe.pid])
        to_file.wait(5)
        to_pipe.wait(5)
