"""Launch, kill and relaunch, each step confirmed against the host — never assumed.

Launch steps: spawned (pid + start time + argv), logging (this session's own log grows),
listening (port accepts), healthy (GET /health 200; 503 = warming up), ready (the ready
line in this session's log), on GPU (the driver attributes memory on the target GPUs to
the session's processes). A server exit at any point fails the launch at once with the
classified cause, the decisive line, a hint and the last lines of this session's log.

Kill: SIGTERM to the recorded process group, a grace period, SIGKILL, then confirmed when
no process of the group or session remains, no sglang worker of it survives, the driver no
longer lists the pids and GPU memory is back near its baseline, and the port is closed.

Longer than ~400 lines on purpose: launch, kill and relaunch share one step tracker, the preflight
and the exit watch; split apart, one confirmation protocol would be spread over several files.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import socket
import time
from typing import Any, Callable

from console import __version__
from console.core.sessions import flag_value, has_flag, new_session_id, server_port
from console.link.link import HostLink, LinkDown, RequestError, sessions_each
from console.model import (
    Classification,
    HostSnapshot,
    KillTarget,
    LaunchRequest,
    LaunchSpec,
    OperationResult,
    ServerProc,
    SessionInfo,
    Step,
)
from console.ops.flag_preflight import check_launch_flags

LAUNCH_STEPS = ["spawned", "logging", "listening", "healthy", "ready", "on GPU"]
READY_LINE = "The server is fired up and ready to roll!"
GPU_RELEASE_TOLERANCE_MIB = 1024


class Stepper:
    """Tracks a list of Steps and reports the whole list on every change."""

    def __init__(self, names: list[str], on_steps: Callable[[list[Step]], None] | None):
        self.steps = [Step(name=n) for n in names]
        self.on_steps = on_steps or (lambda steps: None)
        self._t0: dict[str, float] = {}

    def _i(self, name: str) -> int:
        return next(i for i, s in enumerate(self.steps) if s.name == name)

    def _emit(self) -> None:
        self.on_steps(list(self.steps))

    def add(self, name: str) -> None:
        if all(s.name != name for s in self.steps):
            self.steps.append(Step(name=name))

    def start(self, name: str, evidence: str | None = None) -> None:
        self._t0[name] = time.monotonic()
        i = self._i(name)
        self.steps[i] = Step(name=name, state="running", started_at=time.time(), evidence=evidence)
        self._emit()

    def finish(self, name: str, state: str, evidence: str | None = None) -> None:
        i = self._i(name)
        t0 = self._t0.get(name, time.monotonic())
        self.steps[i] = self.steps[i].model_copy(update={
            "state": state, "elapsed_s": round(time.monotonic() - t0, 3), "evidence": evidence})
        self._emit()

    def passed(self) -> int:
        return sum(1 for s in self.steps if s.state in ("ok", "skipped"))


class LaunchFailed(Exception):
    def __init__(self, step: str, message: str):
        super().__init__(message)
        self.step = step


def build_spec(req: LaunchRequest, session_id: str, now: float) -> tuple[LaunchSpec, dict[str, str]]:
    """argv = command + flags (+ --port unless present); env values are returned separately."""
    for part in req.command + req.flags:
        if "\0" in part:
            raise ValueError("NUL byte in command or flags")
    argv = list(req.command) + list(req.flags)
    port = req.port
    if port is not None and not has_flag(req.flags, "--port"):
        argv += ["--port", str(port)]
    elif port is None:
        port = server_port(req.flags) or 30000
    spec = LaunchSpec(
        session_id=session_id, argv=argv, env_names=sorted(req.env), gpus=list(req.gpus), port=port,
        launched_by=f"{getpass.getuser()}@{socket.gethostname()}", console_version=__version__,
        created_at=now, profile=req.profile, replaces=req.replaces)
    return spec, dict(req.env)


def _classifier():
    from console.core.classify import LogClassifier

    return LogClassifier()


class _SessionWatch:
    """Follows one session's log and exit while an operation runs."""

    def __init__(self, link: HostLink, session_id: str):
        self.link, self.sid = link, session_id
        self.cls = _classifier()
        self.lines: list[str] = []
        self.log_bytes = 0
        self.exited = asyncio.Event()
        self.exit: dict | None = None
        self.changed = asyncio.Event()
        self.rec: dict | None = None
        link.listeners.append(self._on)

    def _on(self, kind: str, msg: dict) -> None:
        if kind == "log" and msg.get("session_id") == self.sid:
            data = msg.get("data", "")
            self.log_bytes += len(data.encode("utf-8"))
            self.cls.feed(data)
            self.lines.extend(data.splitlines())
            del self.lines[:-200]
            self.changed.set()
        elif kind == "event" and msg.get("session_id") == self.sid:
            if msg.get("kind") == "session_ended":
                self.exit = msg.get("exit") or {}
                self.exited.set()
            self.changed.set()
        elif kind == "state":
            self.changed.set()

    def classification(self) -> Classification:
        from console.model import ExitRecord

        ex = ExitRecord.model_validate(self.exit) if self.exit and self.exit.get("ended_at") else None
        info = next((s for s in self.link.snapshot().sessions if s.session_id == self.sid), None)
        return self.cls.result(ex, info.first_abnormal_exit if info is not None else None)  # the first death decides

    def close(self) -> None:
        if self._on in self.link.listeners:
            self.link.listeners.remove(self._on)


