"""A deterministic fake Backend for UI tests: fixed views, scripted steps, recorded calls."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Callable

from console.core.current import CurrentState
from console.model import (
    AuditEntry,
    ConnectionInfo,
    GpuProc,
    GpuSample,
    HostSnapshot,
    HostView,
    KillTarget,
    LaunchRequest,
    OperationResult,
    PendingLaunch,
    ServeMetrics,
    ServerProc,
    SessionView,
    Step,
)

NOW = 1_700_000_000.0
ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/demo-27b", "--tp-size", "2",
        "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4", "--mem-fraction-static", "0.85", "--max-running-requests", "48",
        "--port", "30000"]
from console.ops import lifecycle as _lifecycle  # noqa: E402

LAUNCH_STEPS = ["preflight", *_lifecycle.LAUNCH_STEPS]  # the real confirmation steps, by name


def gpu(i: int, *, used: int = 1024, power: float = 95.0, procs: list[GpuProc] | None = None, **kw) -> GpuSample:
    return GpuSample(index=i, uuid=f"GPU-{i:04d}", name="NVIDIA H200", power_w=power, power_limit_w=700.0,
                     util_pct=0.0 if used < 2000 else 87.0, mem_used_mib=used, mem_total_mib=143771, temp_c=41.0,
                     procs=procs or [], **kw)


def proc(pid: int, argv: list[str], session: str | None, gpus: dict[int, int]) -> ServerProc:
    return ServerProc(pid=pid, ppid=1, pgid=pid, start_ticks=1000 + pid, state="S", user="op", argv=argv,
                      role="launcher", framework="sglang", session_id=session, gpu_mem_mib=gpus)


def session(state: str, sid: str | None, gpus: list[int], **kw) -> SessionView:
    base = dict(host="host-a", session_id=sid, state=state, gpus=gpus, port=30000 + gpus[0], pids=[4200 + gpus[0]],
                launcher_pid=4200 + gpus[0], launcher_start_ticks=5200 + gpus[0], argv=ARGV,
                flags_summary="EAGLE 3/1/4 · mem 0.85 · run 48", started_at=NOW - 600)
    base.update(kw)
    return SessionView(**base)


def ready(gpus=(0, 1), sid="s-ready", **kw) -> SessionView:
    return session("ready", sid, list(gpus), metrics=ServeMetrics(gen_throughput=412.3, accept_len=3.21,
                                                                   running_req=12, queue_req=0), **kw)


def failed(gpus=(2,), sid="s-failed", **kw) -> SessionView:
    return session("failed", sid, list(gpus), cause="gpu_oom", ended_at=NOW - 30,
                   line="Not enough memory. Please try to increase --mem-fraction-static.",
                   hint="lower --max-running-requests or raise --mem-fraction-static", **kw)


def foreign(gpus=(3,), **kw) -> SessionView:
    return session("foreign", None, list(gpus), argv=["python", "-m", "sglang.launch_server", "--model-path",
                                                      "/models/other", "--port", "30003"],
                   flags_summary="mem auto", metrics=None, launcher_pid=5150, pids=[5150], port=30003, **kw)


def snapshot(name="host-a", *, gpus: list[GpuSample] | None = None, state="connected", age=0.4,
             servers: list[ServerProc] | None = None, error: str | None = None, **kw) -> HostSnapshot:
    return HostSnapshot(
        name=name, connection=ConnectionInfo(state=state, rtt_ms=12.4 if state == "connected" else None, error=error),
        sampled_at=NOW - age - 0.1, received_at=NOW - age, gpu_source=("sim" if name == "demo" else "nvml") if gpus else "none",
        gpus=gpus or [], servers=servers or [], **kw)


def view_a(**kw) -> HostView:
    """host-a: a tp 2 READY session on GPUs 0,1, a FAILED one on 2, a FOREIGN server on 3."""
    g = [gpu(0, used=120_000, power=612.0, procs=[GpuProc(pid=4201, used_mib=118_000)]),
         gpu(1, used=119_000, power=598.0, procs=[GpuProc(pid=4202, used_mib=118_000)]),
         gpu(2), gpu(3, used=60_000, power=300.0, procs=[GpuProc(pid=5150, used_mib=59_000)])]
    servers = [proc(4201, ["sglang::scheduler_TP0"], "s-ready", {0: 118_000}),
               proc(4202, ["sglang::scheduler_TP1"], "s-ready", {1: 118_000}),
               proc(5150, foreign().argv, None, {3: 59_000})]
    return HostView(snapshot=snapshot(gpus=g, servers=servers, **kw), sessions=[ready(), failed(), foreign()])


def view_b(state="connected", **kw) -> HostView:
    """host-b: two GPUs, one idle, one LOADING."""
    s = session("loading", "s-loading", [1], host="host-b", line="Load weight begin. avail mem=139.10 GB")
    return HostView(snapshot=snapshot("host-b", gpus=[gpu(0), gpu(1, used=40_000, power=180.0)], state=state, **kw),
                    sessions=[s])


def view_idle(name="host-a", n=2) -> HostView:
    return HostView(snapshot=snapshot(name, gpus=[gpu(i) for i in range(n)]))


def with_current(view: HostView) -> HostView:
    """``view`` with each GPU's current session (the one rule), as a backend pushes it."""
    return CurrentState(view.snapshot.name, clock=lambda: NOW).apply(view)


