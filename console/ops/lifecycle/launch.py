"""A launch: the preflight, then a table of checks, each confirmed against the host — never assumed.

The checks (:meth:`_Launch.table`): spawned (pid + start time + argv), logging (this session's own log
grows), listening (port accepts), healthy (GET /health 200; 503 = warming up), ready (the ready line in this
session's log), on GPU (the driver attributes memory on the target GPUs to the session's processes). A server
exit at any point fails the launch at once with the classified cause, the decisive line, a hint and the last
lines of this session's log — unless an operator stopped the session (``x`` in the console, ``kill SESSION`` from
any console): then the launch reports "aborted by the operator" (:attr:`OperationResult.aborted`), not a failure.

When the host's own server flags have ``--uvicorn-access-log-exclude-prefixes`` and the operator did not give it,
the launch adds ``--uvicorn-access-log-exclude-prefixes /metrics /health /server_info``: the console's own probes stay out of
the session's log (:mod:`console.core.probes`).
"""

from __future__ import annotations

import asyncio
import getpass
import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable

from console import __version__
from console.core.probes import quiet_probe_flags
from console.core.sessions import flag_value, new_session_id, server_port
from console.core.text import LAUNCH_STEPS, no_gpus_text
from console.link.client import HostClient
from console.link.errors import LinkDown, RequestError
from console.link.link import HostLink
from console.model import ABORTED, DEFAULT_PORT, LaunchRequest, LaunchSpec, OperationResult, SupervisorRecord
from console.ops.lifecycle.preflight import (
    Checked,
    check_request,
    host_refusals,
    launched_flags,
    orphan_note,
    passed_evidence,
    preflight_snapshot,
    refused,
    with_plan,
)
from console.ops.lifecycle.steps import Check, OnSteps, Skip, StepFailed, Stepper, fresh_snapshot, record_result
from console.ops.lifecycle.watch import SessionWatch
from console.ops.session_log import probe_health

READY_LINE = "The server is fired up and ready to roll!"


@dataclass(frozen=True)
class MoreChecks:
    """A launch whose READY means more, or other, than a server's (issue 29): the default checks named in ``skip``
    left out (a gateway has no ready line and holds no GPU), then ``extra(client, port)``'s, named ``names``."""

    names: tuple[str, ...] = ()
    extra: Callable[[HostClient, int], list[Check]] | None = None
    skip: tuple[str, ...] = ()

ABORT_EXIT_WAIT_S = 5.0
"""How long an aborted launch waits for its server's end to be recorded (its result then reads STOPPED)."""


def build_spec(req: LaunchRequest, session_id: str, now: float) -> tuple[LaunchSpec, dict[str, str]]:
    """argv = command + flags (+ --port unless present); env values are returned separately."""
    for part in req.command + req.flags:
        if "\0" in part:
            raise ValueError("NUL byte in command or flags")
    argv = list(req.command) + launched_flags(req)
    port = req.port if req.port is not None else server_port(req.flags) or DEFAULT_PORT
    spec = LaunchSpec(
        session_id=session_id, argv=argv, env_names=sorted(req.env), gpus=list(req.gpus), port=port,
        launched_by=f"{getpass.getuser()}@{socket.gethostname()}", console_version=__version__,
        created_at=now, profile=req.profile, replaces=req.replaces, deployment=req.deployment,
        deployment_role=req.deployment_role, replica=req.replica, group=req.group, node_rank=req.node_rank,
        nnodes=req.nnodes, group_hosts=req.group_hosts,
        group_kill_on_failure=req.group_kill_on_failure)
    return spec, dict(req.env)


async def launch(link: HostLink, req: LaunchRequest, on_steps: OnSteps | None = None, *, wait: bool = True,
                 timeout: float = 900.0, need_mib: int | None = None, allow_busy: bool = False,
                 session_id: str | None = None, checked: Checked | None = None,
                 more: MoreChecks | None = None, share_gpus_with: str | None = None) -> OperationResult:
    """Start a server in a fresh session and confirm it step by step (see module doc). ``checked``: the
    preflight's own checks already made for this request (a relaunch makes them before its kill). ``more``: checks
    added to (or left out of) the table. ``share_gpus_with``: the live session whose GPUs this launch may share (a
    roll's new replica beside its old one, when the planner says both fit)."""
    return record_result(link, await _launch(link, req, on_steps, wait=wait, timeout=timeout, need_mib=need_mib,
                                             allow_busy=allow_busy, session_id=session_id, checked=checked,
                                             more=more or MoreChecks(), share_gpus_with=share_gpus_with))


