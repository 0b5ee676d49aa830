"""The agent's channel: its stdout cut into lines and handed to a callback as the bytes arrive.

Over SSH the channel is an asyncssh session (:class:`_SshSession`), locally a subprocess protocol
(:class:`_LocalProtocol`); both feed one :class:`LineChannel`. No stream reader and no reader task sit between
the transport and the link: a fleet's hosts each push a line a second, and a task woken per line (a future set,
a coroutine resumed, a stream's buffer searched again) cost more than reading the line itself.

Until the link takes the lines (:meth:`LineChannel.deliver`), they queue for :meth:`LineChannel.next_line` (the
agent's hello, and any noise a login prints before it). A line longer than ``limit`` is dropped whole (up to its
newline) and counted in :attr:`LineChannel.oversized`; the lines after it arrive as usual.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncssh

STDERR_KEEP = 16 * 1024
"""How much of the agent's stderr is kept (the last bytes: a traceback's end is where its cause is)."""


class LineChannel:
    """The agent's stdin, stdout (as lines) and stderr (its tail), over SSH or a local subprocess."""

    def __init__(self, limit: int):
        self.limit = limit
        self._parts: list[bytes] = []
        self._held = 0
        self._skipping = False
        self.oversized = 0
        """Lines dropped for being longer than ``limit``."""
        self.stderr = bytearray()
        """The last :data:`STDERR_KEEP` bytes the agent wrote to stderr."""
        self._queued: collections.deque[bytes] = collections.deque()
        self._arrived = asyncio.Event()
        self._on_line: Callable[[bytes], None] | None = None
        self._on_lost: Callable[[], None] | None = None
        self.on_oversized: Callable[[], None] | None = None
        """Told each time a line is dropped for its length."""
        self.lost = False
        """The agent's stdout ended (EOF, the channel or process gone)."""
        self._done = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._write: Callable[[bytes], None] = lambda data: None
        self._close: Callable[[], None] = lambda: None
        self._kill: Callable[[], None] = lambda: None

    # ------------------------------------------------------------ what the transport calls
    def feed(self, data: bytes) -> None:
        """Bytes of the agent's stdout: every line they complete goes to the link (or the queue), at once."""
        nl = data.find(b"\n")
        if nl < 0:
            self._hold(data)
            return
        start = 0
        if self._parts or self._skipping:
            if self._skipping:
                self._skipping = False
            elif self._held + nl + 1 > self.limit:
                self._drop()
            else:
                self._parts.append(data[:nl + 1])
                self._line(b"".join(self._parts))
            self._parts.clear()
            self._held = 0
            start = nl + 1
            nl = data.find(b"\n", start)
        limit = self.limit
        while nl >= 0:
            if nl + 1 - start > limit:
                self._drop()
            else:
                self._line(data[start:nl + 1])
            start = nl + 1
            nl = data.find(b"\n", start)
        if start < len(data):
            self._hold(data[start:])

    def _hold(self, part: bytes) -> None:
        if self._skipping or not part:
            return
        self._held += len(part)
        if self._held > self.limit:
            self._parts.clear()
            self._held, self._skipping = 0, True
            self._drop()
            return
        self._parts.append(part)

    def _drop(self) -> None:
        self.oversized += 1
        if self.on_oversized is not None:
            self.on_oversized()

    def feed_stderr(self, data: bytes) -> None:
        self.stderr += data
        if len(self.stderr) > STDERR_KEEP:
            del self.stderr[:-STDERR_KEEP]

    def ended(self) -> None:
        """The agent's stdout ended: a last line without its newline is still a line; the link hears of the loss."""
        if self.lost:
            return
        if self._parts and not self._skipping:
            self._line(b"".join(self._parts))
        self._parts.clear()
        self.lost = True
        self._writable.set()
        self._arrived.set()
        if self._on_lost is not None:
            self._on_lost()

    def closed(self) -> None:
        """The transport is gone (the process reaped, the SSH channel closed)."""
        self.ended()
        self._done.set()

    def _line(self, line: bytes) -> None:
        if self._on_line is not None:
            self._on_line(line)
        else:
            self._queued.append(line)
            self._arrived.set()

    # ------------------------------------------------------------ what the link calls
    async def next_line(self) -> bytes | None:
        """The next line, before :meth:`deliver` (None: the agent's stdout ended)."""
        while not self._queued:
            if self.lost:
                return None
            self._arrived.clear()
            await self._arrived.wait()
        return self._queued.popleft()

    def deliver(self, on_line: Callable[[bytes], None], on_lost: Callable[[], None]) -> None:
        """From now on every line goes to ``on_line`` as it arrives (those queued first, in order) and the end of the
        channel to ``on_lost`` (at once if it has ended already)."""
        while self._queued:
            on_line(self._queued.popleft())
        self._on_line, self._on_lost = on_line, on_lost
        if self.lost:
            on_lost()

    async def stderr_text(self, wait: float = 2.0) -> str:
        """What the agent wrote to stderr, once the channel is closed (or after ``wait`` seconds)."""
        try:
            await asyncio.wait_for(self._done.wait(), wait)
        except asyncio.TimeoutError:
            pass
        return self.stderr.decode("utf-8", "replace")

    async def write_line(self, line: bytes) -> None:
        """Send one line to the agent's stdin; waits while the transport's buffer is full. ConnectionError: gone."""
        if self.lost:
            raise ConnectionError("the agent's channel is closed")
        self._write(line)
        if not self._writable.is_set():
            await self._writable.wait()
            if self.lost:
                raise ConnectionError("the agent's channel closed")

    def kill(self) -> None:
        """Drop the channel abruptly (no goodbye)."""
        try:
            self._kill()
        except Exception:
            pass

    async def close(self) -> None:
        """Stop the agent's channel and reap it (no transport left for a closed event loop)."""
        try:
            self._close()
        except Exception:
            pass
        try:
            await asyncio.wait_for(self._done.wait(), 3)
        except asyncio.TimeoutError:
            pass

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()


