"""The TUI's advisor reads a hand-started server's figures where ``status`` reads them: its /metrics when it has
one, else its stdout file's ``Decode batch`` lines (console.ops.advice_host.read_foreign_logs, one code path).

The stdout file is read in the background, at most every FOREIGN_LOG_EVERY_S, never on a view's path; the
figures it gives are dated when read."""

from __future__ import annotations

import asyncio
import json
import os
import re

from console.core.flags.sources import bundled_schema
from console.model import Advice, ConnectionInfo, GpuProc, GpuSample, HostSnapshot, HostView, ServerProc
from console.ops import tracker as tracker_mod
from console.ops.advice_host import advise_link, schema_validator
from console.sim.demo import MODEL_CONFIG
from tests.helpers.wait import await_until

NOW = 1_700_000_000.0
MODEL = "/models/hybrid-27b"
ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", MODEL, "--port", "30000",
        "--max-running-requests", "32"]
LOG = ("[2026-10-30 12:00:00] The server is fired up and ready to roll!\n"
       "[2026-10-30 12:03:00 TP0] Decode batch, #running-req: 32, #token: 90000, token usage: 0.41, "
       "cuda graph: True, gen throughput (token/s): 1210.50, #queue-req: 9\n")


def snap(received_at: float = NOW) -> HostSnapshot:
    """A connected host: GPU 0 at 300 of 600 W, held by a hand-started server without /metrics."""
    launcher = ServerProc(pid=5150, ppid=1, pgid=5150, start_ticks=777, state="S", user="op", argv=ARGV,
                          role="launcher", framework="sglang", gpu_mem_mib={0: 80_000}, metrics_text=None)
    g = GpuSample(index=0, uuid="GPU-0", name="Sim", power_w=300.0, power_limit_w=600.0, util_pct=60.0,
                  mem_used_mib=81_000, mem_total_mib=97_887, procs=[GpuProc(pid=5150, used_mib=80_000)])
    return HostSnapshot(name="h", connection=ConnectionInfo(state="connected", rtt_ms=1.0), sampled_at=received_at,
                        received_at=received_at, gpu_source="sim", gpus=[g], servers=[launcher])


class AgentLink:
    """The agent's answers for this host: the process, its stdout file (``foreign_output``) and the model's config.

    ``gate`` (when set) holds each ``tail`` of the stdout file until it is released."""

    name = "h"

    def __init__(self, clock=lambda: NOW) -> None:
        self.listeners: list = []
        self.snap = snap()
        self.clock = clock
        self.tails = 0
        self.gate: asyncio.Event | None = None

    def listen(self, listener) -> None:  # the views are asked for by hand here: nothing is streamed
        pass

    def snapshot(self) -> HostSnapshot:
        """The latest sample, just received (the host streams one a second)."""
        return self.snap.model_copy(update={"received_at": self.clock(), "sampled_at": self.clock()})

    async def request(self, kind: str, args: dict, audit: bool = True, timeout: float | None = None) -> dict:
        if kind == "proc":
            return {"pid": args["pid"], "start_ticks": 777} if args["pid"] == 5150 else {}
        if kind == "read_file":
            assert args["path"] == MODEL + "/config.json"
            return {"data": json.dumps(MODEL_CONFIG)}
        if kind == "foreign_output":  # the stdout file, its tail and last write (now) in one round trip
            assert (args["pid"], args["start_ticks"]) == (5150, 777)
            self.tails += 1
            if self.gate is not None:
                await self.gate.wait()
            return {"pid": 5150, "start_ticks": 777, "path": "/var/log/sglang_gpu0.log", "size": len(LOG),
                    "mtime": self.clock(), "offset": 0, "data": LOG[-int(args["tail_bytes"]):]}
        raise AssertionError(f"unexpected request {kind} {args}")


def validator():
    return schema_validator(bundled_schema())


async def drain(tr) -> None:
    """Let the tracker's background reads (shapes, stdout files) finish."""
    await await_until(lambda: not tr.reading, 10)


async def test_foreign_server_without_metrics_gets_the_advice_status_gives():
    now = [NOW]
    link = AgentLink(lambda: now[0])
    status_advice, figures = await advise_link(link, link.snap, now=NOW, validate=validator())  # type: ignore[arg-type]
    assert [a.kind for a in status_advice] == ["gpu_underused"]
    assert figures[0]["figures"]["queue"]["source"] == "log"  # status: from the stdout file, not /metrics

    views: list[HostView] = []
    tr = tracker_mod.HostTracker(link, interval=1.0, on_view=views.append, on_log=lambda *a: None,  # type: ignore[arg-type]
                                 clock=lambda: now[0])
    link.tails = 0
    tr.update()  # the first view: the stdout file and the model's config are being read in the background
    assert views[-1].advice == [] and link.tails == 0
    await drain(tr)
    assert link.tails == 1
    now[0] += tracker_mod.ADVICE_EVERY_S
    tr.update()
    assert views[-1].advice == status_advice  # the same findings, evidence and checked suggestion as status
    queue = tr.figure_history["pid:5150"][-1].queue
    assert queue is not None and (queue.value, queue.source, queue.at) == (9.0, "log", NOW)  # dated when read