SESSION_LOG = [
    "[2026-10-30 12:00:00] server_args=ServerArgs(model_path='/models/demo-27b', speculative_algorithm='EAGLE')",
    "[2026-10-30 12:00:01] Attention backend not specified. Use flashinfer backend by default.",
    "[2026-10-30 12:00:05 TP0] Load weight begin. avail mem=139.10 GB",
    "[2026-10-30 12:01:05 TP0] Load weight end. elapsed=60.00 s, avail mem=88.10 GB, mem usage=51.00 GB.",
    "[2026-10-30 12:02:00] The server is fired up and ready to roll!",
    "[2026-10-30 12:03:00 TP0] Decode batch, #running-req: 12, accept len: 3.21, gen throughput (token/s): 412.30",
    "\x1b[31mcoloured\x1b[0m line with a bell\x07 and a \x1b]0;title\x07 title change",
]
FAILED_LOG = [
    "[2026-10-30 12:10:00 TP0] Load weight end. elapsed=60.00 s, avail mem=40.00 GB",
    "Traceback (most recent call last):",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
]


class FakeBackend:
    """Satisfies console.backend.Backend with fixed data and scripted operations."""

    def __init__(self, views: list[HostView] | None = None, *, read_only: bool = False,
                 outcome: str = "ready", hold: bool = False) -> None:
        views = [view_a()] if views is None else views
        self.views = {v.snapshot.name: v for v in views}
        self.hosts = list(self.views)
        self.read_only = read_only
        self.outcome = outcome
        self.gate = asyncio.Event() if hold else None
        self.calls: list[tuple] = []
        self.logs: dict[tuple[str, str], list[str]] = {("host-a", "s-ready"): SESSION_LOG,
                                                       ("host-a", "s-failed"): FAILED_LOG}
        self.following: set[tuple[str, str]] = set()
        self.on_view: Callable | None = None
        self.on_log: Callable | None = None
        self.interval = 1.0
        self.current = {h: CurrentState(h, clock=lambda: NOW) for h in self.hosts}
        """What the console knows beyond the views (launches sent, results), as the real tracker keeps it."""

    # -- pushing
    async def start(self, on_view, on_log, on_audit) -> None:
        self.on_view, self.on_log, self.on_audit = on_view, on_log, on_audit
        for v in self.views.values():
            on_view(self._current(v))
        on_audit(AuditEntry(at=NOW - 5, host="host-a", op="agent.start", args={"python": "python3"}, ok=True,
                            result="agent v1 ready", elapsed_ms=84.0))

    async def others_audit(self, since: float, ops: tuple[str, ...] | None = None) -> list[AuditEntry]:
        """No other console shares this fake's audit log (tests/test_events_tui.py gives one that does)."""
        return []

    def _current(self, view: HostView) -> HostView:
        host = view.snapshot.name
        st = self.current.setdefault(host, CurrentState(host, clock=lambda: NOW))
        return st.apply(view)

    def push(self, view: HostView) -> None:
        self.views[view.snapshot.name] = view
        if self.on_view:
            self.on_view(self._current(view))

    def repush(self, host: str) -> None:
        self.push(self.views[host])

    def acknowledge(self, host: str, session_id: str) -> None:
        self.calls.append(("acknowledge", host, session_id))
        self.current[host].acknowledge(session_id)
        self.repush(host)

    async def stop(self) -> None:
        self.calls.append(("stop",))

    # -- logs
    async def foreign_output(self, host: str, pid: int, start_ticks: int | None) -> tuple[str, list[str]]:
        raise RuntimeError("the fake backend reads no foreign server's output")

    async def report(self, host: str, session_id: str) -> str:
        """Records the call; the path a real backend would have written."""
        self.calls.append(("report", host, session_id))
        return f"/tmp/mtpconsole-fake/reports/report-{session_id}.md"

    # -- flag form checks (a test replaces them with its own functions)
    async def validator(self, flags: list[str], host: str | None = None) -> list[tuple[str, str]]:
        return []

    async def planner(self, flags: list[str], gpus: list[int], host: str | None = None) -> str | None:
        return None

    async def gpu_check(self, flags: list[str], gpus: list[int], host: str | None = None) -> list[tuple[str, str]]:
        return []

    async def follow_log(self, host: str, session_id: str, tail_lines: int = 500) -> list[str]:
        self.calls.append(("follow_log", host, session_id))
        self.following.add((host, session_id))
        return self.logs.get((host, session_id), [])[-tail_lines:]

    async def unfollow_log(self, host: str, session_id: str) -> None:
        self.calls.append(("unfollow_log", host, session_id))
        self.following.discard((host, session_id))

    def launch_template(self, host: str, gpu: int) -> LaunchRequest:
        return LaunchRequest(host=host, flags=["--model-path", "/models/demo-27b", "--mem-fraction-static", "0.85"],
                             gpus=[gpu], port=30000 + gpu)

    profiles: dict[str, LaunchRequest] = {}  # noqa: RUF012  (a test sets its own on the instance)

    def launch_profiles(self, host: str) -> dict[str, LaunchRequest]:
        return {k: v.model_copy(update={"host": host}) for k, v in self.profiles.items()}

    # -- operations
    async def _steps(self, names: list[str], on_steps, fail_at: int | None, evidence: str) -> list[Step]:
        steps = [Step(name=n) for n in names]
        for i, n in enumerate(names):
            steps[i] = Step(name=n, state="running", started_at=NOW - 1.5)
            on_steps(list(steps))
            await asyncio.sleep(0)
            if self.gate is not None and i == 3:
                await self.gate.wait()
            if fail_at == i:
                steps[i] = Step(name=n, state="failed", elapsed_s=2.5, evidence=evidence)
                steps[i + 1:] = [Step(name=m, state="skipped") for m in names[i + 1:]]
                on_steps(list(steps))
                return steps
            steps[i] = Step(name=n, state="ok", elapsed_s=0.5 + i, evidence=f"{n}: ok")
            on_steps(list(steps))
        return steps

    def _place(self, host: str, s: SessionView) -> None:
        """Add session ``s``; ended sessions stay (history), as run directories do on a host."""
        v = self.views[host]
        keep = [x for x in v.sessions if x.session_id != s.session_id]
        self.push(HostView(snapshot=v.snapshot, sessions=[*keep, s]))

    def _stop(self, host: str, target: KillTarget) -> None:
        """The target is gone: a managed session reads STOPPED (by an operator), a foreign server vanishes."""
        v = self.views[host]
        out = []
        for x in v.sessions:
            if target.session_id and x.session_id == target.session_id:
                out.append(x.model_copy(update={"state": "stopped", "ended_at": NOW, "cause": None, "line": None,
                                                "hint": None, "metrics": None, "pids": [],
                                                "stopped_by": "an operator"}))
            elif not target.session_id and not x.session_id and x.launcher_pid == target.pid:
                continue
            else:
                out.append(x)
        self.push(HostView(snapshot=v.snapshot, sessions=out))

    async def launch(self, req: LaunchRequest, on_steps) -> OperationResult:
        self.calls.append(("launch", req))
        return await self._launch(req, on_steps, "launch")

    async def _launch(self, req: LaunchRequest, on_steps, op: str) -> OperationResult:
        sid = f"s-new-{len(self.calls)}"
        ok = self.outcome == "ready"
        argv = [*req.command, *req.flags]
        st = self.current[req.host]
        st.launch_sent(PendingLaunch(host=req.host, session_id=sid, gpus=list(req.gpus), argv=argv, port=req.port,
                                     sent_at=NOW, replaces=req.replaces))
        self.repush(req.host)

        def steps_cb(steps: list[Step]) -> None:
            on_steps(steps)
            st.launch_step(sid, sum(1 for x in steps if x.state == "ok" and x.name != "preflight"))

        steps = await self._steps(LAUNCH_STEPS, steps_cb, None if ok else 4,
                                  "Not enough memory. Please try to increase --mem-fraction-static.")
        if ok:
            s = session("ready", sid, req.gpus, host=req.host, argv=argv, started_at=NOW - 1, replaces=req.replaces,
                        metrics=ServeMetrics(gen_throughput=100.0, accept_len=2.5))
        else:
            s = failed(req.gpus, sid, host=req.host, argv=argv, started_at=NOW - 1, replaces=req.replaces)
        self.logs[(req.host, sid)] = ["fresh session line 1", "fresh session line 2"]
        result = OperationResult(op=op, host=req.host, ok=ok, session_id=sid, state=s.state, steps=steps,
                                 cause=None if ok else "gpu_oom", line=s.line, hint=s.hint)
        st.launch_done(sid, result)
        self._place(req.host, s)
        return result

    async def kill(self, target: KillTarget, on_steps) -> OperationResult:
        self.calls.append(("kill", target))
        names = ["signal group", "process group gone", "no sglang:: orphans", "GPU memory released", "port closed"]
        steps = await self._steps(names, on_steps, None, "")
        result = OperationResult(op="kill", host=target.host, ok=True, session_id=target.session_id,
                                 state="stopped", steps=steps)
        self.current[target.host].kill_done(target.session_id, target.pid, result, target.start_ticks)
        self._stop(target.host, target)
        return result

    async def relaunch(self, target: KillTarget, req: LaunchRequest, on_steps) -> OperationResult:
        self.calls.append(("relaunch", target, req))
        self.current[target.host].kill_done(target.session_id, target.pid, OperationResult(
            op="kill", host=target.host, ok=True, session_id=target.session_id, state="stopped"), target.start_ticks)
        self._stop(target.host, target)
        return await self._launch(req.model_copy(update={"replaces": target.session_id}), on_steps, "relaunch")


