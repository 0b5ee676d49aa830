"""HostClient: every agent op as one typed async method, and the typed listener of what the agent pushes.

Above the link nothing speaks the wire's dicts: ``await link.client.proc(pid)`` returns a
:class:`~console.model.ProcInfo` (or None), ``read_log`` a :class:`~console.model.LogChunk`, ``kill`` a
:class:`~console.model.Signalled`, and an error reply raises the class of its ``kind``
(:mod:`console.link.errors`: ``NoSuchProcess``, ``Refused``, ``NotFound``...). The one method per op is
checked against the agent's op table by ``tests/test_client_contract.py``, which drives each through a
real agent.

A client wraps a :class:`Wire`: a :class:`~console.link.link.HostLink` (``link.client``), or any object
with its ``request`` (a test's stand-in). ``request`` itself is the link's private business: only this
package calls it (``tests/test_architecture.py``).

Pushed messages reach a :class:`LinkListener` (``link.listen(listener)``) as models: ``on_sample`` (the
new :class:`~console.model.HostSnapshot`), ``on_log`` (a ``LogChunk``), ``on_event`` (an
:data:`~console.model.AgentEvent`), ``on_state`` (the connection) and ``on_tick``.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from console.link.errors import RequestError
from console.model import (
    AgentEvent,
    AgentHello,
    ConnectionInfo,
    ForeignOutput,
    GpuSamples,
    HostSnapshot,
    HttpResult,
    LaunchResult,
    LaunchSpec,
    LogChunk,
    PortOwner,
    ProcInfo,
    Pruned,
    RunResult,
    SessionInfo,
    Signalled,
    VmStat,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

M = TypeVar("M", bound=BaseModel)

FOREIGN_TAIL_BYTES = 256 * 1024
"""What ``foreign_output`` reads of a hand-started server's stdout file by default."""


class InvalidReply(RequestError):
    """The agent's reply is not what its op returns (a model did not validate)."""

    kind = "invalid_reply"


class Wire(Protocol):
    """What a client needs of a link: its name, one request, a fresh snapshot and the followed logs."""

    name: str

    async def request(self, op: str, args: dict[str, Any] | None = None, *, timeout: float = 30.0,
                      audit: bool = True) -> Any: ...

    async def refresh(self, timeout: float = 30.0) -> HostSnapshot: ...

    async def follow_log(self, session_id: str, offset: int, file: int | None = None) -> None: ...

    async def unfollow_log(self, session_id: str) -> None: ...


class LinkListener(Protocol):
    """Hears what a link receives, as models (``HostLink.listen``). Subclass it and override what you need:
    each method does nothing by default. A listener must not block; one that raises is ignored."""

    def on_sample(self, snapshot: HostSnapshot) -> None:
        """A new sample arrived: the link's snapshot now."""
        return None

    def on_log(self, chunk: LogChunk) -> None:
        """A followed log grew (chunks arrive in order, each from where the last ended)."""
        return None

    def on_event(self, event: AgentEvent) -> None:
        """A process exit, a session's end, a log truncated or rotated, or the agent's own error."""
        return None

    def on_state(self, connection: ConnectionInfo) -> None:
        """The link's connection state (or its error) changed."""
        return None

    def on_tick(self) -> None:
        """The link, kept up, heard nothing for ``QUIET_TICKS`` intervals (again every as many while silent): what
        depends on age may be derived again."""
        return None


@cache
def _events() -> TypeAdapter[AgentEvent]:
    return TypeAdapter(AgentEvent)


def pushed_event(msg: dict[str, Any]) -> AgentEvent | None:
    """The model of a pushed ``event`` (or ``error``/``fatal``) message; None when it is not one."""
    body = {"kind": msg.get("type"), "message": str(msg.get("message") or "")} \
        if msg.get("type") in ("error", "fatal") else msg
    try:
        return _events().validate_python(body)
    except ValidationError:
        return None


def pushed_log(msg: dict[str, Any]) -> LogChunk | None:
    """The model of a pushed ``log`` message; None when it is not one."""
    try:
        return LogChunk.model_validate(msg)
    except ValidationError:
        return None