async def _wait_for(cond, watch: _SessionWatch, timeout: float, step: str, poll: float = 0.1,
                    wake_on_change: bool = True):
    """Poll ``cond()`` (async, returns evidence or None) until true; fail at once if the server exits.

    Local conditions (log content) re-check on every change; remote probes (port, /health, GPU)
    wait ``poll`` between tries so a chatty log cannot turn them into a flood of requests.
    """
    deadline = time.monotonic() + timeout
    wake = watch.changed if wake_on_change else watch.exited
    while True:
        if watch.exited.is_set():
            raise LaunchFailed(step, "the server exited")
        try:
            ev = await cond()
        except LinkDown:
            # The connection dropped; the server does not care. If the link is being kept up
            # (HostLink.run), wait for it, catch up on what happened meanwhile, and go on confirming.
            if not await _reattach(watch, deadline):
                raise
            continue
        if ev:
            return ev
        if time.monotonic() > deadline:
            raise LaunchFailed(step, f"not confirmed within {timeout:.0f} s")
        watch.changed.clear()
        try:
            await asyncio.wait_for(wake.wait(), poll)
        except asyncio.TimeoutError:
            pass


async def _reattach(watch: _SessionWatch, deadline: float) -> bool:
    """Wait for a kept-up link to reconnect, then learn from the run dir whether the server ended."""
    link = watch.link
    if not link.running:
        return False
    try:
        await asyncio.wait_for(link.connected.wait(), max(0.1, deadline - time.monotonic()))
        sessions = await link.request("sessions", audit=False)
    except (asyncio.TimeoutError, LinkDown, RequestError):
        return False
    mine = next((x for x in sessions if x.get("session_id") == watch.sid), None)
    if mine and (mine.get("exit") or not mine.get("server_alive")):
        watch.exit = mine.get("exit") or {}
        watch.exited.set()
    return True


def record_result(link: HostLink, result: OperationResult) -> OperationResult:
    """Write an operation's confirmed steps into the audit log (op ``result:<op>``), so a later
    report can put every step of a launch or kill on its timeline. Returns ``result``."""
    if link.audit is not None and result.steps:
        steps = [s.model_dump(mode="json", include={"name", "state", "started_at", "elapsed_s", "evidence"})
                 for s in result.steps]
        link.audit(link.name, "result:" + result.op, {"session_id": result.session_id, "steps": steps},
                   result.ok, result.state or result.error, None)
    return result


async def launch(link: HostLink, req: LaunchRequest, on_steps=None, *, wait: bool = True,
                 timeout: float = 900.0, need_mib: int | None = None, allow_busy: bool = False,
                 session_id: str | None = None) -> OperationResult:
    """Start a server in a fresh session and confirm it step by step (see module doc)."""
    return record_result(link, await _launch(link, req, on_steps, wait=wait, timeout=timeout, need_mib=need_mib,
                                             allow_busy=allow_busy, session_id=session_id))


