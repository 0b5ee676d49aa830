"""A launch's watch on its own session: its followed log, its end, and a dropped link waited out."""

from __future__ import annotations

import asyncio
import time

from console.link.client import HostClient, LinkListener
from console.link.errors import LinkDown, RequestError
from console.link.link import HostLink
from console.model import AgentEvent, Classification, ConnectionInfo, ExitRecord, SessionEnded
from console.ops.session_log import SessionLog, SessionLogs


class SessionWatch(LinkListener):
    """Follows one session's log and exit while an operation runs.

    The log is the link's one followed :class:`~console.ops.session_log.SessionLog` of the session (shared
    with the tracker); ``changed`` is set by each of its chunks, by the session's events and by a change of
    the link's state; ``exited`` once the session ended (``exit``: its record, when it has one)."""

    def __init__(self, link: HostLink, session_id: str):
        self.link, self.sid = link, session_id
        self.client = HostClient.of(link)
        self.logs = SessionLogs.of(link)
        self._log = SessionLog(session_id)  # until the session's log is followed: an empty one
        self.exited = asyncio.Event()
        self.exit: ExitRecord | None = None
        self.changed = asyncio.Event()
        link.listen(self)
        self.logs.readers.append(self._read)

    async def follow(self) -> None:
        """Follow the session's log from its start (or share the follow already running)."""
        self._log = await self.logs.follow(self.sid)

    @property
    def log(self) -> SessionLog:
        """The session's followed log (whoever on this link follows it), kept once seen; empty before."""
        shared = self.logs.get(self.sid)
        if shared is not None:
            self._log = shared
        return self._log

    def _read(self, log: SessionLog, lines: list[str]) -> None:
        if log.session_id == self.sid:
            self.changed.set()

    def on_event(self, event: AgentEvent) -> None:
        if getattr(event, "session_id", None) != self.sid:
            return
        if isinstance(event, SessionEnded):
            self.ended(event.exit)
        self.changed.set()

    def on_state(self, connection: ConnectionInfo) -> None:
        self.changed.set()

    def ended(self, exit: ExitRecord | None) -> None:
        """The session's server ended (``exit``: its record, None when unknown)."""
        self.exit = exit
        self.exited.set()

    @property
    def log_bytes(self) -> int:
        """Bytes of this session's log received so far."""
        return self.log.received

    def classification(self, text: str | None = None) -> Classification:
        """The session's state from its followed log (or from ``text``, a fresh read of it), its exit record
        and the first death of its processes (which decides the cause)."""
        info = next((s for s in self.link.snapshot().sessions if s.session_id == self.sid), None)
        first = info.first_abnormal_exit if info is not None else None
        if text is None:
            return self.log.result(self.exit, first)
        from console.core.classify import classify

        return classify(text, self.exit, first)

    async def reattach(self, deadline: float) -> bool:
        """Wait for a kept-up link to reconnect, then learn from the run dir whether the server ended."""
        link = self.link
        if not link.running:
            return False
        try:
            await asyncio.wait_for(link.connected.wait(), max(0.1, deadline - time.monotonic()))
            sessions = await self.client.sessions()
        except (asyncio.TimeoutError, LinkDown, RequestError):
            return False
        mine = next((x for x in sessions if x.session_id == self.sid), None)
        if mine and (mine.exit or not mine.server_alive):
            self.ended(mine.exit)
        return True

    def close(self) -> None:
        self.link.unlisten(self)
        if self._read in self.logs.readers:
            self.logs.readers.remove(self._read)