def sessions_each(raw: Any) -> list[SessionInfo] | Any:
    """Each session of a sample validated on its own: one the agent sent malformed is listed as broken
    (with pydantic's reason) instead of voiding the whole sample (GPUs, servers and the other sessions)."""
    if not isinstance(raw, list):
        return raw
    out: list[SessionInfo] = []
    for item in raw:
        try:
            out.append(SessionInfo.model_validate(item))
        except ValidationError as e:
            d = item if isinstance(item, dict) else {}
            sid, run_dir = d.get("session_id"), d.get("run_dir")
            err = e.errors()[0]
            out.append(SessionInfo(
                session_id=sid if isinstance(sid, str) else "?", run_dir=run_dir if isinstance(run_dir, str) else "?",
                broken=f"invalid run directory: {'.'.join(map(str, err['loc']))}: {err['msg']}"))
    return out


def _valid(cls: type[M], raw: Any, op: str, **extra: Any) -> M:
    """``raw`` (a reply of ``op``) as ``cls``; InvalidReply (a RequestError) when it is not one."""
    try:
        return cls.model_validate({**raw, **extra} if isinstance(raw, dict) else raw)
    except ValidationError as e:
        err = e.errors()[0]
        raise InvalidReply(f"{op}: the agent's reply is invalid: {'.'.join(map(str, err['loc']))}: {err['msg']}") \
            from None


def _args(**kw: Any) -> dict[str, Any]:
    """Request arguments without the ones left at None (the agent's defaults apply)."""
    return {k: v for k, v in kw.items() if v is not None}