async def _launch(link: HostLink, req: LaunchRequest, on_steps=None, *, wait: bool = True,
                  timeout: float = 900.0, need_mib: int | None = None, allow_busy: bool = False,
                  session_id: str | None = None) -> OperationResult:
    now = time.time()
    sid = session_id or new_session_id(req.gpus, now)
    spec, env = build_spec(req, sid, now)
    st = Stepper(["preflight"] + LAUNCH_STEPS, on_steps)
    res = dict(op="launch", host=link.name, session_id=sid)
    st.start("preflight")
    snap = await _preflight_snapshot(link)  # taken now: after a relaunch's kill, what the kill left
    refusals, hints, line, flags_note = [], [], None, ""
    if req.check_flags:  # the host's own server's flags, before anything is spawned
        fv = await check_launch_flags(link, req.command, req.flags)
        if not fv.ok:
            refusals.append(fv.error or "the server rejects these flags")
            line = fv.error
            fixes = "; ".join(f"{p.message}" + (f" (fix: {p.suggestion})" if p.suggestion else "")
                              for p in fv.problems[:5])
            hints += [fixes] if fixes else []
        flags_note = fv.note if fv.ok else ""
    verdict, plan_text = await memory_verdict(link, req, snap)
    if verdict == "does_not_fit" and not req.force:
        refusals.append(f"memory plan: does not fit — {plan_text} (launch with force to try anyway)")
    opts = {"need_mib": need_mib, "allow_busy": allow_busy}
    if refusals:  # nothing is started: the host's own checks too, so that every failure is listed at once
        refusals += await _host_refusals(link, spec, env, opts)
        return _refused(st, res, refusals, line=line, hint="; ".join(hints) or None, note=orphan_note(snap, req.gpus))
    watch = _SessionWatch(link, sid)
    try:
        try:
            info = await link.request("launch", {"spec": spec.model_dump(mode="json"), "env": env,
                                                 "preflight": opts}, timeout=60)
        except RequestError as e:  # the agent refused (its checks, the command, the run directory): nothing started
            return _refused(st, res, [str(e).removeprefix("preflight failed: ") or "refused by the host"],
                            note=orphan_note(snap, req.gpus))
        except (LinkDown, asyncio.TimeoutError) as e:
            msg = (str(e) or "launch request timed out") + orphan_note(snap, req.gpus)
            st.finish("preflight", "failed", msg)
            return OperationResult(**{**res, "session_id": None}, ok=False, state="failed", steps=st.steps,
                                   error=msg)
        pre = info.get("preflight") or []
        forced = verdict == "does_not_fit" and req.force
        head = "⚠ forced: the memory plan says it does not fit; " if forced else ""
        st.finish("preflight", "warning" if forced else "ok",
                  head + "; ".join([f"{c['name']}: {c['detail']}" for c in pre]
                                               + [f"memory plan: {verdict or 'skipped'}"
                                                  + (f" ({plan_text})" if plan_text and plan_text != verdict else "")]
                                               + ([flags_note] if flags_note else []))
                   + orphan_note(snap, req.gpus))
        await link.follow_log(sid, 0)
        rec = info.get("record")
        watch.rec = rec
        ex = info.get("exit")

        # 1. spawned
        st.start("spawned")
        if not rec:
            raise LaunchFailed("spawned", (ex or {}).get("error") or "the supervisor did not start the server")
        proc = await link.request("proc", {"pid": rec["pid"]})
        if proc is None or proc.get("start_ticks") != rec["start_ticks"] or proc.get("state") in ("Z", "X"):
            watch.exited.set()
            raise LaunchFailed("spawned", f"pid {rec['pid']} is already gone")
        if proc.get("argv") != spec.argv and not _exec_argv_matches(proc.get("argv") or [], spec.argv):
            raise LaunchFailed("spawned", f"pid {rec['pid']} runs {proc.get('argv')}, not the expected argv")
        st.finish("spawned", "ok", f"pid {rec['pid']} (pgid {rec['pgid']}, start {rec['start_ticks']}) argv matches")
        if not wait:
            return OperationResult(**res, ok=True, state="launching", steps=st.steps)

        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(1.0, deadline - time.monotonic())

        # 2. logging
        st.start("logging")

        async def logging():
            return f"output.log of this session: {watch.log_bytes} bytes" if watch.log_bytes > 0 else None
        st.finish("logging", "ok", await _wait_for(logging, watch, min(left(), 120), "logging"))

        # 3. listening
        port = spec.port
        st.start("listening")

        async def listening():
            return f"127.0.0.1:{port} accepts connections" if await link.request(
                "port_open", {"port": port}, audit=False) else None
        st.finish("listening", "ok", await _wait_for(listening, watch, left(), "listening", poll=0.2,
                                                       wake_on_change=False))

        # 4. healthy
        st.start("healthy")
        last = {"status": None}

        async def healthy():
            r = await link.request("http_get", {"port": port, "path": "/health", "timeout": 25}, audit=False,
                                   timeout=30)
            last["status"] = r.get("status")
            return "GET /health → 200" if r.get("status") == 200 else None
        st.finish("healthy", "ok", await _wait_for(healthy, watch, left(), "healthy", poll=0.25,
                                                     wake_on_change=False))

        # 5. ready
        st.start("ready")

        async def ready():
            c = watch.cls.result(None)
            if c.state == "failed":
                raise LaunchFailed("ready", "the log shows a failure")
            return f"log: {READY_LINE}" if _saw_ready(watch) else None
        st.finish("ready", "ok", await _wait_for(ready, watch, left(), "ready"))

        # 6. on GPU
        st.start("on GPU")
        snap = link.snapshot()
        if snap.gpu_source == "none":
            st.finish("on GPU", "skipped", f"no GPU information on this host: {snap.gpu_error}")
        else:
            async def on_gpu():
                s = await link.request("snapshot", audit=False)
                pids = {p["pid"] for p in s.get("servers", []) if p.get("session_id") == sid}
                got = []
                for g in s.get("gpus", []):
                    if g["index"] in spec.gpus:
                        mib = sum(p.get("used_mib") or 0 for p in g.get("procs", []) if p["pid"] in pids)
                        if mib > 0:
                            got.append(f"GPU {g['index']}: {mib} MiB")
                return ", ".join(got) + " held by this session's processes" if len(got) == len(spec.gpus) else None
            st.finish("on GPU", "ok", await _wait_for(on_gpu, watch, min(left(), 60), "on GPU", poll=0.5,
                                                        wake_on_change=False))
        return OperationResult(**res, ok=True, state="ready", steps=st.steps)
    except LaunchFailed as e:
        return _with_plan(await _failed(link, watch, st, res, e), verdict, plan_text)
    except (LinkDown, RequestError, asyncio.TimeoutError) as e:
        return await _failed(link, watch, st, res, LaunchFailed(_running(st) or "spawned",
                                                                 f"lost contact with the host: {e}"))
    finally:
        watch.close()