async def _launch(link: HostLink, req: LaunchRequest, on_steps: OnSteps | None, *, wait: bool, timeout: float,
                  need_mib: int | None, allow_busy: bool, session_id: str | None,
                  checked: Checked | None, more: MoreChecks,
                  share_gpus_with: str | None = None) -> OperationResult:
    now = time.time()
    sid = session_id or new_session_id(req.gpus, now)
    spec, env = build_spec(req, sid, now)
    st = Stepper(["preflight", *(n for n in LAUNCH_STEPS if n not in more.skip), *more.names], on_steps,
                 phase="launch")
    res: dict[str, Any] = dict(op="launch", host=link.name, session_id=sid)
    st.start("preflight")
    snap = await preflight_snapshot(link)  # taken now: after a relaunch's kill, what the kill left
    checked = checked or await check_request(link, req, snap)
    quiet = quiet_probe_flags(req.flags, checked.schema)
    if quiet:  # the host's server can leave the console's probes out of its access log: it is asked to
        req = req.model_copy(update={"flags": [*req.flags, *quiet]})
        spec, env = build_spec(req, sid, now)
    note = orphan_note(snap, req.gpus)
    opts: dict[str, Any] = {"need_mib": need_mib, "allow_busy": allow_busy}
    if share_gpus_with is not None:
        opts["share_gpus_with"] = share_gpus_with
    if checked.refusals:  # nothing is started: the host's own checks too, so that every failure is listed at once
        refusals = checked.refusals + await host_refusals(link, spec, env, opts)
        return refused(st, res, refusals, line=checked.line, hint="; ".join(checked.hints) or None, note=note)
    run = _Launch(link, st, res, spec, env, checked, SessionWatch(link, sid), quiet, more)
    try:
        return await run.go(opts, note, wait, timeout)
    finally:
        run.watch.close()


