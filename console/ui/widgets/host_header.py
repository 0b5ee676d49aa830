"""One line per host: connection, RTT, sample age (coloured by staleness), GPUs by current session state.

Fields are joined by `` · `` (a separator that is not only blanks: a run of spaces next to a
coloured span was seen dropped on a real terminal, ``connectedrtt 1 ms``). The counts are
the HostView's, computed below the UI from each GPU's current session only.
"""

from __future__ import annotations

from collections.abc import Mapping

from textual.content import Content
from textual.widgets import Static

from console.model import HostSnapshot
from console.ui.format import age_text, clean, na, short
from console.ui.widgets.badge import staleness

_AGE_STYLE = {"fresh": "$text-success", "amber": "$text-warning", "red": "$text-error"}
_ORDER = ("launching", "loading", "ready", "stopping", "foreign", "failed", "stopped", "stale", "unreachable", "idle")


def counts_text(counts: Mapping[str, int]) -> str:
    """``READY 1 · FAILED 1 · IDLE 2`` in a fixed order (live first, idle last)."""
    keys = sorted(counts, key=lambda k: (_ORDER.index(k) if k in _ORDER else len(_ORDER), k))
    return " · ".join(f"{k.upper()} {counts[k]}" for k in keys if counts[k]) or "no GPUs"


class HostHeader(Static):
    """The header of one host's section."""

    def __init__(self, **kw) -> None:
        super().__init__("", classes="host-header", **kw)
        self._level = ""

    def show(self, snap: HostSnapshot, counts: Mapping[str, int], now: float, interval: float) -> str:
        """Redraw; returns the staleness level ("fresh", "amber", "red")."""
        level = staleness(snap, now, interval)
        conn = snap.connection
        by_state = counts_text(counts)
        detail = ""
        if conn.error and conn.state != "connected":
            detail = f" — {short(clean(conn.error), 80)}"
        st = _AGE_STYLE[level]
        text = Content.from_markup(
            f"[b]$name[/b] · [{st}]$conn[/] · rtt $rtt · age [{st}]$age[/] · $src · $states$detail",
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