def _with_plan(r: OperationResult, verdict: str | None, plan_text: str) -> OperationResult:
    """A gpu_oom failure's hint leads with the memory planner's fix when the planner had warned."""
    if r.cause != "gpu_oom" or verdict not in ("does_not_fit", "tight") or not plan_text:
        return r
    return r.model_copy(update={"hint": f"memory planner: {plan_text}" + (f"; {r.hint}" if r.hint else "")})


async def _preflight_snapshot(link: HostLink) -> HostSnapshot | None:
    """A snapshot the agent takes now, for a launch's preflight: never the link's last sample, which may predate
    what came just before (a relaunch's kill). None when the host does not answer (then nothing is said of it)."""
    try:
        return await _fresh(link)
    except (RequestError, LinkDown, asyncio.TimeoutError):
        return None


async def _host_refusals(link: HostLink, spec: LaunchSpec, env: dict[str, str], opts: dict[str, Any]) -> list[str]:
    """The host's launch checks that fail, run without launching (``check_only``): one line per failure."""
    try:
        info = await link.request("launch", {"spec": spec.model_dump(mode="json"), "env": env,
                                             "preflight": {**opts, "check_only": True}}, timeout=60, audit=False)
    except RequestError as e:
        return [str(e)]
    except (LinkDown, asyncio.TimeoutError) as e:
        return [f"the host's checks did not run: {e or 'timed out'}"]
    return [f"{c['name']}: {c['detail']}" for c in info.get("preflight") or [] if c.get("ok") is False]


def _refused(st: Stepper, res: dict, refusals: list[str], *, line: str | None = None, hint: str | None = None,
             note: str = "") -> OperationResult:
    """A launch refused by its preflight: nothing was started, so no session, no state and no cause. ``note``: the
    orphans on the target GPUs (:func:`orphan_note`), shown with the step and as the hint."""
    reason = "; ".join(refusals)
    st.finish("preflight", "failed", f"{reason}{note} — nothing was started")
    hint = "; ".join(x for x in (hint, note.removeprefix("; ")) if x) or None
    return OperationResult(**{**res, "session_id": None}, ok=False, steps=st.steps, error=reason + note,
                           refused=reason, refusals=refusals, line=line, hint=hint)


def orphan_note(snap: HostSnapshot | None, gpus: list[int]) -> str:
    """``; orphans on the target GPUs: …`` naming each orphan that holds memory there in ``snap`` (or "")."""
    from console.core.orphans import describe, find_orphans, orphans_on

    if snap is None:
        return ""
    found = orphans_on(find_orphans(snap), gpus)
    if not found:
        return ""
    return ("; orphans on the target GPUs: " + "; ".join(describe(o) for o in found[:4])
            + (f" (+{len(found) - 4} more)" if len(found) > 4 else "")
            + " — kill with 'mtpconsole orphans --kill PID' or o in the console")


