"""Probe a session's ``/server_info`` and ``/model_info`` through the host link (never as a condition of READY).

The console reads them once after a session is READY, then every :data:`~console.core.server_info.PROBE_EVERY_S`
seconds (:class:`FactsProbe`), off the UI thread (the link's ``http_get`` runs on the agent, the parse here is
tiny). Anything but a 200 with a JSON object — a 404 of an older release, no connection, garbage — reads as not
offered; the probe never raises for it and never marks the session.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from console.core.server_info import MODEL_INFO_PATH, PROBE_EVERY_S, SERVER_INFO_PATH, ServerFacts, facts, json_object
from console.link.client import HostClient
from console.link.errors import LinkDown, RequestError
from console.link.link import HostLink
from console.model import GpuCurrent

TIMEOUT_S = 2.0
"""Each GET's limit on the host."""


async def read_json(client: HostClient, port: int, path: str, timeout: float = TIMEOUT_S) -> dict | None:
    """The JSON object a GET of ``path`` answers (None: not offered — not 200, no connection, not an object)."""
    try:
        r = await client.http_get(port, path, timeout, audit=False)
    except (RequestError, LinkDown, TimeoutError):  # the host's answer, its link or its reply is gone: nothing read
        return None
    return json_object(r.status, r.body)


async def probe(client: HostClient, port: int, *, clock: Callable[[], float] = time.time) -> ServerFacts:
    """One read of both endpoints of the server on ``port``."""
    si = await read_json(client, port, SERVER_INFO_PATH)
    mi = await read_json(client, port, MODEL_INFO_PATH)
    return facts(clock(), si, mi)


def adaptive(flags: list[str] | tuple[str, ...]) -> bool:
    """A session whose flags turn on adaptive speculative decoding (its step count changes while it runs)."""
    return any(f == "--speculative-adaptive" or f.startswith("--speculative-adaptive=") for f in flags)


class FactsProbe:
    """Per session: the latest facts and when the next read is due (first read at READY, then the cadence).

    Only a session with ``--speculative-adaptive`` is re-read at the cadence (its spec figures move); any other
    session keeps the one read after READY (version, model do not change while it runs) — unless ``every_session``
    (the TUI's tracker: its panels show the accept length, which moves for every session, each with its age).
    A read that offers nothing after one that did keeps the older facts: they age, and read stale past three
    periods (never a blank that looks like a server without the endpoints)."""

    def __init__(self, every_s: float = PROBE_EVERY_S, *, every_session: bool = False) -> None:
        self.every_s, self.every_session = every_s, every_session
        self.latest: dict[str, ServerFacts] = {}
        self.read_at: dict[str, float] = {}
        """When each session was last read (its facts may be older: see the class doc)."""

    def due(self, session_id: str, flags: list[str] | tuple[str, ...], now: float) -> bool:
        last = self.read_at.get(session_id, self.latest[session_id].at if session_id in self.latest else None)
        if last is None:
            return True
        return (self.every_session or adaptive(flags)) and now - last >= self.every_s

    async def tick(self, client: HostClient, session_id: str, port: int, flags: list[str] | tuple[str, ...],
                   *, clock: Callable[[], float] = time.time) -> ServerFacts | None:
        """Read a READY session's facts when due; the latest facts (None: never read)."""
        if self.due(session_id, flags, clock()):
            f = await probe(client, port, clock=clock)
            self.read_at[session_id] = f.at
            last = self.latest.get(session_id)
            if f.offered or last is None or not last.offered:
                self.latest[session_id] = f
        return self.latest.get(session_id)

    def forget(self, session_id: str) -> None:
        self.latest.pop(session_id, None)
        self.read_at.pop(session_id, None)


def facts_json(f: ServerFacts, now: float) -> dict:
    """One session's facts for ``status --json`` and ``sessions --json``: each with the read's time and age, ``stale`` past three periods;
    ``offered`` False (a 404, no connection, garbage) is not an error."""
    return dict(f.model_dump(mode="json"), offered=f.offered, age_s=round(f.age(now), 3), stale=f.stale(now))


async def ready_facts(client: HostClient, sessions: list, *, probes: FactsProbe | None = None,
                      clock: Callable[[], float] = time.time) -> dict[str, ServerFacts]:
    """The facts of each READY session with a port (``SessionView``-like: ``session_id``, ``state``, ``port``,
    ``argv``), read when due by ``probes`` (a fresh one: read now)."""
    probes = probes or FactsProbe()
    out: dict[str, ServerFacts] = {}
    for s in sessions:
        if s.state != "ready" or s.port is None or not s.session_id:
            continue
        f = await probes.tick(client, s.session_id, int(s.port), s.argv, clock=clock)
        if f is not None:
            out[s.session_id] = f
    return out


async def link_facts(link: HostLink, current: list[GpuCurrent]) -> dict[str, ServerFacts]:
    """The facts of each GPU's current READY session (``current_by_gpu``), read now over ``link`` (``status``,
    ``sessions``; never a condition of READY): {} when the link is down or goes."""
    if link.chan is None:
        return {}
    try:
        return await ready_facts(link.client, [c.session for c in current if c.session is not None])
    except (TimeoutError, LinkDown, RequestError):
        return {}


def attach_facts(rows: list[dict], facts: dict[str, ServerFacts], now: float) -> None:
    """Each JSON row (a dict with ``session_id``) of a session in ``facts`` gets its ``server_facts``
    (:func:`facts_json`)."""
    for row in rows:
        f = facts.get(row.get("session_id") or "")
        if f is not None:
            row["server_facts"] = facts_json(f, now)
