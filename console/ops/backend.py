"""LiveBackend: the real Backend for the TUI — links, trackers and lifecycle operations.

It is given the config in force and one (not yet opened) link per host by the caller (the
CLI stages the demo host or reads the operator's config); it knows nothing of the command line.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from console import paths
from console.audit import Audit
from console.backend import OnAudit, OnDeployment, OnLog, OnSteps, OnView
from console.config import Config
from console.core.flags import FlagSchema, check_all
from console.link.client import HostClient
from console.link.link import HostLink
from console.model import DEFAULT_PORT, AuditEntry, KillTarget, LaunchRequest, OperationResult, PendingLaunch, Step
from console.ops import lifecycle
from console.ops.flag_learning import default_cache_dir, learn_schema
from console.ops.tracker import HostTracker

if TYPE_CHECKING:
    from console.ops.deploy.watch import DeploymentWatch


def launch_progress(steps: Sequence[Step], skip: int = 0) -> int:
    """The n of a launch's LAUNCHING n/6: its own steps done (``skip``: steps before it; the kill phase's and the
    preflight do not count)."""
    mine = [s for s in steps[skip:] if s.phase != "kill"]
    return sum(1 for s in mine if s.state in ("ok", "skipped") and s.name != "preflight")


def reports_dir() -> Path:
    """Where the TUI writes incident reports (:func:`console.paths.reports_dir`)."""
    return paths.reports_dir()


def safe_name(text: str) -> str:
    """``text`` as one file name component (a session id comes from the host: no separators, no dot-names)."""
    out = re.sub(r"[^A-Za-z0-9._-]", "_", text)[:120].lstrip(".")
    return out or "session"


class LiveBackend:
    """Connects every host in the background; one slow or dead host never blocks another."""

    LEARN_WAIT_S = 3.0
    """How long a form check waits for a host's --help to be learned before answering without it."""

    def __init__(self, config: Config, links: Sequence[HostLink], *, interval: float = 1.0,
                 read_only: bool = False, audit: Audit | None = None, cache_dir: Path | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.cfg = config
        self.links: dict[str, HostLink] = {lk.name: lk for lk in links}
        self.hosts: list[str] = list(self.links)
        self.interval = float(interval)
        self.read_only = bool(read_only)
        self.audit = audit
        self.cache_dir = cache_dir
        self.clock = clock
        self.trackers: dict[str, HostTracker] = {}
        self._tasks: list[asyncio.Task] = []
        self._schema_tasks: dict[str, asyncio.Task[FlagSchema]] = {}
        self.deploy_watch: DeploymentWatch | None = None
        """The deployments' rows (issue 29), once :meth:`watch_deployments` started them."""

    def prestart(self) -> None:
        """Start connecting every host now, before the UI is up (optional): the agents start while the
        app draws its first frame, and :meth:`start` shows each host's first sample at once."""
        if not self._tasks:
            self._tasks = [asyncio.create_task(link.run()) for link in self.links.values()]

    async def start(self, on_view: OnView, on_log: OnLog, on_audit: OnAudit) -> None:
        if self.audit is not None:
            self.audit.listeners.append(on_audit)
        prestarted = bool(self._tasks)
        for link in self.links.values():
            tr = self.trackers[link.name] = HostTracker(link, interval=self.interval, on_view=on_view,
                                                        on_log=on_log, clock=self.clock)
            if prestarted:
                tr.update()  # what the link already has (its first sample may have come before the UI)
            else:
                self._tasks.append(asyncio.create_task(link.run()))

    async def stop(self) -> None:
        if self.deploy_watch is not None:
            self.deploy_watch.stop()
        for link in self.links.values():
            await link.close()
        for t in self._tasks:
            t.cancel()

    def _launch_steps(self, host: str, sid: str, on_steps: OnSteps, skip: int = 0) -> OnSteps:
        """Progress of a launch, also counted into its GPU's LAUNCHING n/6 (``skip``: kill steps before it)."""
        tr = self.trackers[host]

        def cb(steps: list[Step]) -> None:
            on_steps(steps)
            tr.launch_step(sid, launch_progress(steps, skip))
        return cb

    def _pending(self, req: LaunchRequest, sid: str, replaces: str | None = None) -> PendingLaunch:
        return PendingLaunch(host=req.host, session_id=sid, gpus=list(req.gpus), argv=[*req.command, *req.flags],
                             port=req.port, sent_at=self.clock(), replaces=replaces or req.replaces)

    async def launch(self, req: LaunchRequest, on_steps: OnSteps) -> OperationResult:
        link = self.links[req.host]
        tr = self.trackers[req.host]
        env = {**lifecycle.host_env(self.cfg.host(req.host).env_names), **req.env}
        sid = lifecycle.new_session_id(req.gpus, self.clock())
        tr.launch_sent(self._pending(req, sid))
        result = OperationResult(op="launch", host=req.host, ok=False, error="launch interrupted")
        try:
            result = await lifecycle.launch(link, req.model_copy(update={"env": env}),
                                            self._launch_steps(req.host, sid, on_steps), session_id=sid)
            return result
        finally:
            tr.launch_done(sid, result)

    async def kill(self, target: KillTarget, on_steps: OnSteps) -> OperationResult:
        result = await lifecycle.kill(self.links[target.host], target, on_steps)
        self.trackers[target.host].kill_done(target.session_id, target.pid, result, target.start_ticks)
        return result

    async def relaunch(self, target: KillTarget, req: LaunchRequest, on_steps: OnSteps) -> OperationResult:
        tr = self.trackers[target.host]
        sid = lifecycle.new_session_id(req.gpus, self.clock())
        sent: list[bool] = []
        old = next((s for s in self.links[target.host].snapshot().sessions
                    if target.session_id and s.session_id == target.session_id), None)
        env, _ = lifecycle.relaunch_env(self.cfg, req.host, old.spec if old else None, req.env)  # as the CLI's
        req = req.model_copy(update={"env": env})

        def on_launch() -> None:  # the old server is confirmed gone
            sent.append(True)
            gone = OperationResult(op="kill", host=target.host, ok=True, session_id=target.session_id)
            tr.kill_done(target.session_id, target.pid, gone, target.start_ticks)
            tr.launch_sent(self._pending(req, sid, target.session_id))

        result = OperationResult(op="relaunch", host=target.host, ok=False, error="relaunch interrupted")
        try:
            result = await lifecycle.relaunch(self.links[target.host], target, req,
                                              self._launch_steps(req.host, sid, on_steps), session_id=sid,
                                              on_launch=on_launch)
            return result
        finally:
            if sent:
                tr.launch_done(sid, result)

    async def watch_deployments(self, on_row: OnDeployment) -> None:
        """Read each deployment of a host of this backend every few seconds (:mod:`console.ops.deploy.watch`)."""
        from console.ops.deploy.watch import DeploymentWatch

        if self.deploy_watch is None and self.cfg.deployments:
            self.deploy_watch = DeploymentWatch(self.cfg, self.links, on_row, clock=self.clock)
            self.deploy_watch.start()

    async def deploy_roll(self, name: str, sets: list[str], unsets: list[str], on_steps: OnSteps) -> OperationResult:
        """``deploy roll NAME --set … --unset …``: the same :meth:`Deploy.roll` and :func:`edited_argv`; its steps
        also go to the deployment's row, and the row is read again once it ends."""
        from console.ops.deploy.ops import Deploy, edited_argv

        dep = self.cfg.deployments[name]
        if self.read_only:
            return OperationResult(op="deploy-roll", host=dep.host, ok=False, error="read-only: roll disabled")
        watch = self.deploy_watch

        def steps(s: list[Step]) -> None:
            on_steps(s)
            if watch is not None:
                watch.rolling(name, s)
        try:
            r = await Deploy(self.links[dep.host], self.cfg, name).roll(edited_argv(sets, unsets), None, steps)
        finally:
            if watch is not None:
                watch.rolling(name, None)
                t = asyncio.ensure_future(watch.read(name))
                t.add_done_callback(lambda x: x.cancelled() or x.exception())
        why = r.rolled_back or r.error
        return OperationResult(op="deploy-roll", host=dep.host, ok=r.ok, steps=r.steps, error=why)

    # ---- multi-node groups (issue 30)
    async def launch_group(self, req: LaunchRequest, hosts: list[str], on_steps: OnSteps) -> OperationResult:
        """A group over ``hosts`` (rank order) from the launch form's request: the CLI's group launch
        (:func:`console.ops.group.launch_group`: plan, every node's preflight, all members at once, READY)."""
        from console.ops import group as grp

        missing = [h for h in hosts if h not in self.links]
        if missing:
            why = (f"not opened by this console: {', '.join(missing)} (of the group's hosts {', '.join(hosts)}); start "
                   "it with " + " ".join(f"--host {h}" for h in hosts))
            return OperationResult(op="launch", host=req.host, ok=False, error=why, refused=why, refusals=[why])
        links = [self.links[h] for h in hosts]
        reqs = grp.requests_over(self.cfg, req, hosts, lambda h: lifecycle.host_env(self.cfg.host(h).env_names))
        seen: list[Step] = []

        def cb(steps: list[Step]) -> None:
            seen[:] = steps
            on_steps(steps)
        r = await grp.launch_group(links, grp.GroupRequest(requests=reqs, nnodes=len(hosts)), cb)
        for h in hosts:
            self.trackers[h].update()
        return grp.as_operation(r, "launch", req.host, list(seen))

    async def guard_group(self, group: str, on_steps: OnSteps) -> OperationResult:
        """The failure policy for a group this console sees FAILED with a dead member while others run
        (:func:`console.ops.group.guard_group`: the evidence re-checked now, then the rest killed, confirmed on each
        host); recorded in the audit log as ``group_guard``."""
        from console.ops import group as grp

        seen: list[Step] = []

        def cb(steps: list[Step]) -> None:
            seen[:] = steps
            on_steps(steps)
        t0 = time.perf_counter()
        links = list(self.links.values())
        r = await grp.guard_group(links, group, cb)
        head = r.members[0].host if r.members else self.hosts[0]
        if self.audit is not None:
            self.audit(head, "group_guard", {"group": group}, r.ok,
                       {"failed": r.failed, "refused": r.refused, "killed": r.killed},
                       (time.perf_counter() - t0) * 1000.0)
        for tr in self.trackers.values():
            tr.update()
        return grp.as_operation(r, "kill", head, list(seen))

    def acknowledge(self, host: str, session_id: str) -> None:
        """The operator acknowledged an ended session: its GPU reads IDLE (it stays in the history)."""
        self.trackers[host].acknowledge(session_id)
        link = self.links.get(host)
        if link is not None:  # recorded in the run directory too (ack.json): every console sees it
            import getpass
            import socket

            t = asyncio.ensure_future(HostClient.of(link).ack(session_id, f"{getpass.getuser()}@{socket.gethostname()}"))
            t.add_done_callback(lambda x: x.cancelled() or x.exception())

    async def others_audit(self, since: float, ops: tuple[str, ...] | None = None) -> list[AuditEntry]:
        """What other consoles on this machine (the CLI, another TUI) wrote to the shared audit log from
        ``since`` on, of ``ops`` when given (read in a thread); [] without an audit file."""
        if self.audit is None:
            return []
        return await asyncio.to_thread(self.audit.others, since, ops)

    async def foreign_output(self, host: str, pid: int, start_ticks: int | None) -> tuple[str, list[str]]:
        """A hand-started server's stdout file (``/proc/<pid>/fd/1`` when it is a regular file)."""
        from console.ops.foreign_log import read_foreign_output

        return await read_foreign_output(self.links[host], pid, start_ticks)

    REPORT_SINCE_S = 2 * 3600.0
    """``p`` reports the audit entries and GPU samples of the two hours before the session (as ``report``)."""

    async def report(self, host: str, session_id: str) -> str:
        """The incident report of ``session_id``: gathered through the host's link, written as Markdown
        with the panel's SVG beside it under :func:`reports_dir`; returns the Markdown file's path."""
        from console.audit import default_audit_path
        from console.ops.report_files import write_report
        from console.ops.report_gather import gather

        audit = self.audit.path if self.audit is not None and self.audit.path is not None else default_audit_path()
        inp = await gather(self.links[host], session_id, audit_path=str(audit), since_s=self.REPORT_SINCE_S,
                           now=self.clock())
        out = reports_dir() / f"report-{safe_name(session_id)}.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        md, _ = write_report(inp, out, overwrite=True)  # a second `p` replaces the first (never through a symlink)
        return str(md)

    async def follow_log(self, host: str, session_id: str, tail_lines: int = 500) -> list[str]:
        return await self.trackers[host].follow(session_id, tail_lines)

    async def unfollow_log(self, host: str, session_id: str) -> None:
        self.trackers[host].unfollow(session_id)

    def launch_template(self, host: str, gpu: int) -> LaunchRequest:
        """The host's defaults for a launch on ``gpu``: its server command, that GPU, port 30000 + GPU. Never a
        profile: the form starts from the GPU's last session, else these; a profile is the operator's pick."""
        hc = self.cfg.host(host)
        return LaunchRequest(host=host, command=list(hc.server_command), gpus=[gpu], port=DEFAULT_PORT + gpu)

    def launch_profiles(self, host: str) -> dict[str, LaunchRequest]:
        """The config's profiles usable on ``host`` (no host, or this one), as requests for the form's picker."""
        out = {}
        for name, prof in self.cfg.profiles.items():
            if prof.host not in (None, host) or (prof.hosts and host not in prof.hosts):
                continue
            req = self.cfg.profile_request(name, host)
            note = prof.group_note()
            if note:  # a multi-node profile: the form launches it as a group over its hosts (issue 30)
                req = req.model_copy(update={"group_hosts": list(prof.hosts), "nnodes": len(prof.hosts),
                                             "description": f"{note}" + (f"; {prof.description}" if prof.description
                                                                          else "")})
            out[name] = req
        return out

    # ---- flag form hooks (console/ui/screens/flag_form.py calls them with host=)

    def _form_host(self, host: str | None) -> str | None:
        if host in self.links:
            return host
        return next(iter(self.links), None)

    def _schema_task(self, host: str) -> asyncio.Task[FlagSchema]:
        """Learn the host's server flags once, in the background (a failed attempt is retried next time)."""
        tasks = self._schema_tasks
        t = tasks.get(host)
        if t is None or (t.done() and (t.cancelled() or t.exception() is not None)):
            command = list(self.cfg.host(host).server_command)
            t = tasks[host] = asyncio.ensure_future(
                learn_schema(self.links[host], command, self.cache_dir or default_cache_dir()))
            t.add_done_callback(lambda x: x.cancelled() or x.exception())  # retrieved: no "never retrieved" noise
            t.add_done_callback(functools.partial(self._schema_learned, host))
        return t

    def _schema_learned(self, host: str, task: asyncio.Task[FlagSchema]) -> None:
        """The host's own flags check the advisor's suggestions from now on (else the bundled ones)."""
        tr = self.trackers.get(host)
        if tr is not None and not task.cancelled() and task.exception() is None:
            tr.schema = task.result()

    async def validator(self, flags: list[str], host: str | None = None) -> list[tuple[str, str]]:
        """(severity, message) for a flag set, checked against the flags the host's server accepts.

        The schema comes from the host's ``--help`` (learned once per host in the background,
        cached per server version); until it is known the check says so instead of guessing.
        """
        name = self._form_host(host)
        if name is None:
            return [("warning", "flags not checked: no host connection yet")]
        task = self._schema_task(name)
        try:
            schema = await asyncio.wait_for(asyncio.shield(task), self.LEARN_WAIT_S)
        except asyncio.TimeoutError:
            return [("note", f"flags not checked yet: learning the server's --help on {name} in the background "
                             "(check again in a moment)")]
        except Exception as e:  # HostError, LinkDown, ...: say why, do not block the launch
            return [("warning", f"flags not checked: {str(e)[:300]}")]
        out: list[tuple[str, str]] = []
        for p in check_all(list(flags), schema, version=schema.version):
            out.append((p.severity, p.message + (f" (fix: {p.suggestion})" if p.suggestion else "")))
        where = f"{schema.prog or 'the server'} {schema.version or ''}".rstrip()
        return out or [("ok", f"flags: no problems against {where}'s --help on {name}")]

    async def planner(self, flags: list[str], gpus: list[int], host: str | None = None,
                      count_use: bool = False) -> str | tuple[str, str] | None:
        """The memory planner's verdict for these flags on these GPUs (model config read on the host).

        ``("error", text)`` when it does not fit (the form then needs force to launch), a plain
        string otherwise, ``None`` without a host connection. ``count_use``: against the memory free now
        (the preflight's :func:`~console.ops.lifecycle.preflight.gpu_use`), for a launch that stops nothing.
        """
        name = self._form_host(host)
        if name is None:
            return None
        hc = self.cfg.host(name)
        req = LaunchRequest(host=name, command=list(hc.server_command), flags=list(flags), gpus=list(gpus) or [0])
        verdict, text = await lifecycle.memory_verdict(self.links[name], req, count_use=count_use)
        if verdict is None:
            return text if text.startswith("not planned") else f"not planned: {text}"
        if verdict == "does_not_fit":
            return ("error", f"memory plan: does not fit — {text}")
        if verdict == "tight":
            return ("warning", f"memory plan: tight — {text}")
        what = verdict.replace("_", " ")
        return f"memory plan: {what}" + (f" — {text}" if text and text != verdict else "")

    async def gpu_check(self, flags: list[str], gpus: list[int], host: str | None = None) -> list[tuple[str, str]]:
        """What the launch's preflight says of these GPUs and port now, nothing launched
        (:func:`console.ops.lifecycle.preflight.gpu_check`): the host's refusals, the orphans and what holds memory."""
        from console.ops.lifecycle.preflight import gpu_check

        name = self._form_host(host)
        if name is None:
            return [("warning", "GPUs not checked: no host connection yet")]
        req = LaunchRequest(host=name, command=list(self.cfg.host(name).server_command), flags=list(flags),
                            gpus=list(gpus) or [0])
        now = self.clock()
        spec, env = lifecycle.build_spec(req, lifecycle.new_session_id(req.gpus, now), now)
        return await gpu_check(self.links[name], spec, env)