async def memory_verdict(link: HostLink, req: LaunchRequest, snap: HostSnapshot | None = None) -> tuple[str | None, str]:
    """The planner's verdict for this launch, from the model's config.json read on the host (GPU sizes from
    ``snap`` when given, else the link's latest sample).

    Returns (None, why) when it cannot be planned (no model path, unreadable config, no GPU info).
    """
    from console.core.model_config import ModelConfigError, parse_model_config
    from console.core.planner import parse_server_flags, plan

    model = flag_value(req.flags, "--model-path", "--model")
    if not model:
        return None, "no --model-path"
    snap = snap or link.snapshot()
    if not snap.gpus and (link.sample is None or snap.gpu_source != "none"):
        try:
            snap = await _fresh(link)
        except (RequestError, LinkDown, asyncio.TimeoutError):
            pass
    gpus = {g.index: g for g in snap.gpus}
    target = [gpus[i] for i in req.gpus if i in gpus and gpus[i].mem_total_mib]
    if not target:
        return None, "no GPU memory information"
    try:
        r = await link.request("read_file", {"path": model.rstrip("/") + "/config.json", "max_bytes": 4 << 20})
        import json

        shape = parse_model_config(json.loads(r["data"]))
        p = plan(shape, parse_server_flags(req.flags), min(g.mem_total_mib or 0 for g in target) << 20,
                 n_gpus=len(target))
    except (RequestError, LinkDown, asyncio.TimeoutError, ValueError, ModelConfigError, Exception) as e:
        return None, f"not planned: {str(e)[:200]}"
    text = "; ".join(p.reasons[:2] + p.advice[:2]) or p.verdict
    return p.verdict, text


def _running(st: Stepper) -> str | None:
    return next((s.name for s in st.steps if s.state == "running"), None)


def _exec_argv_matches(actual: list[str], expected: list[str]) -> bool:
    # A script run through its interpreter shows as [python, script, ...] after exec of a shebang file.
    return len(actual) >= len(expected) and actual[-len(expected) + 1:] == expected[1:]


def _saw_ready(watch: _SessionWatch) -> bool:
    c = watch.cls.result(None)
    return c.state == "ready"


async def _failed(link: HostLink, watch: _SessionWatch, st: Stepper, res: dict, e: LaunchFailed) -> OperationResult:
    """Fail the running step with the classified cause and the tail of this session's log."""
    if watch.exited.is_set() or not watch.exit:
        try:  # give the supervisor a moment to write exit.json, then read the whole story
            await asyncio.wait_for(watch.exited.wait(), 3.0 if watch.exited.is_set() else 0.5)
        except asyncio.TimeoutError:
            pass
    from console.core.classify import failure_tail

    tail: list[str] = []
    try:
        r = await link.request("read_log", {"session_id": res["session_id"], "tail_bytes": 256 * 1024})
        watch.cls = _classifier()
        watch.cls.feed(r["data"])
        tail = failure_tail(r["data"].splitlines(), 30)  # an argparse usage dump is left out
    except (LinkDown, RequestError, asyncio.TimeoutError):
        tail = failure_tail(watch.lines, 30)
    c = watch.classification()
    step = _running(st) or e.step
    reason = str(e)
    if c.state == "failed":
        reason = f"{reason}: {c.cause}" + (f" — {c.line}" if c.line else "")
    if step == "spawned" and watch.rec and not watch.exited.is_set():
        try:  # we started something we cannot vouch for: stop it rather than leave it running
            await link.request("kill", {"pid": watch.rec["pid"], "start_ticks": watch.rec["start_ticks"],
                                        "pgid": watch.rec["pgid"], "signal": 9, "session_id": res["session_id"]})
            reason += "; the process was stopped"
        except (LinkDown, RequestError, asyncio.TimeoutError) as err:
            reason += f"; could not stop pid {watch.rec['pid']}: {err}"
    elif watch.rec and not watch.exited.is_set() and c.state != "failed":
        reason += f"; the server is still running (session {res['session_id']}): kill it or wait"
    st.finish(step, "failed", reason)
    for i, s in enumerate(st.steps):
        if s.state == "pending":
            st.steps[i] = s.model_copy(update={"state": "skipped"})
    cause = c.cause if c.state == "failed" else ("signal_killed" if (watch.exit or {}).get("signal") else
                                                  ("other" if watch.exited.is_set() else None))
    return OperationResult(**res, ok=False, state="failed", steps=st.steps, cause=cause, line=c.line,
                           hint=c.hint, error=reason, log_tail=tail)


# ------------------------------------------------------------------ kill

