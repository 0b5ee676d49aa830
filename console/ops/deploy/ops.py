"""Deployments (issue 29): replicas of one server behind SGLang's gateway (``smg``) — up, status, roll, down.

Every step is confirmed against the host or the gateway, reported in the steps list (``replica 1: healthy``,
``replica 1: registered``) and recorded in the audit log; every remote command goes through the link (the gateway
is asked from the host itself, :mod:`.hostcall`).

**up**: the owned gateway (``router.port``) is launched as a session under the host's supervisor (its key file
created first, 0600, beside the runs directory), confirmed listening, healthy and answering its worker API; then
each replica missing from its index is launched with the usual steps plus a one-token ``/generate`` through the
server itself, registered (``POST /workers``) and polled until the gateway says ``ready``.

**roll**, one replica at a time: the new server goes on a spare GPU (one no live session holds and no process
uses) when there is one; else beside the old one on its GPUs when the memory planner says both fit in what is free
there now (the host's launch is told which live session it may share them with); else the old one is drained
first (deregistered, its own running + queued requests waited to 0, killed) and the new one starts on its GPUs
while the other replicas carry the traffic. The new one
is READY, registered and ready at the gateway, then watched for a settle window (alive, its /health 200, healthy at
the gateway); only then is the old one deregistered (gone: ``GET /workers/{id}`` -> 404), drained (its own
``/server_info`` running + queued == 0, read twice) and killed with the confirmed kill. A new replica that fails
before the old one is deregistered is stopped and deregistered; the old one keeps serving and the roll stops,
naming the replica and the cause.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Awaitable, Callable

from console.config import Config, Deployment, HostConfig
from console.core.flag_edit import edit_flags, masked_secret_flags, unmask_from_live
from console.core.metrics import counter_total
from console.core.server_info import SERVER_INFO_PATH, json_object
from console.errors import UserError
from console.link.client import HostClient
from console.link.errors import LinkDown, RequestError
from console.link.link import HostLink
from console.model import HostSnapshot, KillTarget, LaunchRequest, SessionInfo, Step
from console.ops.deploy.gateway import Gateway, GatewayError, GatewayWorker, worker_url
from console.ops.deploy.hostcall import GATEWAY_CODE, KEY_ENV, ensure_key, http_call, key_path
from console.ops.deploy.models import DeploymentStatus, DeployResult, GatewayView, ReplicaView, TrafficSample
from console.ops.lifecycle import (
    Check,
    MoreChecks,
    Stepper,
    fresh_snapshot,
    host_env,
    kill,
    launch,
    memory_verdict,
    relaunch_env,
)
from console.ops.lifecycle.steps import OnSteps, StepFailed

GATEWAY_REQUESTS = "smg_router_requests_total"
"""The gateway's count of the requests it routed (its Prometheus port), every route summed."""
SERVER_REQUESTS = "sglang:num_requests_total"
"""A server's count of the requests it finished (its ``/metrics``, ``--enable-metrics``)."""
GENERATE_STEP = "generate"
"""The launch step a replica adds: one token generated through the server itself."""
SETTLE_S = 3.0
"""How long a new replica must stay alive, healthy and ready at the gateway before its old one is deregistered."""
DRAIN_TIMEOUT_S = 300.0
REGISTER_TIMEOUT_S = 90.0


# ---------------------------------------------------------------- steps of one operation, from its parts
class Journal:
    """An operation's steps, made of named parts (``gateway``, ``replica 0``, ``replica 0 kill``): each part's
    steps are shown prefixed with its name; the whole list is reported on every change."""

    def __init__(self, on_steps: OnSteps | None):
        self.on_steps = on_steps
        self.parts: list[list[Step]] = []

    @property
    def steps(self) -> list[Step]:
        return [s for part in self.parts for s in part]

    def part(self, prefix: str) -> OnSteps:
        i = len(self.parts)
        self.parts.append([])

        def update(steps: list[Step]) -> None:
            self.parts[i] = [s.model_copy(update={"name": f"{prefix}: {s.name}"}) for s in steps]
            if self.on_steps:
                self.on_steps(self.steps)
        return update

    def stepper(self, prefix: str, names: list[str]) -> Stepper:
        return Stepper(names, self.part(prefix), phase="launch")

    def failed_step(self) -> Step | None:
        return next((s for s in self.steps if s.state == "failed"), None)


class DeployFailed(Exception):
    """A deploy step failed: the operation stops (``rolled_back``: the old replica keeps serving)."""

    def __init__(self, message: str, rolled_back: bool = False):
        super().__init__(message)
        self.rolled_back = rolled_back