class HostClient:
    """The agent's ops on one host, typed. Errors: :mod:`console.link.errors` (RequestError and its kinds,
    LinkDown) and ``TimeoutError`` when no reply came within ``timeout`` seconds.

    ``audit``: whether the call is written to the audit log (the link's ``audit``); actions default to yes,
    reads to no."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    @classmethod
    def of(cls, link: Wire | HostClient) -> HostClient:
        """The client of ``link`` (its own ``client`` when it has one), or ``link`` when it is one."""
        if isinstance(link, HostClient):
            return link
        own = getattr(link, "client", None)
        return own if isinstance(own, HostClient) else cls(link)

    @property
    def name(self) -> str:
        """The host's name."""
        return str(getattr(self.wire, "name", None) or "host")

    async def _call(self, op: str, args: dict[str, Any] | None = None, *, timeout: float = 30.0,
                    audit: bool = False) -> Any:
        return await self.wire.request(op, args or {}, timeout=timeout, audit=audit)

    # ------------------------------------------------------------ the agent and its host
    async def hello(self, *, timeout: float = 30.0) -> AgentHello:
        """Who the agent is (version, host, user, boot id, GPU source)."""
        return _valid(AgentHello, await self._call("hello", timeout=timeout), "hello")

    async def ping(self, *, timeout: float = 30.0, audit: bool = False) -> float:
        """The agent's clock (epoch seconds): it answers."""
        return float(await self._call("ping", timeout=timeout, audit=audit))

    async def set_interval(self, interval: float, *, timeout: float = 30.0) -> float:
        """Sample every ``interval`` seconds from now on (at least 0.05); returns the interval set."""
        return float(await self._call("set_interval", {"interval": interval}, timeout=timeout))

    async def snapshot(self, *, timeout: float = 30.0) -> HostSnapshot:
        """A sample taken now (the link's snapshot is refreshed with it)."""
        return await self.wire.refresh(timeout)

    async def vmstat(self, *, timeout: float = 30.0) -> VmStat:
        """The kernel's OOM-kill counter."""
        return _valid(VmStat, await self._call("vmstat", timeout=timeout), "vmstat")

    async def gpu_samples(self, since: float | None = None, until: float | None = None, max_points: int | None = None,
                          *, timeout: float = 30.0) -> GpuSamples:
        """The host's recent GPU readings in [since, until] (its sample ring, newest ``max_points``)."""
        raw = await self._call("gpu_samples", _args(since=since, until=until, max_points=max_points), timeout=timeout)
        if isinstance(raw, dict) and isinstance(raw.get("points"), list):  # one bad point does not void the rest
            raw = {**raw, "points": [p for p in raw["points"] if isinstance(p, dict)]}
        return _valid(GpuSamples, raw, "gpu_samples")

    # ------------------------------------------------------------ sessions and logs
    async def sessions(self, *, timeout: float = 30.0, audit: bool = False) -> list[SessionInfo]:
        """Every run directory of the runs directory (a malformed one listed as broken)."""
        raw = await self._call("sessions", timeout=timeout, audit=audit)
        if not isinstance(raw, list):
            raise InvalidReply(f"sessions: the agent's reply is not a list: {type(raw).__name__}")
        return list(sessions_each(raw))

    async def read_log(self, session_id: str, offset: int | None = None, tail_bytes: int | None = None,
                       max_bytes: int | None = None, tail_lines: int | None = None, *, timeout: float = 30.0,
                       audit: bool = False) -> LogChunk:
        """A chunk of the session's ``output.log`` from ``offset``, its last ``tail_bytes``, or its last
        ``tail_lines`` lines (see the protocol); NotFound when it has no log."""
        raw = await self._call("read_log", _args(session_id=session_id, offset=offset, tail_bytes=tail_bytes,
                                                 max_bytes=max_bytes, tail_lines=tail_lines),
                               timeout=timeout, audit=audit)
        return _valid(LogChunk, raw, "read_log", session_id=session_id)

    async def follow_log(self, session_id: str, offset: int = 0, file: int | None = None) -> None:
        """Push the session's log from ``offset`` of the file with inode ``file`` (None: output.log as it is)
        as ``on_log`` chunks; kept across reconnects."""
        await self.wire.follow_log(session_id, offset, file)

    async def unfollow_log(self, session_id: str) -> None:
        """Stop pushing the session's log."""
        await self.wire.unfollow_log(session_id)

    async def ack(self, session_id: str, by: str | None = None, *, timeout: float = 30.0,
                  audit: bool = True) -> SessionInfo:
        """Acknowledge an ended session (``ack.json``); NotEnded when it has not ended, NotFound when absent."""
        return _valid(SessionInfo, await self._call("ack", _args(session_id=session_id, by=by), timeout=timeout,
                                                    audit=audit), "ack")

    async def prune(self, session_id: str, *, timeout: float = 60.0, audit: bool = True) -> Pruned:
        """Remove a broken run directory (never recorded, malformed) of which nothing runs, re-checked on the host;
        Refused for anything else (a live or ended session, another user's), NotFound when absent."""
        return _valid(Pruned, await self._call("prune", _args(session_id=session_id), timeout=timeout, audit=audit),
                      "prune")

    async def launch(self, spec: LaunchSpec, env: dict[str, str] | None = None, preflight: dict[str, Any] | None = None,
                     *, timeout: float = 60.0, audit: bool = True) -> LaunchResult:
        """Preflight and spawn ``spec`` under the host's launch lock (``preflight["check_only"]``: only the
        checks, nothing created). Refused when a check fails, BadRequest for a bad spec."""
        raw = await self._call("launch", {"spec": spec.model_dump(mode="json"), "env": env or {},
                                          "preflight": preflight or {}}, timeout=timeout, audit=audit)
        if not isinstance(raw, dict):
            raise InvalidReply(f"launch: the agent's reply is not an object: {type(raw).__name__}")
        session = None if (preflight or {}).get("check_only") or raw.get("session_id") is None else raw
        return _valid(LaunchResult, {"session": session, "preflight": raw.get("preflight") or []}, "launch")

    # ------------------------------------------------------------ processes
    async def proc(self, pid: int, *, timeout: float = 30.0, audit: bool = False) -> ProcInfo | None:
        """Process ``pid`` as /proc reads it now; None when there is none."""
        raw = await self._call("proc", {"pid": pid}, timeout=timeout, audit=audit)
        return None if not raw else _valid(ProcInfo, raw, "proc", pid=pid)

    async def kill(self, *, start_ticks: int | None, signal: int = 15, pid: int | None = None, pgid: int | None = None,
                   session_id: str | None = None, pids: Sequence[Sequence[int]] | None = None,
                   timeout: float = 30.0, audit: bool = True) -> Signalled:
        """Signal a process group (checked against its leader's start time) or one process, and ``pids``
        ([[pid, start_ticks], ...]) that still are who they were; with ``session_id`` only the session's
        confirmed members. NoSuchProcess when there was nothing left to signal, Refused when an identity
        changed (nothing signalled)."""
        args = _args(pid=pid, pgid=pgid, session_id=session_id,
                     pids=[list(p) for p in pids] if pids is not None else None)
        raw = await self._call("kill", {"start_ticks": start_ticks, "signal": signal, **args}, timeout=timeout,
                               audit=audit)
        return _valid(Signalled, raw, "kill")

    async def watch(self, pid: int, start_ticks: int | None = None, session_id: str | None = None, *,
                    timeout: float = 30.0) -> None:
        """Push an ``exit`` event (``on_event``) when that process ends."""
        await self._call("watch", _args(pid=pid, start_ticks=start_ticks, session_id=session_id), timeout=timeout)

    async def foreign_output(self, pid: int, start_ticks: int | None = None, tail_bytes: int = FOREIGN_TAIL_BYTES, *,
                             timeout: float = 30.0, audit: bool = False) -> ForeignOutput:
        """A hand-started server's stdout file: path, size, last write and tail, in one round trip.
        NoSuchProcess when the process is gone or another one, Refused when its stdout is not a regular file."""
        raw = await self._call("foreign_output", _args(pid=pid, start_ticks=start_ticks, tail_bytes=tail_bytes),
                               timeout=timeout, audit=audit)
        return _valid(ForeignOutput, raw, "foreign_output")

    # ------------------------------------------------------------ network, files, commands
    async def port_open(self, port: int, *, timeout: float = 30.0, audit: bool = False) -> bool:
        """Something accepts TCP on 127.0.0.1:``port`` of the host."""
        return bool(await self._call("port_open", {"port": port}, timeout=timeout, audit=audit))

    async def port_owner(self, port: int, *, timeout: float = 30.0, audit: bool = False) -> PortOwner | None:
        """Who listens on ``port`` (None: nobody)."""
        raw = await self._call("port_owner", {"port": port}, timeout=timeout, audit=audit)
        return None if raw is None else _valid(PortOwner, raw, "port_owner")

    async def http_get(self, port: int, path: str = "/health", timeout: float = 5.0, *,
                       reply_timeout: float | None = None, audit: bool = False) -> HttpResult:
        """GET ``path`` on 127.0.0.1:``port`` of the host within ``timeout`` seconds there (status 0: no
        connection); the reply is awaited ``reply_timeout`` (default: ``timeout`` + 5)."""
        raw = await self._call("http_get", {"port": port, "path": path, "timeout": timeout},
                               timeout=reply_timeout if reply_timeout is not None else timeout + 5, audit=audit)
        return _valid(HttpResult, raw, "http_get")

    async def read_file(self, path: str, max_bytes: int = 1 << 20, *, timeout: float = 30.0,
                        audit: bool = False) -> str:
        """The first ``max_bytes`` of a file on the host, decoded (NotFound, Denied)."""
        raw = await self._call("read_file", {"path": path, "max_bytes": max_bytes}, timeout=timeout, audit=audit)
        if not isinstance(raw, dict) or not isinstance(raw.get("data"), str):
            raise InvalidReply("read_file: the agent's reply has no data")
        return str(raw["data"])

    async def run(self, argv: list[str], timeout: float = 60, env: dict[str, str] | None = None, *,
                  reply_timeout: float | None = None, audit: bool = True) -> RunResult:
        """Run ``argv`` on the host without a shell, for at most ``timeout`` seconds there (TimedOut after;
        NotFound: no such command); the reply is awaited ``reply_timeout`` (default: ``timeout`` + 15)."""
        raw = await self._call("run", _args(argv=list(argv), timeout=timeout, env=env),
                               timeout=reply_timeout if reply_timeout is not None else timeout + 15, audit=audit)
        return _valid(RunResult, raw, "run")