def _members(snap: HostSnapshot, target: KillTarget, pgid: int | None) -> list[ServerProc]:
    """Every process that belongs to the target: its session, its group, its descendants."""
    by_pid = {p.pid: p for p in snap.servers}
    roots = set()
    if target.pid:
        roots.add(target.pid)
    out = []
    for p in snap.servers:
        if p.role == "supervisor":
            continue
        if target.session_id and p.session_id == target.session_id:
            out.append(p)
        elif pgid is not None and p.pgid == pgid:
            out.append(p)
        elif p.pid in roots:
            out.append(p)
        else:
            cur: ServerProc | None = p
            n = 0
            while cur is not None and n < 64:
                if cur.ppid in roots:
                    out.append(p)
                    break
                cur, n = by_pid.get(cur.ppid), n + 1
    return out


async def _fresh(link: HostLink) -> HostSnapshot:
    return await link.refresh()


async def find_session(link: HostLink, snap: HostSnapshot, session_id: str) -> SessionInfo | None:
    """The session ``session_id``: from the snapshot, else (an older ended one a sample no longer carries)
    from the agent's full list of run directories."""
    s = next((x for x in snap.sessions if x.session_id == session_id), None)
    if s is not None:
        return s
    for x in sessions_each(await link.request("sessions", audit=False)):
        if x.session_id == session_id:
            return x
    return None


async def kill(link: HostLink, target: KillTarget, on_steps=None, *, grace: float = 20.0,
               release_timeout: float = 30.0) -> OperationResult:
    """SIGTERM the group, escalate after ``grace``, and confirm everything is gone (see module doc)."""
    return record_result(link, await _kill(link, target, on_steps, grace=grace, release_timeout=release_timeout))