# ---------------------------------------------------------------- the deployment on one host
@dataclass
class Deploy:
    """One deployment on its (open) host link: the config's entry, the gateway client, and the operations."""

    link: HostLink
    cfg: Config
    name: str
    settle_s: float = SETTLE_S
    timeout: float = 900.0
    grace: float = 20.0
    audit_reads: bool = True
    """The gateway calls of a reading go to the audit log (False: the TUI's periodic reading; an operation's
    calls are always audited)."""
    dep: Deployment = field(init=False)
    hc: HostConfig = field(init=False)
    client: HostClient = field(init=False)
    gateway: Gateway = field(init=False)

    def __post_init__(self) -> None:
        self.dep = self.cfg.deployments[self.name]
        self.hc = self.cfg.host(self.dep.host)
        self.client = HostClient.of(self.link)
        router = self.dep.router
        key = router.key_file if router.url is not None else key_path(self.hc.runs_dir, self.name)
        self.gateway = Gateway(self.client, self.hc.python, router.gateway_port(), key, audit=self.audit_reads)

    @property
    def owned(self) -> bool:
        return self.dep.router.port is not None

    def audit(self, result: DeployResult) -> DeployResult:
        """The operation's steps into the audit log (op ``result:deploy-…``), as a launch's are."""
        if self.link.audit is not None and result.steps:
            steps = [s.model_dump(mode="json", include={"name", "state", "started_at", "elapsed_s", "evidence"})
                     for s in result.steps]
            self.link.audit(self.link.name, "result:" + result.op, {"deployment": self.name, "steps": steps},
                            result.ok, result.error or result.rolled_back or "ok", None)
        return result

    # ------------------------------------------------------------ membership, read back from the host
    def sessions(self, snap: HostSnapshot, role: str = "replica", live: bool = True) -> list[SessionInfo]:
        """This deployment's sessions of ``role`` (live ones: no exit, not broken), from their spec.json."""
        return [s for s in snap.sessions
                if s.spec is not None and s.spec.deployment == self.name and s.spec.deployment_role == role
                and (not live or (s.exit is None and s.broken is None and s.record_stale is None))]

    def gateway_session(self, snap: HostSnapshot) -> SessionInfo | None:
        return next(iter(self.sessions(snap, "gateway")), None)

    async def server_load(self, port: int) -> tuple[int, int] | None:
        """A server's own (running, queued) requests from its ``/server_info`` (None: unread)."""
        r = await self.client.http_get(port, SERVER_INFO_PATH, 5.0, audit=False)
        info = json_object(r.status, r.body)
        if info is None:
            return None
        try:
            st = (info.get("internal_states") or [{}])[0]
            return int(st.get("num_running_reqs") or 0), int(st.get("num_queue_reqs") or 0)
        except (ValueError, AttributeError, TypeError, IndexError):
            return None

    def metrics_port(self) -> int | None:
        """The gateway's Prometheus port on the host: ``router.metrics_port``, else an owned gateway's ``port`` + 1
        (None: an existing gateway whose metrics port the config does not name)."""
        r = self.dep.router
        return r.metrics_port or (r.port + 1 if r.port is not None else None)

    async def traffic(self, ports: dict[str, int]) -> TrafficSample:
        """The request counters now: the gateway's (its metrics port) and each server's (``ports``: session id ->
        port; a server without ``--enable-metrics`` has none)."""
        at, gw, servers = time.time(), None, {}
        mp = self.metrics_port()
        if mp:  # parsed in a thread: a TUI reads this every few seconds on its own event loop
            r = await self.client.http_get(mp, "/metrics", 5.0)
            gw = await asyncio.to_thread(counter_total, r.body, GATEWAY_REQUESTS) if r.status == 200 else None
        for sid, port in ports.items():
            r = await self.client.http_get(port, "/metrics", 5.0)
            v = await asyncio.to_thread(counter_total, r.body, SERVER_REQUESTS, True) if r.status == 200 else None
            if v is not None:
                servers[sid] = v
        return TrafficSample(at=at, gateway=gw, servers=servers)

    async def status(self, prev: TrafficSample | None = None, rate_s: float = 0.0) -> DeploymentStatus:
        """The true state, from the run directories and the gateway's own worker list. Requests/s (the gateway's and
        each replica's) are measured from ``prev`` (the last reading's :attr:`DeploymentStatus.traffic`), else, with
        ``rate_s`` > 0, over this reading (at least ``rate_s`` seconds: ``deploy status``)."""
        snap = await fresh_snapshot(self.link)
        live = self.sessions(snap)
        ports = {s.session_id: s.spec.port for s in live if s.spec and s.spec.port and s.server_alive}
        first = prev or (await self.traffic(ports) if rate_s > 0 else None)
        g = self.gateway_session(snap)
        gv: dict[str, Any] = dict(port=self.gateway.port, owned=self.owned,
                                  session_id=g.session_id if g else None,
                                  state=("running" if g.server_alive else "starting") if g else None)
        workers: list[GatewayWorker] = []
        h = await self.gateway.health()
        gv["health"] = h.status
        if h.status:
            rd = await self.gateway.readiness()
            j = rd.json()
            gv["readiness"] = (str(j.get("status")) if isinstance(j, dict) else None) or f"HTTP {rd.status}"
            try:
                gv["api"] = await self.gateway.detect()
                workers = await self.gateway.workers()
            except GatewayError as e:
                gv["error"] = str(e)
        else:
            gv["error"] = f"the gateway does not answer on 127.0.0.1:{self.gateway.port}: {h.body[:200]}"
        if first is not None and prev is None:
            await asyncio.sleep(max(0.0, first.at + rate_s - time.time()))
        now = await self.traffic(ports)
        by_url = {w.url.rstrip("/"): w for w in workers}
        ids = {s.session_id for s in live}
        replicas = []
        for s in sorted(live, key=lambda x: (x.spec.replica or 0, x.spec.created_at or 0) if x.spec else (0, 0)):
            assert s.spec is not None
            port = s.spec.port
            w = by_url.get(worker_url(port)) if port else None
            twin = [o for o in live if o is not s and o.spec and o.spec.replica == s.spec.replica]
            if s.spec.replaces in ids:
                role = "new"
            elif twin:
                role = "old" if w is not None else "draining"
            else:
                role = "current"
            load = await self.server_load(port) if port and s.server_alive else None
            healthy = port is not None and s.server_alive and (await self.client.http_get(port, "/health", 5.0)).status == 200
            state = ("stopping" if s.stop_requested else "ready" if healthy else
                     "launching" if s.record is None else "loading" if s.server_alive else "failed")
            sid = s.session_id
            replicas.append(ReplicaView(session_id=sid, replica=s.spec.replica or 0, role=role, state=state,
                                        port=port, gpus=list(s.spec.gpus), replaces=s.spec.replaces,
                                        worker_id=w.id if w else None, worker_status=w.status if w else None,
                                        running=load[0] if load else None, queued=load[1] if load else None,
                                        requests_per_s=_rate(first, now, partial(_served, sid))))
        ours = {worker_url(s.spec.port) for s in live if s.spec and s.spec.port}
        notes = []
        if now.gateway is None:
            mp = self.metrics_port()
            notes.append("requests/s through the gateway unknown: " + (
                f"its metrics port 127.0.0.1:{mp} has no smg_router_requests_total" if mp else
                "give router.metrics_port for an existing gateway"))
        bare = [str(r.replica) for r in replicas if r.session_id in ports and r.session_id not in now.servers]
        if bare:
            notes.append(f"replica {', '.join(bare)}: no requests/s (the server runs without --enable-metrics)")
        return DeploymentStatus(
            name=self.name, host=self.link.name, gateway=GatewayView(**gv), replicas=replicas, workers=workers,
            foreign_workers=[w.url for w in workers if w.url.rstrip("/") not in ours],
            loads=await self.gateway.loads() if h.status else None,
            roll_in_progress=any(r.role in ("new", "old", "draining") for r in replicas),
            requests_per_s=_rate(first, now, lambda t: t.gateway), traffic=now, traffic_note="; ".join(notes) or None)

    # ------------------------------------------------------------ the gateway
    def gateway_request(self, key: str) -> LaunchRequest:
        router = self.dep.router
        cmd = router.command or [self.hc.python, "-m", "smg"]
        assert router.port is not None
        metrics = router.metrics_port or router.port + 1
        return LaunchRequest(
            host=self.link.name, command=[cmd[0], "-c", GATEWAY_CODE, cmd[2]],
            flags=["launch", "--host", "127.0.0.1", "--port", str(router.port), "--prometheus-host", "127.0.0.1",
                   "--prometheus-port", str(metrics), *router.flags],
            gpus=[], port=router.port, env={KEY_ENV: key}, check_flags=False, deployment=self.name,
            deployment_role="gateway")

    async def ensure_gateway(self, j: Journal) -> None:
        """The owned gateway running and answering its worker API (launched when none runs); an existing one
        (``router.url``) answering. Raises DeployFailed."""
        snap = await fresh_snapshot(self.link)
        g = self.gateway_session(snap) if self.owned else None
        if self.owned and g is None:
            st = j.stepper("gateway", ["metrics port", "key"])
            metrics = self.dep.router.metrics_port or self.gateway.port + 1
            st.start("metrics port")
            if await self.client.port_open(metrics):  # the launch's preflight checks the gateway's own port
                st.finish("metrics port", "failed", f"127.0.0.1:{metrics} is in use (router.metrics_port)")
                st.skip_pending()
                raise DeployFailed(f"gateway: its metrics port 127.0.0.1:{metrics} is in use: nothing was started")
            st.finish("metrics port", "ok", f"127.0.0.1:{metrics} is free")
            st.start("key")
            key = self.gateway.key_file
            assert key is not None
            try:
                said = await ensure_key(self.client, self.hc.python, key)
            except (RequestError, LinkDown) as e:
                st.finish("key", "failed", str(e))
                raise DeployFailed(f"gateway: {e}") from None
            st.finish("key", "ok", f"control-plane key {said} in {key} (0600 on the host; never on a command line)")

            async def api() -> str | None:
                try:
                    return await self.gateway.detect()
                except GatewayError:
                    return None
            more = MoreChecks(names=("worker API",), skip=("ready", "on GPU"),
                              extra=lambda client, port: [Check("worker API", api, timeout=60.0, poll=0.5)])
            r = await launch(self.link, self.gateway_request(key), j.part("gateway"), timeout=self.timeout, more=more)
            if not r.ok:
                raise DeployFailed(f"gateway: {r.error or r.refused or 'did not start'}")
            return
        st = j.stepper("gateway", ["worker API"])
        st.start("worker API")
        try:
            line = await self.gateway.detect()
        except GatewayError as e:
            st.finish("worker API", "failed", str(e))
            raise DeployFailed(f"gateway: {e}") from None
        st.finish("worker API", "ok", (f"session {g.session_id}: " if g else "") + line)

    # ------------------------------------------------------------ one replica
    def replica_request(self, gpus: list[int], port: int, replica: int) -> LaunchRequest:
        """Replica ``replica`` of the config (its profile, else its model and flags) on ``gpus``, ``port``."""
        dep, host = self.dep, self.link.name
        env = host_env(self.hc.env_names)
        if dep.profile:
            req = self.cfg.profile_request(dep.profile, host, gpus)
            env.update(req.env)
        else:
            req = LaunchRequest(host=host, command=list(self.hc.server_command),
                                flags=(["--model-path", dep.model_path] if dep.model_path else []) + list(dep.flags),
                                gpus=gpus)
        env.update(dep.env)
        return req.model_copy(update={"port": port, "env": env, "deployment": self.name,
                                      "deployment_role": "replica", "replica": replica})

    def generate_checks(self) -> MoreChecks:
        """READY for a replica: the usual steps, then one token generated through the server itself."""
        python = self.hc.python

        def extra(client: HostClient, port: int) -> list[Check]:
            async def generate() -> str | None:
                a = await http_call(client, python, "POST", port, "/generate",
                                    body={"text": "ping", "sampling_params": {"max_new_tokens": 1, "temperature": 0}},
                                    timeout=30.0)
                if a.status == 200:
                    j = a.json()
                    text = j.get("text") if isinstance(j, dict) else None
                    return f"POST /generate (1 token) → 200: {text!r}"
                if 400 <= a.status < 500 and a.status not in (408, 429):
                    raise StepFailed(GENERATE_STEP, f"POST /generate → HTTP {a.status}: {a.body.strip()[:200]}")
                return None
            return [Check(GENERATE_STEP, generate, timeout=120.0, poll=0.5)]
        return MoreChecks(names=(GENERATE_STEP,), extra=extra)

    async def start_replica(self, j: Journal, req: LaunchRequest, label: str, *,
                            on_session: Callable[[str], None] | None = None,
                            share_gpus_with: str | None = None) -> tuple[str, str]:
        """Launch ``req`` (READY with a one-token generate), register it, wait until the gateway says ready:
        (session id, worker id). Raises DeployFailed (what it launched is stopped again). ``share_gpus_with``: the
        old session whose GPUs the new one may share (its processes are on them: the GPUs are busy by design)."""
        r = await launch(self.link, req, j.part(label), timeout=self.timeout, more=self.generate_checks(),
                         share_gpus_with=share_gpus_with, allow_busy=share_gpus_with is not None)
        if r.session_id and on_session:
            on_session(r.session_id)
        if not r.ok:
            if r.session_id and r.state not in ("stopped", "failed", None):
                await self.stop_session(j, r.session_id, f"{label} stop")
            raise DeployFailed(f"{label} (session {r.session_id or 'none'}) did not start: "
                               f"{r.error or r.refused or r.aborted or 'failed'}")
        assert r.session_id is not None and req.port is not None
        try:
            wid = await self.register(j, label, req.port)
        except DeployFailed:
            await self.stop_session(j, r.session_id, f"{label} stop")
            raise
        return r.session_id, wid

    async def register(self, j: Journal, label: str, port: int) -> str:
        """``POST /workers`` (unless the gateway lists the URL already), then ``GET /workers/{id}`` until ready."""
        st = j.stepper(label, ["registered", "ready at gateway"])
        url = worker_url(port)
        st.start("registered")
        try:
            have = next((w for w in await self.gateway.workers() if w.url.rstrip("/") == url), None)
            wid = have.id if have else await self.gateway.add(url)
        except GatewayError as e:
            st.finish("registered", "failed", str(e))
            st.skip_pending()
            raise DeployFailed(f"{label}: {e}") from None
        st.finish("registered", "ok", f"{url} is worker {wid}" + (" (already listed)" if have else
                                                                 f" ({self.gateway.api} API)"))

        async def ready() -> str | None:
            w = await self.gateway.get(wid)
            if w is None:
                raise StepFailed("ready at gateway", f"the gateway dropped worker {wid} (GET /workers/{wid} → 404)")
            if w.status == "failed":
                raise StepFailed("ready at gateway", f"the gateway failed worker {wid}")
            return (f"GET /workers/{wid}: status {w.status}, healthy {w.is_healthy}"
                    + (f", runtime {w.version}" if w.version else "")) if w.ready else None
        try:
            await st.confirm(Check("ready at gateway", ready, timeout=REGISTER_TIMEOUT_S, poll=0.3))
        except (StepFailed, GatewayError) as e:
            if st.running():
                st.finish("ready at gateway", "failed", str(e))
            await self.deregister(j, label + " undo", wid)
            raise DeployFailed(f"{label}: {e}") from None
        return wid

    async def deregister(self, j: Journal, label: str, wid: str) -> None:
        """``DELETE /workers/{id}``, confirmed by ``GET /workers/{id}`` → 404."""
        st = j.stepper(label, ["deregistered"])
        st.start("deregistered")
        try:
            await self.gateway.remove(wid)

            async def gone() -> str | None:
                return f"GET /workers/{wid} → 404" if await self.gateway.get(wid) is None else None
            await st.confirm(Check("deregistered", gone, timeout=60.0, poll=0.3))
        except (StepFailed, GatewayError) as e:
            if st.running():
                st.finish("deregistered", "failed", str(e))
            raise DeployFailed(f"{label}: {e}") from None

    async def drain(self, j: Journal, label: str, port: int) -> str:
        """Wait until the server's own running + queued requests are 0 (``/server_info``, two reads in a row)."""
        st = j.stepper(label, ["drained"])
        zero_at: list[float] = []

        async def idle() -> str | None:
            load = await self.server_load(port)
            if load is None:
                zero_at.clear()
                return None
            if sum(load):
                zero_at.clear()
                return None
            zero_at.append(time.monotonic())
            if len(zero_at) >= 2 and zero_at[-1] - zero_at[0] >= 0.5:
                return f"GET /server_info: running 0, queued 0 (held {zero_at[-1] - zero_at[0]:.1f} s)"
            return None
        ok = await st.confirm(Check("drained", idle, timeout=DRAIN_TIMEOUT_S, poll=0.25,
                                    failure=lambda: f"still busy after {DRAIN_TIMEOUT_S:.0f} s"))
        if not ok:
            raise DeployFailed(f"{label}: the old server did not drain within {DRAIN_TIMEOUT_S:.0f} s")
        return next(s.evidence or "" for s in st.steps)

    async def stop_session(self, j: Journal, sid: str, label: str) -> bool:
        """The confirmed kill of session ``sid``; whether it is confirmed gone."""
        r = await kill(self.link, KillTarget(host=self.link.name, session_id=sid), j.part(label), grace=self.grace)
        return r.ok

    async def free_port(self, snap: HostSnapshot, taken: set[int]) -> int:
        """The first port from the base no session holds and nothing listens on."""
        held = {s.spec.port for s in snap.sessions if s.spec and s.exit is None and s.spec.port} | taken
        held |= {self.gateway.port, (self.dep.router.metrics_port or self.gateway.port + 1)}
        p = self.dep.ports
        while p <= 65535:
            if p not in held and not await self.client.port_open(p):
                return p
            p += 1
        raise DeployFailed("no free port above the deployment's base port")

    @staticmethod
    def spare_gpus(snap: HostSnapshot, n: int, exclude: set[int]) -> list[int] | None:
        """``n`` GPUs no live session holds and no process uses (lowest first), or None."""
        held = {g for s in snap.sessions if s.exit is None and s.spec for g in s.spec.gpus} | exclude
        free = [g.index for g in sorted(snap.gpus, key=lambda g: g.index) if g.index not in held and not g.procs]
        return free[:n] if len(free) >= n else None

    # ------------------------------------------------------------ the operations
    async def up(self, on_steps: OnSteps | None = None) -> DeployResult:
        j = Journal(on_steps)
        started: list[str] = []
        try:
            await self.ensure_gateway(j)
            snap = await fresh_snapshot(self.link)
            have = {s.spec.replica: s for s in self.sessions(snap) if s.spec}
            taken: set[int] = set()
            for i, gpus in enumerate(self.dep.replica_gpus()):
                if i in have:
                    s = have[i]
                    st = j.stepper(f"replica {i}", ["present"])
                    st.start("present")
                    st.finish("present", "ok", f"session {s.session_id} of this replica runs already: left as it is")
                    if s.spec and s.spec.port and s.server_alive:  # a gateway started anew lists no worker yet
                        await self.register(j, f"replica {i}", s.spec.port)
                    continue
                port = self.dep.ports + i
                if port in taken or await self.client.port_open(port):
                    port = await self.free_port(snap, taken)
                taken.add(port)
                sid, _ = await self.start_replica(j, self.replica_request(gpus, port, i), f"replica {i}",
                                                  on_session=started.append)
        except DeployFailed as e:
            return self.audit(DeployResult(op="deploy-up", name=self.name, host=self.link.name, ok=False,
                                           steps=j.steps, error=str(e), started=started))
        except (GatewayError, LinkDown, RequestError, asyncio.TimeoutError) as e:
            return self.audit(DeployResult(op="deploy-up", name=self.name, host=self.link.name, ok=False,
                                           steps=j.steps, error=f"{type(e).__name__}: {e}", started=started))
        return self.audit(DeployResult(op="deploy-up", name=self.name, host=self.link.name, ok=True, steps=j.steps,
                                       started=started))

    async def down(self, on_steps: OnSteps | None = None) -> DeployResult:
        """Deregister, drain and kill every replica, then the owned gateway."""
        j = Journal(on_steps)
        stopped: list[str] = []
        try:
            snap = await fresh_snapshot(self.link)
            workers: list[GatewayWorker] = []
            try:
                workers = await self.gateway.workers()
            except GatewayError:
                pass
            by_url = {w.url.rstrip("/"): w for w in workers}
            for s in self.sessions(snap):
                assert s.spec is not None
                label = f"replica {s.spec.replica} ({s.session_id})"
                w = by_url.get(worker_url(s.spec.port)) if s.spec.port else None
                if w is not None:
                    await self.deregister(j, label, w.id)
                    if s.spec.port and s.server_alive:
                        await self.drain(j, label, s.spec.port)
                if not await self.stop_session(j, s.session_id, f"{label} kill"):
                    raise DeployFailed(f"{label}: not confirmed stopped")
                stopped.append(s.session_id)
            g = self.gateway_session(snap)
            if g is not None:
                if not await self.stop_session(j, g.session_id, "gateway kill"):
                    raise DeployFailed("gateway: not confirmed stopped")
                stopped.append(g.session_id)
        except DeployFailed as e:
            return self.audit(DeployResult(op="deploy-down", name=self.name, host=self.link.name, ok=False,
                                           steps=j.steps, error=str(e), stopped=stopped))
        except (GatewayError, LinkDown, RequestError, asyncio.TimeoutError) as e:
            return self.audit(DeployResult(op="deploy-down", name=self.name, host=self.link.name, ok=False,
                                           steps=j.steps, error=f"{type(e).__name__}: {e}", stopped=stopped))
        return self.audit(DeployResult(op="deploy-down", name=self.name, host=self.link.name, ok=True,
                                       steps=j.steps, stopped=stopped))

    async def finish_pair(self, j: Journal, old: SessionInfo, new: SessionInfo, keep: str) -> None:
        """An interrupted roll's replica (an old session and its live new one): ``keep="new"`` resumes it (the new
        one registered, ready and settled, then the old one deregistered, drained, killed); ``keep="old"`` rolls it
        back (the old one registered again, the new one deregistered, drained, killed)."""
        assert old.spec is not None and new.spec is not None and old.spec.port and new.spec.port
        label = f"replica {old.spec.replica or 0}"
        st = j.stepper(label, ["interrupted roll"])
        st.start("interrupted roll")
        st.finish("interrupted roll", "ok", f"old session {old.session_id} (port {old.spec.port}) and its new one "
                  f"{new.session_id} (port {new.spec.port}) both run: " + ("resumed" if keep == "new" else
                                                                          "rolled back"))
        workers = {w.url.rstrip("/"): w for w in await self.gateway.workers()}
        keep_s, drop_s = (new, old) if keep == "new" else (old, new)
        assert keep_s.spec is not None and drop_s.spec is not None and keep_s.spec.port and drop_s.spec.port
        if not keep_s.server_alive:
            raise DeployFailed(f"{label}: session {keep_s.session_id} no longer runs: it cannot be kept",
                               rolled_back=keep == "new")
        wid = await self.register(j, f"{label} {'new' if keep == 'new' else 'old'}", keep_s.spec.port)
        if keep == "new":
            await self.settle(j, f"{label} new", new.session_id, keep_s.spec.port, wid)
        drop = "old" if keep == "new" else "new"
        w = workers.get(worker_url(drop_s.spec.port))
        if w is not None:
            await self.deregister(j, f"{label} {drop}", w.id)
        if drop_s.server_alive:
            await self.drain(j, f"{label} {drop}", drop_s.spec.port)
        if not await self.stop_session(j, drop_s.session_id, f"{label} {drop} kill"):
            raise DeployFailed(f"{label}: session {drop_s.session_id} is not confirmed stopped")

    async def roll(self, new_argv: Callable[[SessionInfo, HostSnapshot], list[str] | None],
                   given_env: dict[str, str] | None = None, on_steps: OnSteps | None = None,
                   on_replaced: Callable[[str, str], Awaitable[None] | None] | None = None, *,
                   check_flags: bool = True, rollback: bool = False) -> DeployResult:
        """Replace every replica, one at a time (see the module doc); ``new_argv(session, snap)``: the argv its
        replacement runs (the CLI applies ``--set``/``--unset`` to the old one's), None: it runs it already (a
        resumed roll leaves it). A roll that was interrupted (a console killed mid-roll) is resumed first, replica
        by replica; with ``rollback`` it is rolled back instead (each old replica kept, its new one stopped) and
        nothing else is rolled."""
        from console.ops.lifecycle import request_from_argv

        j = Journal(on_steps)
        replaced: dict[str, str] = {}
        res: dict[str, Any] = dict(op="deploy-roll", name=self.name, host=self.link.name)
        try:
            await self.ensure_gateway(j)
            snap = await fresh_snapshot(self.link)
            live = self.sessions(snap)
            pairs = [(o, n) for n in live for o in live if n.spec and n.spec.replaces == o.session_id]
            paired = {x.session_id for pair in pairs for x in pair}
            for o, n in pairs:
                await self.finish_pair(j, o, n, "old" if rollback else "new")
                if not rollback:
                    replaced[o.session_id] = n.session_id
            if rollback:
                if not pairs:
                    raise DeployFailed(f"deployment {self.name}: no interrupted roll to roll back (see deploy status)")
                return self.audit(DeployResult(**res, ok=True, steps=j.steps,
                                               rolled_back=f"rolled back on command: {len(pairs)} replica(s)"))
            olds = sorted((s for s in live if s.session_id not in paired),
                          key=lambda s: s.spec.replica or 0 if s.spec else 0)
            if not olds and not pairs:
                raise DeployFailed(f"deployment {self.name} has no live replica on {self.link.name} (deploy up first)")
            for old in olds:
                snap = await fresh_snapshot(self.link)
                assert old.spec is not None and old.spec.port is not None
                i = old.spec.replica or 0
                label = f"replica {i}"
                argv = new_argv(old, snap)
                if argv is None:
                    st = j.stepper(label, ["up to date"])
                    st.start("up to date")
                    st.finish("up to date", "ok", f"session {old.session_id} runs these flags already: left serving")
                    await self.register(j, label, old.spec.port)  # a drained-first roll may have left it unlisted
                    continue
                env, missing = relaunch_env(self.cfg, self.link.name, old.spec, given_env)
                if missing:
                    raise DeployFailed(f"{label}: launched with the secret env {', '.join(missing)}, which no one "
                                       "holds now: give the values with --env NAME=VALUE")
                workers = {w.url.rstrip("/"): w for w in await self.gateway.workers()}
                old_w = workers.get(worker_url(old.spec.port))
                spare = self.spare_gpus(snap, len(old.spec.gpus), set())
                st = j.stepper(label, ["placement"])
                st.start("placement")
                share: str | None = None
                plan = ""
                old_gpus = ",".join(map(str, old.spec.gpus))
                if spare is None:  # beside the old one, when the planner says both fit in what is free now
                    verdict, plan = await memory_verdict(
                        self.link, request_from_argv(self.link.name, argv, list(old.spec.gpus), None, env), snap,
                        count_use=True)
                    share = old.session_id if verdict == "fits" else None
                beside = spare is not None or share is not None
                if spare is not None:
                    st.finish("placement", "ok", f"spare GPU {','.join(map(str, spare))} for the new server; the old "
                              f"one (session {old.session_id}, GPU {old_gpus}) keeps serving")
                    gpus = spare
                    port = await self.free_port(snap, set())
                elif share is not None:
                    st.finish("placement", "ok", f"no spare GPU; the planner says the new server fits beside the old one "
                              f"on GPU {old_gpus} ({plan}): the old one keeps serving")
                    gpus = list(old.spec.gpus)
                    port = await self.free_port(snap, set())
                else:
                    st.finish("placement", "warning", "no spare GPU and the planner does not put both on GPU "
                              f"{old_gpus} ({plan or 'not planned'}): the old server is drained first, the other "
                              "replicas carry its traffic")
                    gpus = list(old.spec.gpus)
                    if old_w is not None:
                        await self.deregister(j, f"{label} old", old_w.id)
                    await self.drain(j, f"{label} old", old.spec.port)
                    if not await self.stop_session(j, old.session_id, f"{label} old kill"):
                        raise DeployFailed(f"{label}: the old server is not confirmed gone: nothing started")
                    port = old.spec.port
                req = request_from_argv(self.link.name, argv, gpus, port, env).model_copy(update={
                    "replaces": old.session_id, "deployment": self.name, "deployment_role": "replica", "replica": i,
                    "check_flags": check_flags})
                if beside:  # the port of the old argv is the old server's: the new one gets its own
                    req = req.model_copy(update={"flags": _without_port(req.flags)})
                try:
                    new_sid, new_wid = await self.start_replica(j, req, f"{label} new", share_gpus_with=share)
                except DeployFailed as e:
                    raise DeployFailed(str(e) + ("; the old replica still serves (rolled back)" if beside
                                                 else "; the old replica was drained first and is gone"),
                                       rolled_back=beside) from None
                if beside:
                    await self.settle(j, f"{label} new", new_sid, port, new_wid)
                    if old_w is not None:
                        await self.deregister(j, f"{label} old", old_w.id)
                    ev = await self.drain(j, f"{label} old", old.spec.port)
                    if not await self.stop_session(j, old.session_id, f"{label} old kill"):
                        raise DeployFailed(f"{label}: the old server (session {old.session_id}) is not confirmed "
                                           f"stopped ({ev})")
                replaced[old.session_id] = new_sid
                if on_replaced is not None:
                    done = on_replaced(old.session_id, new_sid)
                    if done is not None:
                        await done
        except DeployFailed as e:
            return self.audit(DeployResult(**res, ok=False, steps=j.steps, error=str(e), replaced=replaced,
                                           rolled_back=str(e) if e.rolled_back else None))
        except (GatewayError, LinkDown, RequestError, asyncio.TimeoutError) as e:
            return self.audit(DeployResult(**res, ok=False, steps=j.steps, error=f"{type(e).__name__}: {e}",
                                           replaced=replaced))
        return self.audit(DeployResult(**res, ok=True, steps=j.steps, replaced=replaced))

    async def settle(self, j: Journal, label: str, sid: str, port: int, wid: str) -> None:
        """The new replica must stay alive, healthy (its /health) and ready at the gateway for the settle window;
        else it is deregistered and stopped and the roll stops (the old one was never touched)."""
        st = j.stepper(label, ["settled"])
        st.start("settled")
        end = time.monotonic() + self.settle_s
        why = None
        while True:
            snap = await fresh_snapshot(self.link)
            s = next((x for x in snap.sessions if x.session_id == sid), None)
            if s is None or s.exit is not None or not s.server_alive:
                why = "the new server exited" + (f" ({s.exit.signal and 'signal ' + str(s.exit.signal) or 'code ' + str(s.exit.exit_code)})"
                                                 if s is not None and s.exit is not None else "")
            elif (await self.client.http_get(port, "/health", 5.0)).status != 200:
                why = "the new server's /health is no longer 200"
            else:
                w = await self.gateway.get(wid)
                if w is None or not w.ready or w.is_healthy is False:
                    why = f"the gateway reads worker {wid} {'gone' if w is None else w.status}"
            if why or time.monotonic() >= end:
                break
            await asyncio.sleep(0.5)
        if why is None:
            st.finish("settled", "ok", f"alive, /health 200 and ready at the gateway for {self.settle_s:.1f} s")
            return
        st.finish("settled", "failed", why)
        try:
            if await self.gateway.get(wid) is not None:
                await self.deregister(j, label + " undo", wid)
        except (DeployFailed, GatewayError):
            pass
        await self.stop_session(j, sid, label + " stop")
        raise DeployFailed(f"{label} (session {sid}): {why}; the old replica still serves (rolled back)",
                           rolled_back=True)