class _Flow:
    """The transport's write flow control, passed on to the channel (its :meth:`LineChannel.write_line` waits)."""

    chan: LineChannel

    def pause_writing(self) -> None:
        self.chan.pause_writing()

    def resume_writing(self) -> None:
        self.chan.resume_writing()


class _SshSession(_Flow):
    """An asyncssh client session feeding a :class:`LineChannel` (duck-typed: asyncssh calls these methods)."""

    def __init__(self, chan: LineChannel):
        self.chan = chan

    def connection_made(self, channel: Any) -> None:
        pass

    def session_started(self) -> None:
        pass

    def data_received(self, data: bytes, datatype: Any) -> None:
        if datatype is None:
            self.chan.feed(data)
        else:
            self.chan.feed_stderr(data)

    def eof_received(self) -> bool:
        self.chan.ended()
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.chan.closed()

    def exit_status_received(self, status: int) -> None:
        pass

    def exit_signal_received(self, signal: str, core_dumped: bool, msg: str, lang: str) -> None:
        pass

    def xon_xoff_requested(self, client_can_do: bool) -> None:
        pass


async def open_ssh(conn: asyncssh.SSHClientConnection, command: str, limit: int) -> LineChannel:
    """Run ``command`` (a fixed line: :mod:`console.link.protocol`'s bootstrap) on an exec channel of ``conn``."""
    chan = LineChannel(limit)
    ssh_chan, _ = await conn.create_session(lambda: _SshSession(chan), command,  # type: ignore[arg-type, return-value]
                                            encoding=None, window=limit)
    chan._write, chan._close, chan._kill = ssh_chan.write, ssh_chan.close, ssh_chan.abort
    return chan


class _LocalProtocol(_Flow, asyncio.SubprocessProtocol):
    """A local agent's pipes feeding a :class:`LineChannel`."""

    def __init__(self, chan: LineChannel):
        self.chan = chan

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self.chan.feed(data)
        else:
            self.chan.feed_stderr(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self.chan.ended()

    def connection_lost(self, exc: Exception | None) -> None:
        self.chan.closed()


async def open_local(argv: list[str], env: dict[str, str], limit: int) -> LineChannel:
    """Run ``argv`` as a local subprocess in a session of its own (FileNotFoundError: no such program)."""
    chan = LineChannel(limit)
    transport, _ = await asyncio.get_running_loop().subprocess_exec(
        lambda: _LocalProtocol(chan), *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True, env=env)
    stdin = transport.get_pipe_transport(0)
    assert isinstance(stdin, asyncio.WriteTransport)
    chan._write, chan._close, chan._kill = stdin.write, transport.close, transport.kill
    return chan


__all__ = ["LineChannel", "open_local", "open_ssh"]
