"""The fleet at a glance: one row per host, trouble first (pure; ``status --brief`` and the TUI's fleet screen).

A row says the host's connection, the age of its last sample, each GPU as one glyph of its badge state (the
panels' rule: ``console.core.current.current_by_gpu`` and ``badge_for``), the worst state of its sessions, its
power drawn of the power it may draw, its proven orphans and its advice. Rows are sorted by the trouble they
show, in this order: a FAILED session, an UNREACHABLE host, a STALE one, orphans, advice; then the others; by
host name within each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import Field

from console.core.current import DOWN, badge_for, current_by_gpu, staleness
from console.core.events import proven_orphans
from console.model import Frozen, HostView

GLYPHS: dict[str, str] = {
    "ready": "●", "loading": "◐", "launching": "◔", "stopping": "◑", "failed": "✗", "stopped": "○",
    "idle": "·", "foreign": "◆", "stale": "?", "unreachable": "×",
}
"""One glyph per badge kind (``console.core.current.BADGE_KINDS``)."""

TROUBLE = ("FAILED", "UNREACHABLE", "STALE", "ORPHANS", "ADVICE")
"""The kinds of trouble a row can show, most urgent first: the sort order."""

WORST = ("failed", "unreachable", "stale", "stopping", "launching", "loading", "foreign", "ready", "stopped", "idle")
"""Session states from the worst to the best: a host's row names the first one any of its GPUs is in."""


class FleetGpu(Frozen):
    """One GPU of a fleet row: its index, its badge kind and label (``FAILED: gpu_oom``, ``READY``)."""

    index: int
    kind: str
    label: str

    @property
    def glyph(self) -> str:
        return GLYPHS.get(self.kind, "?")


class FleetRow(Frozen):
    """One host of the fleet overview."""

    host: str
    connection: str
    """The link's state (connected, stale, reconnecting, unreachable, failed, ...)."""
    error: str | None = None
    age_s: float | None = None
    """Seconds since the last sample arrived (None: none yet)."""
    gpus: list[FleetGpu] = Field(default_factory=list)
    worst: str = "idle"
    """The worst badge kind of its GPUs (``WORST`` order)."""
    worst_label: str = "IDLE"
    power_w: float | None = None
    power_limit_w: float | None = None
    orphans: int = 0
    advice: int = 0
    trouble: str | None = None
    """The most urgent of ``TROUBLE`` this host shows, None when it shows none."""

    @property
    def glyphs(self) -> str:
        return "".join(g.glyph for g in self.gpus)

    @property
    def rank(self) -> int:
        return TROUBLE.index(self.trouble) if self.trouble in TROUBLE else len(TROUBLE)


def fleet_row(view: HostView, now: float, interval: float) -> FleetRow:
    """The row of one host's view (its ``current`` when computed, else derived from its sessions)."""
    snap = view.snapshot
    indices = [g.index for g in snap.gpus]
    current = view.current or current_by_gpu(view.sessions, indices)
    by_gpu = {c.index: c for c in current}
    gpus = []
    for i in indices:
        label, kind = badge_for(by_gpu[i].session if i in by_gpu else None, snap, now, interval)
        gpus.append(FleetGpu(index=i, kind=kind, label=label))
    state = snap.connection.state
    if not gpus and state in DOWN:
        worst, worst_label = "unreachable", "UNREACHABLE"
    else:
        worst_gpu = min(gpus, key=lambda g: WORST.index(g.kind) if g.kind in WORST else len(WORST), default=None)
        worst, worst_label = (worst_gpu.kind, worst_gpu.label) if worst_gpu else ("idle", "IDLE")
    orphans = len([o for o in proven_orphans(snap) if o.held_mib > 0]) if state not in DOWN else 0
    powers = [g.power_w for g in snap.gpus if g.power_w is not None]
    limits = [g.power_limit_w for g in snap.gpus if g.power_limit_w is not None]
    trouble = ("FAILED" if any(g.kind == "failed" for g in gpus) else
               "UNREACHABLE" if state in DOWN or state in ("reconnecting", "connecting") else
               "STALE" if state == "stale" or any(g.kind == "stale" for g in gpus) else
               "ORPHANS" if orphans else "ADVICE" if view.advice else None)
    return FleetRow(host=snap.name, connection=state, error=snap.connection.error, age_s=snap.age_s(now),
                    gpus=gpus, worst=worst, worst_label=worst_label, power_w=sum(powers) if powers else None,
                    power_limit_w=sum(limits) if limits else None, orphans=orphans, advice=len(view.advice),
                    trouble=trouble)