async def test_the_stdout_read_is_off_the_view_path_and_rate_limited():
    now = [NOW]
    link = AgentLink(lambda: now[0])
    link.gate = asyncio.Event()  # a slow host: the tail does not answer
    views: list[HostView] = []
    tr = tracker_mod.HostTracker(link, interval=1.0, on_view=views.append, on_log=lambda *a: None,  # type: ignore[arg-type]
                                 clock=lambda: now[0])
    tr.shape_cache = {MODEL: None}  # nothing else to read

    async def view_after(dt: float) -> None:
        now[0] += dt
        tr.update()
        await asyncio.sleep(0)  # a background read started by this view gets to send its requests

    await view_after(0)
    for _ in range(11):  # views go on at 2 Hz while the read hangs; no second read is started meanwhile
        await view_after(0.5)
    assert len(views) == 12 and link.tails == 1
    link.gate.set()
    await drain(tr)
    assert tr.foreign_logs.read_at == {"pid:5150": NOW + 5.5}  # dated when the answer came
    for _ in range(9):  # the next read starts FOREIGN_LOG_EVERY_S after this one ended, not before
        await view_after(0.5)
    assert link.tails == 1
    await view_after(1.0)
    assert link.tails == 2
    await drain(tr)
    link.snap = link.snap.model_copy(update={"servers": [], "gpus": [link.snap.gpus[0].model_copy(update={"procs": []})]})
    await view_after(10)  # the server is gone: nothing is read and nothing of it is kept
    assert link.tails == 2 and tr.foreign_logs.tails == {} and views[-1].advice == []


def _shape(advice: list[Advice]) -> list[tuple]:
    """Advice without the live numbers (power, queue, throughput move between two reads)."""
    def nonum(t: str) -> str:
        return re.sub(r"\d+(\.\d+)?", "N", t)
    return [(a.kind, a.gpu, a.pid, a.session_id, nonum(a.message), [nonum(e) for e in a.evidence],
             a.suggestion and (a.suggestion.flags, a.suggestion.valid, nonum(a.suggestion.planner or "")))
            for a in advice]


async def test_demo_server_without_metrics_advised_in_the_tui_as_in_status(monkeypatch):
    """Real processes: the demo's hand-started server, here without --enable-metrics, under load. Its stdout file
    is all there is; the tracker's view and ``status`` give the same advice."""
    from console.link.link import HostLink
    from console.link.ssh import HostSpec
    from console.sim import demo

    monkeypatch.setenv("MTPCONSOLE_AUDIT_LOG", os.devnull)
    monkeypatch.setattr(demo, "FOREIGN_FLAGS", [f for f in demo.FOREIGN_FLAGS if f != "--enable-metrics"])
    views: list[HostView] = []
    async with demo.demo_environment(load=True) as (cfg, names):
        link = HostLink(HostSpec(name=names[0], local=True), cfg.hosts[names[0]], interval=0.5)
        tracker = tracker_mod.HostTracker(link, interval=0.5, on_view=views.append, on_log=lambda *a: None)
        run = asyncio.ensure_future(link.run())
        try:
            def advised():
                return next((v for v in views[-3:] for a in v.advice
                             if a.kind == "gpu_underused" and a.suggestion is not None), None)
            view = await await_until(advised, 90)
            assert view is not None, "no advice in the TUI's view for the hand-started server"
            launcher = next(p for p in view.snapshot.servers if p.pid == view.advice[0].pid)
            assert launcher.metrics_text is None  # no /metrics: the figures came from its stdout file
            status_advice, figures = await advise_link(link, view.snapshot, now=view.snapshot.received_at or 0.0,
                                                       validate=validator())
        finally:
            await link.close()
            run.cancel()
    assert _shape([a for a in view.advice if a.kind == "gpu_underused"]) == \
        _shape([a for a in status_advice if a.kind == "gpu_underused"])
    assert {f["source"] for f in figures[0]["figures"].values()} == {"log"}
    last = tracker.figure_history[f"pid:{view.advice[0].pid}"][-1]  # the TUI's figures: from the stdout file too
    assert {getattr(last, n).source for n in type(last).model_fields if getattr(last, n) is not None} == {"log"}