async def _kill(link: HostLink, target: KillTarget, on_steps=None, *, grace: float = 20.0,
                release_timeout: float = 30.0) -> OperationResult:
    st = Stepper(["target", "SIGTERM", "exited", "no orphans", "GPU released", "port closed"], on_steps)
    res = dict(op="kill", host=link.name, session_id=target.session_id)
    st.start("target")
    try:
        snap = await _fresh(link)
    except (LinkDown, RequestError, asyncio.TimeoutError) as e:
        st.finish("target", "failed", str(e))
        return OperationResult(**res, ok=False, steps=st.steps, error=str(e))
    pid, start, pgid, port, gpus = target.pid, target.start_ticks, None, None, []
    if target.session_id:
        s = await find_session(link, snap, target.session_id)
        if s is None:
            err = f"no session {target.session_id} on {link.name}"
            st.finish("target", "failed", err)
            return OperationResult(**res, ok=False, steps=st.steps, error=err)
        if s.record is None or s.broken or s.record_stale:
            err = (f"session {target.session_id} is broken ({s.broken}): nothing signalled" if s.broken else
                   f"session {target.session_id} ended (host rebooted / record stale: {s.record_stale}): "
                   "nothing signalled" if s.record_stale else
                   f"session {target.session_id} has no supervisor record (never started)")
            st.finish("target", "failed", err)
            return OperationResult(**res, ok=False, steps=st.steps, error=err)
        pid, start, pgid = s.record.pid, s.record.start_ticks, s.record.pgid
        if not s.server_alive:  # the recorded group is not confirmed as the session's: only its members count
            pgid = None
        port = s.spec.port if s.spec else None
        gpus = list(s.spec.gpus) if s.spec else []
    else:
        p = next((x for x in snap.servers if x.pid == pid), None)
        if p is None or (start is not None and p.start_ticks != start):
            err = f"process {pid} is gone or is no longer the one targeted"
            st.finish("target", "failed", err)
            return OperationResult(**res, ok=False, steps=st.steps, error=err)
        start = p.start_ticks
        if target.as_orphan:  # every evidence line must still be true now, on this fresh snapshot
            from console.core.orphans import recheck

            proven, why = recheck(snap, p.pid, start)
            if proven is None:
                err = f"{why}: nothing signalled"
                st.finish("target", "failed", err)
                return OperationResult(**res, ok=False, steps=st.steps, error=err)
        pgid = p.pgid if p.pgid == p.pid else None
        port = server_port(p.argv) if p.role == "launcher" else None
    port = port or target.port
    # a session whose server is not confirmed (pgid None) has only the members the agent attributes to it
    members = _members(snap, target.model_copy(update={"pid": None if target.session_id and pgid is None else pid}),
                       pgid)
    for m in members:
        gpus.extend(m.gpu_mem_mib)
    gpus = sorted(set(gpus))
    held = {g.index: sum(g2 for m in members for i, g2 in m.gpu_mem_mib.items() if i == g.index)
            for g in snap.gpus if g.index in gpus}
    baseline = {g.index: (g.mem_used_mib or 0) - held.get(g.index, 0) for g in snap.gpus if g.index in gpus}
    ident = [[m.pid, m.start_ticks] for m in members]
    st.finish("target", "ok", f"pid {pid} (start {start})" + (f", group {pgid}" if pgid else "")
              + f"; {len(members)} process(es): " + ", ".join(str(m.pid) for m in members)
              + (f"; GPUs {','.join(map(str, gpus))}" if gpus else ""))

    async def signal_all(sig: int) -> list[int]:
        args: dict[str, Any] = {"pid": pid, "start_ticks": start, "signal": sig, "pids": ident}
        if pgid:
            args["pgid"] = pgid
        if target.session_id:
            args["session_id"] = target.session_id
        try:
            return (await link.request("kill", args))["signalled"]
        except RequestError as e:
            if "already gone" in str(e):
                return []
            raise

    try:
        st.start("SIGTERM")
        done = await signal_all(15)
        st.finish("SIGTERM", "ok", "signalled " + (", ".join(f"group {-d}" if d < 0 else f"pid {d}" for d in done)
                                                  or "nothing: already gone"))
        st.start("exited")
        remaining = await _wait_gone(link, ident, grace)
        if remaining:
            st.add("SIGKILL")
            st.finish("exited", "failed", f"still running after {grace:.0f} s grace: "
                      + ", ".join(str(p) for p, _ in remaining))
            st.start("SIGKILL")
            await signal_all(9)
            remaining = await _wait_gone(link, ident, 10.0)
            st.finish("SIGKILL", "ok" if not remaining else "failed",
                      "all gone" if not remaining else "still alive: " + ", ".join(str(p) for p, _ in remaining))
        else:
            st.finish("exited", "ok", f"all {len(ident)} process(es) exited")
        st.start("no orphans")
        snap = await _fresh(link)
        if target.session_id:  # the supervisor records the exit after it cleaned up the group
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline and not any(
                    x.session_id == target.session_id and (x.exit or not x.supervisor_alive) for x in snap.sessions):
                await asyncio.sleep(0.1)
                snap = await _fresh(link)
        orphans = [p for p in snap.servers if p.alive and p.role != "supervisor" and (
            (p.pid, p.start_ticks) in {tuple(x) for x in ident}
            or (target.session_id and p.session_id == target.session_id)
            or (pgid is not None and p.pgid == pgid))]
        left = [f"pid {p.pid} {p.title[:60]}" + (f" holding {sum(p.gpu_mem_mib.values())} MiB on GPU "
                                                  f"{','.join(map(str, p.gpu_mem_mib))}" if p.gpu_mem_mib else "")
                for p in orphans]
        st.finish("no orphans", "ok" if not orphans else "failed",
                  "no process of the target remains" if not orphans else "; ".join(left))
        st.start("GPU released")
        if snap.gpu_source == "none" or not gpus:
            st.finish("GPU released", "skipped", "no GPU information" if snap.gpu_source == "none"
                      else "the target held no GPU memory")
        else:
            ok, ev = await _wait_released(link, {p for p, _ in ident}, baseline, release_timeout)
            st.finish("GPU released", "ok" if ok else "failed", ev)
            if not ok:
                left.append(ev)
        st.start("port closed")
        if port is None:
            st.finish("port closed", "skipped", "no port known")
        else:
            closed = await _wait_port_closed(link, port, 10.0)
            st.finish("port closed", "ok" if closed else "failed",
                      f"127.0.0.1:{port} refuses connections" if closed else f"port {port} still accepts connections")
            if not closed:
                left.append(f"port {port} still open")
    except (LinkDown, RequestError, asyncio.TimeoutError) as e:
        name = _running(st) or "SIGTERM"
        st.finish(name, "failed", f"lost contact with the host: {e}")
        return OperationResult(**res, ok=False, steps=st.steps, error=str(e), state="stopping")
    ok = all(s.state in ("ok", "skipped") for s in st.steps if s.name != "exited")
    return OperationResult(**res, ok=ok, steps=st.steps, state="stopped" if ok else "stopping",
                           left=left, error=None if ok else "kill not confirmed: " + "; ".join(left))


async def _wait_gone(link: HostLink, ident: list[list[int]], timeout: float) -> list[list[int]]:
    deadline = time.monotonic() + timeout
    while True:
        remaining = []
        for pid, start in ident:
            p = await link.request("proc", {"pid": pid}, audit=False)
            if p and p.get("start_ticks") == start and p.get("state") not in ("Z", "X"):
                remaining.append([pid, start])
        if not remaining or time.monotonic() > deadline:
            return remaining
        await asyncio.sleep(0.1)


