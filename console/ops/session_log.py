"""One log pipeline: a session's followed log, fed once per link, read by the tracker and a launch's watch.

A :class:`SessionLog` is one session's ``output.log`` as the console follows it: the incremental classifier
(the view's state, the decisive line), a ring of its last lines (the log pane, a failure's tail), how far it
is read (``offset`` in the file of inode ``inode``) and how many bytes arrived. :class:`SessionLogs` holds the
logs one link follows and feeds each from the link's stream exactly once, whoever asked first (the tracker
for a live session, a launch confirming its own): two followers of one session would each move the agent's
offset and lose, or repeat, the other's lines. :func:`probe_health` is the one ``GET /health`` the tracker
(READY verified now) and a launch's ``healthy`` step make.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from console.link.client import HostClient, LinkListener
from console.link.errors import LinkDown
from console.model import AgentEvent, Classification, ExitRecord, HttpResult, LogChunk, LogRotated, LogTruncated

if TYPE_CHECKING:
    from console.core.classify import LogClassifier
    from console.model import ProcessExit

RING_LINES = 5000
"""Lines of a session's log kept for the log pane and a failure's tail."""
TAIL_BYTES = 256 * 1024
"""How much of a log a follow starts from when the session is already running (its last part)."""


class SessionLog:
    """One session's log as followed: classifier, ring of lines, byte offset and inode (see module doc)."""

    def __init__(self, session_id: str, ring: int = RING_LINES) -> None:
        from console.core.classify import LogClassifier  # not before the first frame (tui.LATER_MODULES)

        self.session_id = session_id
        self.classifier: LogClassifier = LogClassifier()
        self.lines: deque[str] = deque(maxlen=ring)
        self.offset = 0
        """The agent's byte offset after the last chunk: where the follow goes on."""
        self.inode: int | None = None
        """The inode of the file ``offset`` is in (None: output.log as the agent finds it)."""
        self.received = 0
        """Bytes of log this console received for the session (UTF-8 of the decoded text)."""
        self.exit: ExitRecord | None = None
        """The session's exit record once it ended (set by whoever heard it)."""

    def feed(self, chunk: LogChunk) -> list[str]:
        """Add the next chunk (in order): classified, its lines ringed, the offset moved on. Returns its lines."""
        self.classifier.feed(chunk.data)
        lines = chunk.data.splitlines()
        self.lines.extend(lines)
        n = len(chunk.data.encode("utf-8"))
        self.received += n
        self.offset = chunk.end if chunk.end >= self.offset else self.offset + n
        if chunk.file is not None:
            self.inode = chunk.file
        return lines

    def restart(self, inode: int | None) -> None:
        """The agent follows the log from 0 again (truncated; rotated into the file of ``inode``)."""
        self.offset, self.inode = 0, inode

    def result(self, exit: ExitRecord | None = None, first_death: ProcessExit | None = None) -> Classification:
        """The classification of everything fed so far (with ``exit`` and the first death when given)."""
        return self.classifier.result(exit, first_death)

    def tail(self, n: int) -> list[str]:
        """The last ``n`` lines (``n`` > 0; 0: all of the ring)."""
        return list(self.lines)[-n:]


def read_whole(session_id: str, chunk: LogChunk, ring: int = RING_LINES) -> SessionLog:
    """A log built from one read (``read_log``'s tail of an ended session, or for the log pane): not followed."""
    log = SessionLog(session_id, ring)
    log.feed(chunk)
    return log


Reader = Callable[[SessionLog, list[str]], None]
"""Told each chunk's new lines after its log was fed."""


class SessionLogs(LinkListener):
    """The session logs one link follows, each fed once from its stream (:meth:`of` gives the link's own)."""

    _of: weakref.WeakKeyDictionary[Any, SessionLogs] = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, link: Any) -> SessionLogs:
        """The followed logs of ``link`` (made and listening on first use)."""
        logs = cls._of.get(link)
        if logs is None:
            logs = cls._of[link] = cls(link)
        return logs

    def __init__(self, link: Any) -> None:
        self._link = weakref.ref(link)  # a strong one would keep the link alive as long as the weak table's key
        self.logs: dict[str, SessionLog] = {}
        self.readers: list[Reader] = []
        self._starting: dict[str, asyncio.Future[SessionLog]] = {}
        link.listen(self)

    @property
    def client(self) -> HostClient:
        link = self._link()
        if link is None:
            raise LinkDown("the link is gone")
        return HostClient.of(link)

    def get(self, session_id: str) -> SessionLog | None:
        """The followed log of ``session_id`` (None: not followed through this link)."""
        return self.logs.get(session_id)

    async def follow(self, session_id: str, tail_bytes: int | None = None) -> SessionLog:
        """The session's followed log: the one already followed, else a new follow from the file's start
        (``tail_bytes`` None) or from its last ``tail_bytes`` (read first, then followed from where it ended)."""
        log = self.logs.get(session_id)
        if log is not None:
            return log
        fut = self._starting.get(session_id)
        if fut is None:
            fut = self._starting[session_id] = asyncio.ensure_future(self._start(session_id, tail_bytes))
            fut.add_done_callback(lambda f: self._starting.pop(session_id, None))
        return await asyncio.shield(fut)

    async def _start(self, session_id: str, tail_bytes: int | None) -> SessionLog:
        if tail_bytes is None:
            log = self.logs[session_id] = SessionLog(session_id)
            await self.client.follow_log(session_id, 0)
            return log
        chunk = await self.client.read_log(session_id, tail_bytes=tail_bytes)
        log = self.logs.setdefault(session_id, read_whole(session_id, chunk))
        await self.client.follow_log(session_id, log.offset, log.inode)
        return log

    async def unfollow(self, session_id: str) -> None:
        """Stop following the session (its log object stays with whoever holds it, no longer fed)."""
        self.logs.pop(session_id, None)
        await self.client.unfollow_log(session_id)

    def forget(self, session_id: str) -> None:
        """Drop the session's log without a request (the host no longer reports it)."""
        self.logs.pop(session_id, None)

    # -------------------------------------------------------------- the link's stream
    def on_log(self, chunk: LogChunk) -> None:
        log = self.logs.get(chunk.session_id)
        if log is None:
            return
        lines = log.feed(chunk)
        for read in list(self.readers):
            try:
                read(log, lines)
            except Exception:  # one reader's bug must not starve the others
                pass

    def on_event(self, event: AgentEvent) -> None:
        if isinstance(event, (LogTruncated, LogRotated)):
            log = self.logs.get(event.session_id)
            if log is not None:
                log.restart(event.file if isinstance(event, LogRotated) else log.inode)


async def probe_health(link: Any, port: int, timeout: float) -> HttpResult:
    """``GET /health`` on 127.0.0.1:``port`` of the host, within ``timeout`` s there (the reply awaited 5 s
    longer); status 200: healthy, 503: warming up, 0: nothing answered."""
    return await HostClient.of(link).http_get(port, "/health", timeout, reply_timeout=timeout + 5)