class _Launch:
    """One launch under way: its spec, its steps, its watch on the session, and the probe of each check."""

    def __init__(self, link: HostLink, st: Stepper, res: dict[str, Any], spec: LaunchSpec, env: dict[str, str],
                 checked: Checked, watch: SessionWatch, quiet: list[str] | None = None,
                 more: MoreChecks | None = None):
        self.link, self.st, self.res, self.spec, self.env = link, st, res, spec, env
        self.checked, self.watch = checked, watch
        self.quiet = list(quiet or [])
        """The flags added so that the server leaves the console's probes out of its log (empty: none)."""
        self.client = HostClient.of(link)
        self.sid: str = res["session_id"]
        self.port: int = spec.port if spec.port is not None else DEFAULT_PORT  # build_spec always sets one
        self.rec: SupervisorRecord | None = None
        self.start_error: str | None = None
        self.health_said: str | None = None
        """What the last ``GET /health`` answered when it was no 200 (``… HTTP 302``, ``…: timed out …``)."""
        self.more = more or MoreChecks()

    def table(self) -> list[Check]:
        """The launch's checks in order: what proves each step, how long it may take, how often it asks."""
        more = self.more
        return [c for c in self._table() if c.name not in more.skip] + (
            more.extra(self.client, self.port) if more.extra else [])

    def _table(self) -> list[Check]:
        return [
            Check("spawned", self.spawned, timeout=0.0, watched=False),
            Check("logging", self.logging, timeout=120.0, wake_on_change=True),
            Check("listening", self.listening, poll=0.2),
            Check("healthy", self.healthy, poll=0.25),
            Check("ready", self.ready, wake_on_change=True),
            Check("on GPU", self.on_gpu, timeout=60.0, poll=0.5),
        ]

    async def go(self, opts: dict[str, Any], note: str, wait: bool, timeout: float) -> OperationResult:
        """Spawn, then confirm each check of the table (within ``timeout`` after the spawn)."""
        try:
            stopped = await self.spawn(opts, note)
            if stopped is not None:
                return stopped
            spawned, *rest = self.table()
            await self.st.confirm(spawned)
            if not wait:
                return OperationResult(**self.res, ok=True, state="launching", steps=self.st.steps)
            deadline = time.monotonic() + timeout
            for check in rest:
                await self.st.confirm(check, self.watch, deadline)
            return OperationResult(**self.res, ok=True, state="ready", steps=self.st.steps)
        except StepFailed as e:
            if e.step == "healthy" and self.health_said:  # why it was not confirmed: the server's own answer
                e = StepFailed(e.step, f"{e}: {self.health_said}")
            return with_plan(await self.failed(e), self.checked)
        except (LinkDown, RequestError, asyncio.TimeoutError) as e:
            return await self.failed(StepFailed(self.st.running() or "spawned", f"lost contact with the host: {e}"))

    async def spawn(self, opts: dict[str, Any], note: str) -> OperationResult | None:
        """Ask the host to launch (its own checks first, under its launch lock). Returns the result when it
        refused or did not answer; else None: the preflight passed and the session's log is followed."""
        st = self.st
        try:
            r = await self.client.launch(self.spec, self.env, opts, timeout=60, audit=True)
        except RequestError as e:  # the agent refused (its checks, the command, the run directory): nothing started
            return refused(st, self.res, [str(e).removeprefix("preflight failed: ") or "refused by the host"],
                           note=note)
        except (LinkDown, asyncio.TimeoutError) as e:
            msg = (str(e) or "launch request timed out") + note
            st.finish("preflight", "failed", msg)
            return OperationResult(**{**self.res, "session_id": None}, ok=False, state="failed", steps=st.steps,
                                   error=msg)
        quiet = (f"; {' '.join(self.quiet)} added: the console's own probes stay out of the session's log"
                 if self.quiet else "")
        st.finish("preflight", "warning" if self.checked.forced else "ok",
                  passed_evidence(self.checked, r.preflight, note) + quiet)
        await self.watch.follow()
        s = r.session
        self.rec = s.record if s is not None else None
        self.start_error = s.exit.error if s is not None and s.exit is not None else None
        return None

    # -------------------------------------------------------------- the probes
    async def spawned(self) -> str:
        rec = self.rec
        if rec is None:
            raise StepFailed("spawned", self.start_error or "the supervisor did not start the server")
        proc = await self.client.proc(rec.pid, audit=True)
        if proc is None or not proc.same(rec.start_ticks):
            self.watch.exited.set()
            raise StepFailed("spawned", f"pid {rec.pid} is already gone")
        if proc.argv != self.spec.argv and not _exec_argv_matches(proc.argv or [], self.spec.argv):
            raise StepFailed("spawned", f"pid {rec.pid} runs {proc.argv}, not the expected argv")
        return f"pid {rec.pid} (pgid {rec.pgid}, start {rec.start_ticks}) argv matches"

    async def logging(self) -> str | None:
        n = self.watch.log_bytes
        return f"output.log of this session: {n} bytes" if n > 0 else None

    async def listening(self) -> str | None:
        port = self.port
        return f"127.0.0.1:{port} accepts connections" if await self.client.port_open(port) else None

    async def healthy(self) -> str | None:
        r = await probe_health(self.client, self.port, 25)
        self.health_said = None if r.status == 200 else f"GET /health answered HTTP {r.status}" if r.status else (
            f"GET /health: {r.body or 'no answer'}")
        return "GET /health → 200" if r.status == 200 else None

    async def ready(self) -> str | None:
        c = self.watch.log.result(None)
        if c.state == "failed":
            raise StepFailed("ready", "the log shows a failure")
        return f"log: {READY_LINE}" if c.state == "ready" else None

    async def on_gpu(self) -> str | None:
        known = self.link.snapshot()
        if known.gpu_source == "none":
            raise Skip(no_gpus_text(known))
        s = await self.client.snapshot()
        pids = {p.pid for p in s.servers if p.session_id == self.sid}
        got = []
        for g in s.gpus:
            if g.index in self.spec.gpus:
                mib = sum(p.used_mib or 0 for p in g.procs if p.pid in pids)
                if mib > 0:
                    got.append(f"GPU {g.index}: {mib} MiB")
        return ", ".join(got) + " held by this session's processes" if len(got) == len(self.spec.gpus) else None

    # -------------------------------------------------------------- a failure
    async def failed(self, e: StepFailed) -> OperationResult:
        """Fail the running step with the classified cause and the tail of this session's log."""
        watch, st = self.watch, self.st
        await self._exit_recorded(0.5)  # give the supervisor a moment to write exit.json, then read the whole story
        if await self.stop_requested():
            return await self.aborted(e)
        from console.core.classify import failure_tail

        text: str | None = None
        try:
            text = (await self.client.read_log(self.sid, tail_bytes=256 * 1024, audit=True)).data
            tail = failure_tail(text.splitlines(), 30)  # an argparse usage dump is left out
        except (LinkDown, RequestError, asyncio.TimeoutError):
            tail = failure_tail(list(watch.log.lines), 30)
        c = watch.classification(text)
        step = st.running() or e.step
        reason = str(e)
        if c.state == "failed":
            reason = f"{reason}: {c.cause}" + (f" — {c.line}" if c.line else "")
        reason += await self._left_running(step, c.state == "failed")
        st.finish(step, "failed", reason)
        st.skip_pending()
        ex = watch.exit
        cause = c.cause if c.state == "failed" else ("signal_killed" if ex is not None and ex.signal else
                                                      ("other" if watch.exited.is_set() else None))
        return OperationResult(**self.res, ok=False, state="failed", steps=st.steps, cause=cause, line=c.line,
                               hint=c.hint, error=reason, log_tail=tail)

    async def _exit_recorded(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the session's end to be recorded; whether it was."""
        if not self.watch.exited.is_set():
            try:
                await asyncio.wait_for(self.watch.exited.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        return self.watch.exited.is_set()

    async def stop_requested(self) -> bool:
        """An operator asked the session to stop: its exit record says so, or the host lists its stop request
        (``stop-request.json``, written by every kill before it signals). Positive evidence only."""
        ex = self.watch.exit
        if ex is not None and ex.stopped_by_operator:
            return True
        try:
            snap = await fresh_snapshot(self.link)
        except (LinkDown, RequestError, asyncio.TimeoutError):
            snap = self.link.snapshot()
        return any(s.session_id == self.sid and (s.stop_requested or (s.exit is not None and s.exit.stopped_by_operator))
                   for s in snap.sessions)

    async def aborted(self, e: StepFailed) -> OperationResult:
        """An operator stopped the session while the launch ran: the step under way reads aborted (a warning, not
        a failure), the rest skipped; the result says :data:`ABORTED` with no cause. Its state is STOPPED once the
        end is recorded (waited for up to :data:`ABORT_EXIT_WAIT_S`), else STOPPING (the kill confirms the rest)."""
        st = self.st
        step = st.running() or e.step
        ended = await self._exit_recorded(ABORT_EXIT_WAIT_S)
        ex = self.watch.exit
        how = (f"; the server ended ({'signal ' + str(ex.signal) if ex.signal else 'exit code ' + str(ex.exit_code)})"
               if ex is not None and (ex.signal or ex.exit_code is not None) else "")
        st.finish(step, "warning", f"{ABORTED}: the session was stopped during this step{how}")
        st.skip_pending()
        return OperationResult(**self.res, ok=False, state="stopped" if ended else "stopping", steps=st.steps,
                               aborted=ABORTED)

    async def _left_running(self, step: str, log_failed: bool) -> str:
        """What a failed launch did about a server that may still run: stopped (it could not be vouched for at
        spawn), or said so."""
        rec = self.rec
        if rec is None or self.watch.exited.is_set():
            return ""
        if step == "spawned":  # we started something we cannot vouch for: stop it rather than leave it running
            try:
                await self.client.kill(start_ticks=rec.start_ticks, signal=9, pid=rec.pid, pgid=rec.pgid,
                                       session_id=self.sid, audit=True)
                return "; the process was stopped"
            except (LinkDown, RequestError, asyncio.TimeoutError) as err:
                return f"; could not stop pid {rec.pid}: {err}"
        if not log_failed:
            return f"; the server is still running (session {self.sid}): kill it or wait"
        return ""


def _exec_argv_matches(actual: list[str], expected: list[str]) -> bool:
    # A script run through its interpreter shows as [python, script, ...] after exec of a shebang file.
    return len(actual) >= len(expected) and actual[-len(expected) + 1:] == expected[1:]


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