async def _wait_released(link: HostLink, pids: set[int], baseline: dict[int, int], timeout: float):
    deadline = time.monotonic() + timeout
    while True:
        s = await link.request("snapshot", audit=False)
        listed, high = [], []
        for g in s.get("gpus", []):
            if g["index"] not in baseline:
                continue
            listed += [f"pid {p['pid']} on GPU {g['index']}" for p in g.get("procs", []) if p["pid"] in pids]
            used = g.get("mem_used_mib")
            if used is not None and used > baseline[g["index"]] + GPU_RELEASE_TOLERANCE_MIB:
                high.append(f"GPU {g['index']} uses {used} MiB (baseline {baseline[g['index']]} MiB)")
        if not listed and not high:
            return True, "driver lists none of the pids; memory back to baseline (" + ", ".join(
                f"GPU {i}: ≤{b + GPU_RELEASE_TOLERANCE_MIB} MiB" for i, b in baseline.items()) + ")"
        if time.monotonic() > deadline:
            return False, "; ".join(listed + high)
        await asyncio.sleep(0.25)


async def _wait_port_closed(link: HostLink, port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if not await link.request("port_open", {"port": port}, audit=False):
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)


async def relaunch(link: HostLink, target: KillTarget, req: LaunchRequest, on_steps=None, *,
                   wait: bool = True, timeout: float = 900.0, grace: float = 20.0,
                   session_id: str | None = None,
                   on_launch: Callable[[], None] | None = None) -> OperationResult:
    """Confirmed kill, then launch. Refuses to start while anything of the old target remains."""
    collected: list[Step] = []

    def kill_steps(steps: list[Step]) -> None:
        collected[:] = [s.model_copy(update={"name": f"kill: {s.name}"}) for s in steps]
        if on_steps:
            on_steps(list(collected))

    refusals, hints, line = [], [], None  # refused before anything is killed: every reason at once
    if req.check_flags:  # flags the host's server would reject
        fv = await check_launch_flags(link, req.command, req.flags)
        if not fv.ok:
            refusals.append(fv.error or "the server rejects these flags")
            line = fv.error
            hints += ["; ".join(p.message for p in fv.problems[:5])] if fv.problems else []
        req = req.model_copy(update={"check_flags": False})  # checked once: the launch below need not again
    verdict, plan_text = await memory_verdict(link, req)
    if verdict == "does_not_fit" and not req.force:
        refusals.append(f"memory plan: does not fit — {plan_text} (relaunch with force to try anyway)")
    if refusals:
        reason = "; ".join(refusals)
        return OperationResult(op="relaunch", host=link.name, ok=False, session_id=target.session_id,
                               steps=[Step(name="preflight", state="failed", evidence=f"{reason}; nothing was stopped")],
                               error=f"{reason}; nothing was stopped", refused=reason, refusals=refusals, line=line,
                               hint="; ".join(hints) or None)
    k = await kill(link, target, kill_steps, grace=grace)
    if not k.ok:
        return OperationResult(op="relaunch", host=link.name, ok=False, session_id=target.session_id,
                               state=k.state, steps=collected, left=k.left,
                               error="relaunch refused: the old server is not confirmed gone: " + (k.error or ""))
    prefix = list(collected)

    def launch_steps(steps: list[Step]) -> None:
        if on_steps:
            on_steps(prefix + steps)

    req = req.model_copy(update={"replaces": target.session_id})
    if on_launch is not None:  # the old server is confirmed gone: the new launch starts now
        on_launch()
    r = await launch(link, req, launch_steps, wait=wait, timeout=timeout, session_id=session_id)
    return r.model_copy(update={"op": "relaunch", "steps": prefix + r.steps})


def request_from_argv(host: str, argv: list[str], gpus: list[int], port: int | None,
                      env: dict[str, str] | None = None) -> LaunchRequest:
    """Split a server argv into command and flags (the flags start at the first ``--`` option)."""
    i = next((k for k, a in enumerate(argv) if a.startswith("--")), len(argv))
    return LaunchRequest(host=host, command=argv[:i], flags=argv[i:], gpus=gpus,
                         port=port if port is not None else (int(flag_value(argv, "--port") or 0) or None),
                         env=env or {})


def host_env(names: list[str]) -> dict[str, str]:
    """Values of the configured env names from the console's own environment (never logged)."""
    return {n: os.environ[n] for n in names if n in os.environ}
