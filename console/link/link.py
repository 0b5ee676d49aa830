"""HostLink: one connection and one agent per host, requests, pushed events, reconnects.

``local`` runs the same agent as a subprocess (same code path minus SSH). Over SSH the
agent is started on an exec channel without a pty and bootstrapped over stdin. The link
keeps the latest sample and its connection state, so :meth:`HostLink.snapshot` is always
an honest, immutable :class:`HostSnapshot` (state, last error, RTT, sample age). An open channel whose
agent answers nothing (frozen, the TCP connection still up) is ``stale``, not ``connected``; listeners
hear a ``tick`` every half interval while the link is kept up, so what depends on age is re-derived
while nothing arrives.

What the agent answers is typed by :attr:`HostLink.client` (``console/link/client.py``); what it pushes reaches
typed listeners (:meth:`HostLink.listen`) as models.

Longer than ~400 lines on purpose: it is one connection's whole life (transport, bootstrap,
requests, reconnects, followed logs) around state they all share.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shlex
import time
from importlib import resources
from typing import TYPE_CHECKING, Any, Callable

from pydantic import ValidationError

from console.config import HostConfig
from console.errors import HostError, HostKeyError
from console.link import jsonline, protocol
from console.link.channel import LineChannel, open_local, open_ssh
from console.link.client import HostClient, LinkListener, pushed_event, pushed_log, sessions_each
from console.link.errors import LinkDown, RequestError, request_error
from console.link.samples import SampleBook
from console.link.ssh import HostSpec
from console.model import ConnectionInfo, HostSnapshot

if TYPE_CHECKING:
    import asyncssh

STREAM_LIMIT = 64 * 1024 * 1024
"""The longest agent message read (a longer line is dropped, up to its newline, and the sample book says so), and
the SSH channel's receive window."""
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 60.0
PING_EVERY_S = 15.0
"""Seconds between pings of a link that hears from its agent (the RTT shown, at most this old; a silent agent is
pinged sooner: SILENT_TICKS)."""
SILENT_TICKS = 2
"""A link that has heard nothing from its agent (no sample, no reply) for this many sample intervals pings it
at once; no answer within ``HostConfig.ping_timeout`` makes the link ``stale`` until the agent speaks again."""
QUIET_TICKS = 1.25
"""A link kept up ticks its listeners (``on_tick``: what depends on age is derived again) when it has heard nothing
from its agent for this many intervals, and again each time as long again passes in silence; a sample arriving
each interval means no tick (a fleet's hosts cost nothing between their samples)."""
AGENT_START_TIMEOUT_S = 30.0
"""How long the agent may take to say hello once the channel is open (a slow host's Python start)."""


def _source(name: str, package: str = "console.host") -> str:
    """Source of a file shipped to the host (empty if absent from this build)."""
    try:
        return resources.files(package).joinpath(name).read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


__all__ = ["HostLink", "LinkDown", "RequestError", "local_agent_env", "sessions_each"]