class RowCache:
    """:func:`fleet_row` of each host, kept while its view is the same object: a host whose view did not change
    costs a lookup, not a row (issue 31: a full pass at 512 hosts is 50 ms or more, and most hosts of a large fleet
    send nothing new between two refreshes of the overview).

    ``fleet_row`` depends on the time only through the sample's age and :func:`~console.core.current.staleness`
    (the badges): a kept row is used again while the staleness is the same, with its ``age_s`` brought to ``now``.
    """

    def __init__(self) -> None:
        self._rows: dict[str, tuple[HostView, str, float, FleetRow]] = {}

    def rows(self, views: Mapping[str, HostView], now: float, interval: float) -> list[FleetRow]:
        """One row per view (in the views' order), as ``[fleet_row(v, now, interval) for v in views.values()]``."""
        out = []
        kept = self._rows
        fresh: dict[str, tuple[HostView, str, float, FleetRow]] = {}
        for host, view in views.items():
            snap = view.snapshot
            stale = staleness(snap, now, interval)
            was = kept.get(host)
            if was is not None and was[0] is view and was[1] == stale and was[2] == interval:
                row = was[3]
                age = snap.age_s(now)
                if row.age_s != age:
                    row = row.model_copy(update={"age_s": age})
            else:
                row = fleet_row(view, now, interval)
            fresh[host] = (view, stale, interval, row)
            out.append(row)
        self._rows = fresh  # a host gone from the views is forgotten
        return out


def sort_rows(rows: Iterable[FleetRow]) -> list[FleetRow]:
    """Trouble first (``TROUBLE`` order), then the rest; by host name within each."""
    return sorted(rows, key=lambda r: (r.rank, r.host))


def matches(row: FleetRow, text: str) -> bool:
    """The row holds ``text`` (case-insensitive) in its host name, connection, worst state or trouble."""
    t = text.strip().lower()
    return not t or any(t in (x or "").lower() for x in (row.host, row.connection, row.worst_label, row.trouble))


def age_text(age_s: float | None) -> str:
    if age_s is None:
        return "never"
    return f"{age_s:.1f}s" if age_s < 10 else f"{age_s:.0f}s" if age_s < 600 else f"{age_s / 60:.0f}m"


def power_text(row: FleetRow) -> str:
    if row.power_w is None:
        return "- W"
    return f"{row.power_w:.0f}" + (f"/{row.power_limit_w:.0f} W" if row.power_limit_w is not None else " W")


def brief_line(row: FleetRow, host_width: int = 0) -> str:
    """One line: ``host  connection  age  glyphs  worst state  power  [trouble] orphans N advice N``."""
    parts = [row.host.ljust(host_width), row.connection.ljust(12), age_text(row.age_s).rjust(6),
             (row.glyphs or "no GPUs").ljust(8), row.worst_label, power_text(row)]
    extra = ([f"[{row.trouble}]"] if row.trouble else []) + ([f"orphans {row.orphans}"] if row.orphans else []) \
        + ([f"advice {row.advice}"] if row.advice else [])
    return "  ".join(parts + extra).rstrip()


def legend() -> str:
    """What each glyph means, one line."""
    return "  ".join(f"{g} {k}" for k, g in GLYPHS.items())
