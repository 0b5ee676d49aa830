"""A session-state badge, and the rule that decides what it says.

A badge is green only when verified now: a READY session on a host whose sample is stale
reads STALE, and every session on an unreachable host reads UNREACHABLE.
"""

from __future__ import annotations

from textual.widgets import Static

from console.core.text import launch_progress
from console.model import HostSnapshot, SessionView

DOWN = {"unreachable", "failed", "closed"}
BADGE_KINDS = (
    "idle", "launching", "loading", "ready", "failed", "stopping", "stopped",
    "foreign", "stale", "unreachable",
)


def staleness(snap: HostSnapshot, now: float, interval: float) -> str:
    """"fresh", "amber" (older than 3 intervals) or "red" (older than 10 s, or disconnected)."""
    if snap.connection.state != "connected" and snap.connection.state != "connecting":
        return "red"
    age = snap.age_s(now)
    if age is None:
        return "amber" if snap.connection.state == "connecting" else "red"
    if age > 10:
        return "red"
    return "amber" if age > 3 * interval else "fresh"


def badge_for(session: SessionView | None, snap: HostSnapshot, now: float, interval: float) -> tuple[str, str]:
    """(label, kind) for a GPU's session, given how fresh the host's data is."""
    if snap.connection.state in DOWN:
        return "UNREACHABLE", "unreachable"
    state = session.state if session is not None else "idle"
    if state not in ("failed", "stopped") and staleness(snap, now, interval) != "fresh":
        return "STALE", "stale"
    if session is None:
        return "IDLE", "idle"
    if state == "launching":
        return f"LAUNCHING {launch_progress(session.step)}", state
    if state == "failed":
        return f"FAILED: {session.cause or 'unknown'}", state
    return state.upper(), state


class Badge(Static):
    """A coloured label; its kind is a CSS class ``badge-<kind>``."""

    def __init__(self, label: str = "IDLE", kind: str = "idle", **kw) -> None:
        super().__init__(label, markup=False, classes=f"badge badge-{kind}", **kw)
        self._state = (label, kind)

    def set(self, label: str, kind: str) -> None:
        if (label, kind) == self._state:
            return
        self.remove_class(f"badge-{self._state[1]}")
        self.add_class(f"badge-{kind}")
        self._state = (label, kind)
        self.update(label)

    @property
    def label(self) -> str:
        return self._state[0]