def edited_argv(sets: list[str], unsets: list[str]) -> Callable[[SessionInfo, HostSnapshot], list[str] | None]:
    """What each replica's replacement runs in ``deploy roll --set/--unset`` and the TUI's roll of a deployment
    (one definition): the old one's argv (secret values taken back from its live launcher) with the edits applied;
    None when the edits change nothing (it runs these flags already: a resumed roll). Raises UserError when a
    secret flag's value is masked and not given again."""
    def new_argv(s: SessionInfo, snap: HostSnapshot) -> list[str] | None:
        base = unmask_from_live(s, snap)
        argv = edit_flags(base, sets, unsets)
        if (sets or unsets) and argv == base:
            return None
        hidden = masked_secret_flags(argv)
        if hidden:
            raise UserError(f"session {s.session_id} was launched with {', '.join(hidden)}, whose values are never "
                            "stored: give them again with --set FLAG=VALUE")
        return argv
    return new_argv


def _served(sid: str, t: TrafficSample) -> float | None:
    return t.servers.get(sid)


def _rate(first: TrafficSample | None, now: TrafficSample,
          value: Callable[[TrafficSample], float | None]) -> float | None:
    """A counter's increase per second from ``first`` to ``now`` (None: unread at either, no time between, or reset)."""
    if first is None:
        return None
    a, b, dt = value(first), value(now), now.at - first.at
    return (b - a) / dt if a is not None and b is not None and dt > 0 and b >= a else None


def _without_port(flags: list[str]) -> list[str]:
    """``flags`` without ``--port N`` / ``--port=N`` (the launch adds its own)."""
    out: list[str] = []
    skip = False
    for a in flags:
        if skip:
            skip = False
            continue
        if a == "--port":
            skip = True
            continue
        if a.startswith("--port="):
            continue
        out.append(a)
    return out