def frozen_app(backend: FakeBackend | None = None, **kw):
    """The app under test: frozen clock, no animations, UTC times."""
    os.environ["TZ"] = "UTC"
    time.tzset()
    from console.ui.app import make_app

    app = make_app(backend or FakeBackend(), clock=lambda: NOW, **kw)
    app.animation_level = "none"
    record_toasts(app)
    return app


async def started(pilot) -> None:
    """Wait until the app shows its backend's first views: every host's GPU panels are mounted."""
    from console.ui.widgets.gpu_panel import GpuPanel
    from tests.helpers.wait import until

    app = pilot.app
    want = {(h, g.index) for h, v in app.backend.views.items() for g in v.snapshot.gpus}
    await until(pilot, lambda: want <= {(p.host, p.index) for p in app.query(GpuPanel)},
                what=f"the GPU panels {sorted(want)} are shown")


def record_toasts(app) -> list[str]:
    """Record every toast ``app`` is asked to show (its public ``notify``, which widgets and screens call too)."""
    shown: list[str] = []
    real = app.notify

    def notify(message, *args, **kw):
        shown.append(str(message))
        return real(message, *args, **kw)

    notify.shown = shown  # type: ignore[attr-defined]
    app.notify = notify
    return shown


def toasts(app) -> list[str]:
    """The toasts' messages so far, oldest first (the app must come from :func:`frozen_app` or
    :func:`record_toasts`)."""
    return app.notify.shown


def harness(factory: Callable, *, theme: str = "dark", on_ready: Callable | None = None):
    """A tiny app that mounts ``factory()`` with the console's CSS, for one-widget snapshots."""
    from textual.app import App

    from console.ui.themes import HIGH_CONTRAST, NAMES, TEXTUAL_THEME, css_paths

    class Harness(App):
        CSS_PATH = css_paths()

        def __init__(self) -> None:
            super().__init__()
            self.register_theme(HIGH_CONTRAST)
            self.animation_level = "none"

        def compose(self):
            yield from factory()

        def on_mount(self) -> None:
            self.theme = TEXTUAL_THEME[theme]
            for n in NAMES:
                self.set_class(n == theme, f"theme-{n}")
            if on_ready:
                on_ready(self)

    os.environ["TZ"] = "UTC"
    time.tzset()
    return Harness()
