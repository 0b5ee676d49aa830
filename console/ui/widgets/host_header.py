"""One line per host: connection, RTT, sample age (coloured by staleness), sessions by state."""

from __future__ import annotations

from collections import Counter

from textual.content import Content
from textual.widgets import Static

from console.model import HostSnapshot, SessionView
from console.ui.format import age_text, clean, na, short
from console.ui.widgets.badge import staleness

_AGE_STYLE = {"fresh": "$text-success", "amber": "$text-warning", "red": "$text-error"}


class HostHeader(Static):
    """The header of one host's section."""

    def __init__(self, **kw) -> None:
        super().__init__("", classes="host-header", **kw)
        self._level = ""

    def show(self, snap: HostSnapshot, sessions: list[SessionView], now: float, interval: float) -> str:
        """Redraw; returns the staleness level ("fresh", "amber", "red")."""
        level = staleness(snap, now, interval)
        conn = snap.connection
        counts = Counter(s.state for s in sessions)
        by_state = " · ".join(f"{k.upper()} {n}" for k, n in sorted(counts.items())) or "no servers"
        detail = ""
        if conn.error and conn.state != "connected":
            detail = f" — {short(clean(conn.error), 80)}"
        st = _AGE_STYLE[level]
        text = Content.from_markup(
            f"[b]$name[/b]  [{st}]$conn[/]  rtt $rtt  age [{st}]$age[/]  $src  ·  $states$detail",
            name=snap.name, conn=conn.state, rtt=na(None if conn.rtt_ms is None else round(conn.rtt_ms), "{} ms"),
            age=age_text(snap.age_s(now)), src=snap.gpu_source,
            states=by_state, detail=detail,
        )
        if text != getattr(self, "_text", None):  # one line high in the TCSS: never a layout pass
            self._text = text
            self.update(text, layout=False)
        if level != self._level:
            self.remove_class(f"stale-{self._level}")
            self.add_class(f"stale-{level}")
            self._level = level
        return level