class HostLink:
    """A live link to one host's agent. Never raises from :meth:`run`; reconnects with backoff."""

    def __init__(self, spec: HostSpec, host_cfg: HostConfig | None = None, *, ssh_config: str | None = None,
                 interval: float = 1.0, audit: Callable | None = None, clock: Callable[[], float] = time.time,
                 connect_timeout: float | None = None):
        self.spec = spec
        self.name = spec.name
        self.cfg = host_cfg or HostConfig()
        self.ssh_config = ssh_config
        self.interval = interval
        self.audit = audit
        self.clock = clock
        self.connect_timeout = connect_timeout or self.cfg.connect_timeout
        self.ping_timeout = self.cfg.ping_timeout
        self.heard_at = float("-inf")
        """When the agent last said anything on the current channel (``time.monotonic``)."""
        self._pinged_at = float("-inf")
        self._ping_task: asyncio.Task | None = None
        self._ticked_at = float("-inf")
        self._tick_timer: asyncio.TimerHandle | None = None
        self.conn: asyncssh.SSHClientConnection | None = None
        self.chan: LineChannel | None = None
        self.state = "connecting"
        self.error: str | None = None
        self.rtt_ms: float | None = None
        self.attempts = 0
        self.since = clock()
        self.next_retry_at: float | None = None
        self.hello: dict | None = None
        self.book = SampleBook()
        """The latest sample, rebuilt from the agent's deltas (``console/link/samples.py``)."""
        self._resync_task: asyncio.Task | None = None
        self.received_at: float | None = None
        self._snapshot: HostSnapshot | None = None
        self._snapshot_error: str | None = None
        self._conn_info: tuple[tuple, ConnectionInfo] | None = None
        """The last snapshot's ConnectionInfo and the link fields it was made of (reused while they are the same)."""
        self.resyncs = 0
        """Whole samples asked for after a gap or a bad delta."""
        self._pending: dict[int, asyncio.Future] = {}
        self._ids = 0
        self._closed = False
        self._wake = asyncio.Event()
        self.follows: dict[str, int] = {}
        self.follow_files: dict[str, int | None] = {}
        """The inode each followed offset is in (a capped log is rotated: offsets restart in the new file)."""
        self._listeners: list[LinkListener] = []
        """Who hears what arrives (:meth:`listen`), as models."""
        self.client = HostClient(self)
        """The agent's ops, typed (:class:`~console.link.client.HostClient`): the way to ask this host."""
        self.connected = asyncio.Event()
        self.running = False
        """True while :meth:`run` keeps the link up (operations may then wait out a drop)."""
        self._stopped = asyncio.Event()

    # ------------------------------------------------------------ connection
    def listen(self, listener: LinkListener) -> None:
        """Tell ``listener`` what arrives (samples, log chunks, events) and how the connection fares, as models."""
        if listener not in self._listeners:
            self._listeners.append(listener)

    def unlisten(self, listener: LinkListener) -> None:
        """Stop telling ``listener`` (one never added is fine)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _tell(self, method: str, *arg: Any) -> None:
        for w in list(self._listeners):
            try:
                getattr(w, method)(*arg)
            except Exception:  # a listener must never kill the link
                pass

    def _set_state(self, state: str, error: str | None = None) -> None:
        if state != self.state or error != self.error:
            self.state, self.error, self.since = state, error, self.clock()
            self._snapshot = None
            if self._listeners:
                self._tell("on_state", self.snapshot().connection)

    def mark_down(self, error: str, *, refused: bool = False) -> None:
        """Record that this host could not be reached (``refused``: it was refused, e.g. its host key), with
        the reason its snapshot reports; for callers that gave up on it without :meth:`run`."""
        self._set_state("failed" if refused else "unreachable", error)

    async def _open_channel(self) -> LineChannel:
        argv = [self.cfg.python, "-u", "-c", protocol.BOOTSTRAP]
        if self.spec.local:
            try:
                return await open_local(argv, local_agent_env(), STREAM_LIMIT)
            except FileNotFoundError:
                raise HostError(f"local: no Python at {self.cfg.python!r}") from None
        from console.link import ssh

        # The only shell line we ever send: a fixed program; the python path is quoted.
        line = shlex.join(argv)
        if self.conn is not None:
            try:
                return await open_ssh(self.conn, line, STREAM_LIMIT)
            except Exception:  # the connection died with the channel: open a fresh one now, not after a backoff
                self.conn.close()
                self.conn = None
        self.conn = await ssh.connect(self.spec, self.ssh_config, connect_timeout=self.connect_timeout)
        return await open_ssh(self.conn, line, STREAM_LIMIT)

    async def open(self) -> None:
        """Connect, bootstrap the agent, wait for its hello. Raises HostError/HostKeyError."""
        self._set_state("connecting" if self.attempts == 0 and self.hello is None else "reconnecting", self.error)
        t0 = time.perf_counter()
        try:
            chan = await asyncio.wait_for(self._open_channel(), self.connect_timeout + 5)
        except asyncio.TimeoutError:
            raise HostError(f"{self.name}: connection timed out after {self.connect_timeout:.0f} s") from None
        agent_cfg = {
            "interval": self.interval, "runs_dir": self.cfg.runs_dir, "gpu_source": self.cfg.gpu_source,
            "sim_dir": self.cfg.sim_dir, "launch_env": self.cfg.launch_env, "log_cap_mb": self.cfg.log_cap_mb,
            "sim_src": _source("simgpu.py", "console.sim") if self.cfg.gpu_source == "sim" or self.cfg.sim_dir else "",
        }
        noise: list[str] = []
        try:
            await chan.write_line(_line(protocol.shipped_payload()))
            await chan.write_line(_line(agent_cfg))
            msg = await asyncio.wait_for(_first_message(chan, noise), AGENT_START_TIMEOUT_S)
        except asyncio.TimeoutError:
            await chan.close()
            raise HostError(f"{self.name}: the agent did not answer within {AGENT_START_TIMEOUT_S:.0f} s"
                            + (f" (the host printed: {' | '.join(noise)[-300:]})" if noise else "")) from None
        except (OSError, ConnectionError, ValueError) as e:
            await chan.close()
            raise HostError(f"{self.name}: agent did not start: {str(e) or type(e).__name__}") from None
        if msg is None:
            text = (await chan.stderr_text(wait=2.0)).strip()
            await chan.close()
            if "not found" in text or "No such file" in text:
                raise HostError(f"{self.name}: cannot start the agent: no {self.cfg.python!r} on the host ({text[-200:]})")
            if noise:
                text = (text + " | stdout: " + " | ".join(noise)).strip(" |")
            raise HostError(f"{self.name}: the agent exited at start: {text[-500:] or 'no output'}")
        if msg.get("type") != "ready":
            await chan.close()
            raise HostError(f"{self.name}: agent failed to start: {msg.get('message', msg)}")
        self.hello = msg["hello"]
        self.chan = chan
        self.heard_at = self._pinged_at = time.monotonic()
        self.rtt_ms = (time.perf_counter() - t0) * 1000.0
        self.attempts = 0
        self.next_retry_at = None
        self._set_state("connected")
        self.connected.set()
        chan.on_oversized = self._oversized
        chan.deliver(lambda line: self._on_line(chan, line), lambda: self._on_lost(chan))
        for sid, off in self.follows.items():  # re-follow from where we were: nothing lost, nothing twice
            await self._send("follow_log", {"session_id": sid, "offset": off, "file": self.follow_files.get(sid)})

    def _on_line(self, chan: LineChannel, line: bytes) -> None:
        """One line from the agent, as it arrives (called by the channel; see ``console/link/channel.py``). A line
        that is no JSON object, or a message that breaks its handler, is dropped: the link and the lines after it
        go on."""
        try:
            msg = jsonline.loads(line)
        except ValueError:
            return
        if not isinstance(msg, dict):
            return
        if self.chan is chan:
            self._heard()
        try:
            self._dispatch(msg)
        except Exception as e:  # a message the agent should not have sent: never the end of the link
            self.book.refused = (self.book.refused + [f"a {msg.get('type')!r} message broke its handler: {e!r}"])[-20:]

    def _oversized(self) -> None:
        why = f"the agent sent a line over {STREAM_LIMIT >> 20} MiB: dropped (the lines after it are read)"
        self.book.refused = (self.book.refused + [why])[-20:]

    def _on_lost(self, chan: LineChannel) -> None:
        if self.chan is chan:
            self.chan = None
            self.connected.clear()
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(LinkDown(f"{self.name}: connection lost"))
            self._pending.clear()
            if not self._closed:
                self._set_state("reconnecting", self.error or "connection lost")
            self._wake.set()

    def _heard(self) -> None:
        """The agent said something: it is alive now (a stale link is connected again), and the quiet tick moves
        later (the timer is set again here, in the callback that read the message, rather than waking up once an
        interval to find that nothing is due)."""
        self.heard_at = time.monotonic()
        if self._tick_timer is not None:
            self._tick_timer.cancel()
            self._arm_tick()
        if self.state == "stale":
            self._pinged_at = float("-inf")  # measure the RTT again at the next tick
            self._set_state("connected")

    def _dispatch(self, msg: dict) -> None:
        t = msg.get("type")
        if t == "reply":
            rid = msg.get("id")
            fut = self._pending.pop(rid, None) if isinstance(rid, int) else None
            if fut and not fut.done():
                if msg.get("ok"):
                    fut.set_result(msg.get("result"))
                else:
                    fut.set_exception(request_error(msg.get("kind"), msg.get("error")))
        elif t == "sample":
            self.take_sample(msg["data"], msg.get("seq"))
        elif t == "sample_delta":
            self._take_delta(msg)
        elif t == "log":
            sid = msg.get("session_id")
            if sid in self.follows and msg.get("offset") == self.follows[sid]:
                # "end" is the agent's byte offset after this chunk. The data was decoded with
                # replacement, so its UTF-8 length differs from the bytes read when the log holds
                # invalid UTF-8 (or a chunk split a character): counting it would lose the rest.
                end = msg.get("end")
                self.follows[sid] = end if isinstance(end, int) and end >= self.follows[sid] else (
                    self.follows[sid] + len(msg.get("data", "").encode("utf-8")))
                if isinstance(msg.get("file"), int):
                    self.follow_files[sid] = msg["file"]
                chunk = pushed_log(msg) if self._listeners else None
                if chunk is not None:
                    self._tell("on_log", chunk)
        elif t == "event":
            if msg.get("kind") == "log_truncated" and msg.get("session_id") in self.follows:
                self.follows[msg["session_id"]] = 0  # the agent restarts the follow from the beginning
            if msg.get("kind") == "log_rotated" and msg.get("session_id") in self.follows:
                # the old segment was pushed to its end; the new file's lines come from its offset 0
                self.follows[msg["session_id"]], self.follow_files[msg["session_id"]] = 0, msg.get("file")
            self._tell_event(msg)
        elif t in ("error", "fatal"):
            self._tell_event(msg)

    def _tell_event(self, msg: dict) -> None:
        event = pushed_event(msg) if self._listeners else None
        if event is not None:
            self._tell("on_event", event)

    async def run(self) -> None:
        """Keep the link up until :meth:`close`: reconnect with exponential backoff and jitter.

        Idempotent: a second call while the link is kept up (it was started early, before the UI
        that also runs it) does not open a second agent; it waits until the first loop ends."""
        if self.running:
            await self._stopped.wait()
            return
        self.running = True
        self._stopped.clear()
        try:
            await self._keep_up()
        finally:
            self.running = False
            self._stopped.set()

    async def _keep_up(self) -> None:
        while not self._closed:
            if self.chan is None:
                try:
                    await self.open()
                except (HostError, HostKeyError) as e:
                    await self._fail(str(e), fatal=isinstance(e, HostKeyError))
                    continue
                except Exception as e:  # never let one host's failure escape
                    await self._fail(f"{self.name}: {type(e).__name__}: {e}")
                    continue
            self._wake.clear()
            self._arm_tick()
            try:
                await self._wake.wait()  # a lost channel, retry_now or close; the ticks come from the timer
            finally:
                if self._tick_timer is not None:
                    self._tick_timer.cancel()
                    self._tick_timer = None

    def _pinging(self) -> bool:
        return self._ping_task is not None and not self._ping_task.done()

    def _ping_due(self) -> float:
        """When the next ping is due (``time.monotonic``): after SILENT_TICKS intervals of silence, or
        PING_EVERY_S after the last one."""
        return min(self.heard_at + SILENT_TICKS * self.interval, self._pinged_at + PING_EVERY_S)

    def _quiet_due(self) -> float:
        """When the link ticks its listeners (``time.monotonic``): QUIET_TICKS intervals after it last heard from
        the agent or last ticked, whichever is later. A host whose samples arrive costs no tick at all."""
        return max(self.heard_at, self._ticked_at) + QUIET_TICKS * max(self.interval, 0.05)

    def _tick_wait(self) -> float:
        """Seconds until the timer is due: the quiet tick, or sooner when a ping falls due."""
        due = self._quiet_due()
        if self.chan is not None and not self._pinging():
            due = min(due, self._ping_due())
        return max(0.01, due - time.monotonic())

    def _arm_tick(self) -> None:
        self._tick_timer = asyncio.get_running_loop().call_later(self._tick_wait(), self._on_tick_timer)

    def _on_tick_timer(self) -> None:
        """The timer: what is due now (a ping, the quiet tick), then the timer again for what is due next."""
        self._tick_timer = None
        if self._closed:
            return
        now = time.monotonic()
        if self.chan is not None and not self._pinging() and now >= self._ping_due():
            self._pinged_at = now
            self._ping_task = asyncio.get_running_loop().create_task(self._ping())
        if now >= self._quiet_due():
            self._ticked_at = now
            self._tell("on_tick")
        self._arm_tick()

    async def _fail(self, error: str, fatal: bool = False) -> None:
        self.attempts += 1
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** min(self.attempts - 1, 10)) * random.uniform(0.5, 1.0)
        self.next_retry_at = self.clock() + delay
        self._set_state("failed" if fatal else "unreachable", error)
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), delay)
        except asyncio.TimeoutError:
            pass

    async def _ping(self) -> None:
        """One ping; no answer (and nothing else from the agent) within ``ping_timeout`` makes the link stale."""
        sent = time.monotonic()
        try:
            t0 = time.perf_counter()
            await self.client.ping(timeout=self.ping_timeout)
            self.rtt_ms, self._snapshot = (time.perf_counter() - t0) * 1000.0, None
        except asyncio.TimeoutError:
            if self.heard_at < sent:
                self.mark_stale(f"{self.name}: the agent answered no ping within {self.ping_timeout:g} s")
        except (LinkDown, RequestError):
            pass

    def mark_stale(self, error: str) -> None:
        """The channel is open but the agent does not answer (frozen, or a network that drops silently): the
        link reads ``stale`` with ``error`` (its last RTT is no longer true) until the agent speaks again."""
        if self.chan is None or self.state not in ("connected", "stale"):
            return
        self.rtt_ms = None
        self._set_state("stale", error)

    def retry_now(self) -> None:
        self._wake.set()

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._ping_task is not None:
            self._ping_task.cancel()  # a ping in flight ends with the link (done: a no-op)
        chan, self.chan = self.chan, None
        if chan:
            await chan.close()
        if self.conn is not None:
            self.conn.close()
            try:
                await asyncio.wait_for(self.conn.wait_closed(), 2)
            except Exception:
                pass
            self.conn = None
        self._set_state("closed", self.error)

    def abort_connection(self) -> None:
        """Drop the transport abruptly (tests and fault injection): no goodbye, like a dead network."""
        if self.conn is not None:
            self.conn.abort()
        elif self.chan is not None:
            self.chan.kill()

    # ------------------------------------------------------------ requests
    async def _send(self, op: str, args: dict | None) -> asyncio.Future:
        if self.chan is None:
            raise LinkDown(f"{self.name}: not connected ({self.error or self.state})")
        self._ids += 1
        rid = self._ids
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            await self.chan.write_line(_line({"id": rid, "op": op, "args": args or {}}))
        except (OSError, ConnectionError) as e:
            self._pending.pop(rid, None)
            raise LinkDown(f"{self.name}: connection lost: {e}") from None
        return fut

    async def request(self, op: str, args: dict | None = None, *, timeout: float = 30.0, audit: bool = True) -> Any:
        """Send one request and wait for its reply. Raises RequestError (the class of the reply's ``kind``),
        LinkDown or TimeoutError. Private to ``console/link``: above it, hosts are asked through ``self.client``
        (one typed method per op; ``tests/test_architecture.py`` holds that line)."""
        t0 = time.perf_counter()
        ok, result_text = False, None
        try:
            fut = await self._send(op, args)
            result = await asyncio.wait_for(fut, timeout)
            ok = True
            result_text = result  # the raw result: the audit redacts it once, before it is cut
            return result
        except RequestError as e:
            result_text = str(e)
            raise
        except asyncio.TimeoutError:
            result_text = f"timed out after {timeout:.0f} s"
            for rid in [k for k, v in self._pending.items() if v is fut]:
                del self._pending[rid]  # a late reply finds nothing; no future kept for an agent that never answers
            raise
        except LinkDown as e:
            result_text = str(e)
            raise
        finally:
            if audit and self.audit is not None:
                self.audit(self.name, op, args or {}, ok, result_text, (time.perf_counter() - t0) * 1000.0)

    async def follow_log(self, session_id: str, offset: int, file: int | None = None) -> None:
        """Follow a session's log from ``offset`` of the file with inode ``file`` (``read_log``'s ``file``;
        None: output.log as the agent finds it)."""
        self.follows[session_id], self.follow_files[session_id] = offset, file
        await self.request("follow_log", {"session_id": session_id, "offset": offset, "file": file})

    async def unfollow_log(self, session_id: str) -> None:
        self.follows.pop(session_id, None)
        self.follow_files.pop(session_id, None)
        if self.chan is not None:
            await self.request("unfollow_log", {"session_id": session_id})

    # ------------------------------------------------------------ snapshots
    @property
    def sample(self) -> dict | None:
        """The host's latest sample as the agent holds it (a whole one, or rebuilt from its deltas)."""
        return self.book.data

    @sample.setter
    def sample(self, data: dict | None) -> None:
        self.book.data, self.book.seq, self._snapshot = data, None, None

    def take_sample(self, data: dict, seq: int | None = None) -> None:
        """``data`` is the host's latest sample from now on (what the agent's ``sample`` message does; ``seq``: its
        number, the base of the deltas that follow): the snapshot is rebuilt from it and the listeners hear of it."""
        self.book.full(data, seq)
        self.received_at, self._snapshot = self.clock(), None
        if self._listeners:
            self._tell("on_sample", self.snapshot())

    def _take_delta(self, msg: dict) -> None:
        """A ``sample_delta``: applied to the sample held when it is that sample's and checks, and its changed items
        valid; otherwise the sample held stays (older, never wrong) and a whole one is asked for."""
        held, prev = self.book.data, self._snapshot
        if self.book.delta(msg):
            self.received_at, self._snapshot = self.clock(), None
            snap = self.snapshot()
            if self._snapshot_error is None:
                if self._listeners:
                    self._tell("on_sample", snap)
                return
            self.book.refused = (self.book.refused + [f"the delta's items are not valid: {self._snapshot_error}"])[-20:]
            self.book.data, self._snapshot = held, prev  # held with seq None: deltas refused until a whole one
        self.book.seq = None
        self._resync()

    def _resync(self) -> None:
        """Ask for a whole sample (a ``snapshot`` request: the agent's deltas then build on its reply), one at a time."""
        if self._resync_task is not None and not self._resync_task.done() or self.chan is None:
            return

        async def ask() -> None:
            try:
                snap = await self.refresh(timeout=max(10.0, 3 * self.interval))
            except (LinkDown, RequestError, asyncio.TimeoutError):
                return
            if self._listeners:
                self._tell("on_sample", snap)
        self.resyncs += 1
        self._resync_task = asyncio.get_running_loop().create_task(ask())

    async def refresh(self, timeout: float = 30.0) -> HostSnapshot:
        """Ask the agent for a sample now (not the next tick) and return the new snapshot."""
        t0 = time.perf_counter()
        data = await self.request("snapshot", timeout=timeout, audit=False)
        seq = data.pop("seq", None) if isinstance(data, dict) else None
        self.book.full(data, seq)
        self.rtt_ms = (time.perf_counter() - t0) * 1000.0
        self.received_at, self._snapshot = self.clock(), None
        return self.snapshot()

    def snapshot(self) -> HostSnapshot:
        """The latest immutable view of this host (rebuilt only when something changed)."""
        if self._snapshot is not None:
            return self._snapshot
        fields = (self.state, self.error, self.rtt_ms, self.since, self.attempts, self.next_retry_at)
        if self._conn_info is None or self._conn_info[0] != fields:  # the link's state changes seldom; samples often
            self._conn_info = (fields, ConnectionInfo(state=self.state, error=self.error, rtt_ms=self.rtt_ms,
                                                      since=self.since, attempts=self.attempts,
                                                      next_retry_at=self.next_retry_at))
        conn = self._conn_info[1]
        self._snapshot_error = None
        try:
            snap = self.book.snapshot(self.name, conn, self.received_at, self.hello)
        except ValidationError as e:
            self._snapshot_error = e.errors()[0]['msg']
            snap = HostSnapshot(name=self.name, connection=conn.model_copy(
                update={"error": f"agent sent an invalid sample: {self._snapshot_error}"}))
        self._snapshot = snap
        return snap


def _line(obj: Any) -> bytes:
    """One message to the agent: a JSON line."""
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


async def _first_message(chan: LineChannel, noise: list[str]) -> dict | None:
    """The agent's first JSON object; lines before it that are not JSON (a shell rc file or MOTD printing
    on a non-interactive login) are kept in ``noise`` (bounded) instead of failing the handshake."""
    while True:
        line = await chan.next_line()
        if line is None:
            return None
        try:
            msg = jsonline.loads(line)
        except ValueError:
            msg = None
        if isinstance(msg, dict):
            return msg
        if len(noise) < 20:
            noise.append(line.decode("utf-8", "replace").strip()[:200])


LOCAL_ENV_BASE = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
                  "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH")
"""What the local agent (and so every server it launches) inherits from the console's environment: the
paths and locale a login gives, nothing else. Launch values travel as ``launch_env``/``env_names``."""


def local_agent_env() -> dict[str, str]:
    """The local agent's environment: :data:`LOCAL_ENV_BASE` and ``LC_*`` from ours, never the whole of it
    (a secret in the console's environment must not reach a server unless ``env_names`` says so)."""
    return {k: v for k, v in os.environ.items() if k in LOCAL_ENV_BASE or k.startswith("LC_")}


