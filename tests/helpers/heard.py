"""A typed link listener for tests: keeps what a :class:`~console.link.link.HostLink` tells it, as models."""

from __future__ import annotations

from console.link.client import LinkListener
from console.model import AgentEvent, ConnectionInfo, HostSnapshot, LogChunk


class Heard(LinkListener):
    """Every sample, log chunk (of ``session_id`` when given), event and connection state a link told, in order;
    listening from creation when given the ``link``."""

    def __init__(self, link=None, session_id: str | None = None) -> None:
        self.session_id = session_id
        self.samples: list[HostSnapshot] = []
        self.chunks: list[LogChunk] = []
        self.events: list[AgentEvent] = []
        self.states: list[ConnectionInfo] = []
        self.ticks = 0
        if link is not None:
            link.listen(self)

    def on_sample(self, snapshot: HostSnapshot) -> None:
        self.samples.append(snapshot)

    def on_log(self, chunk: LogChunk) -> None:
        if self.session_id is None or chunk.session_id == self.session_id:
            self.chunks.append(chunk)

    def on_event(self, event: AgentEvent) -> None:
        self.events.append(event)

    def on_state(self, connection: ConnectionInfo) -> None:
        self.states.append(connection)

    def on_tick(self) -> None:
        self.ticks += 1

    def text(self) -> str:
        """The log chunks' text, joined."""
        return "".join(c.data for c in self.chunks)

    def kinds(self) -> list[str]:
        """The events' kinds, in order."""
        return [e.kind for e in self.events]
