"""The sessions table (``s``): one row per session and foreign server of every host, current and
ended (the history the run directories keep). ``enter`` opens the session's log and steps, ``a``
acknowledges an ended session (recorded in its run directory; its GPU reads IDLE), ``1``–``9``
sort by a column (again: reversed), ``f`` filters by state."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.binding import Binding
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist

from console.model import HostView, SessionView
from console.ui.format import NA, age_text, clean, gpu_list, short
from console.ui.screens.table import TableScreen, closing

COLUMNS = ["HOST", "SESSION / PID", "STATE", "GPU", "PORT", "AGE", "CAUSE", "FLAGS", "ACK"]
FILTERS = ["all", "live", "failed", "ended"]
"""``f`` cycles through these: every row, servers that run, FAILED only, FAILED or STOPPED."""
LIVE = ("launching", "loading", "ready", "stopping", "foreign", "stale", "unreachable")


def row_key(s: SessionView) -> str:
    return f"{s.host}|{s.session_id or f'pid:{s.launcher_pid}:{s.launcher_start_ticks}'}"


def matches(s: SessionView, flt: str) -> bool:
    if flt == "live":
        return s.state in LIVE
    if flt == "failed":
        return s.state == "failed"
    if flt == "ended":
        return s.state in ("failed", "stopped")
    return True


def sort_value(s: SessionView, col: int, now: float) -> tuple:
    """The value rows are sorted by for column ``col`` (unknowns last)."""
    vals: list = [s.host, s.session_id or f"~{s.launcher_pid}", s.state, s.gpus or [999], s.port or 1 << 20,
                  -(s.started_at or 0.0), s.cause or "~", s.flags_summary, s.acknowledged]
    return (vals[col], s.host, s.session_id or "")


class SessionsScreen(TableScreen):
    """Every session of every host (see the module docstring)."""

    TABLE_ID = "sessions"
    DETAIL_LINES = 6
    BINDINGS = [
        Binding("enter", "open", "Log & steps", tooltip="open the session's log and its steps"),
        Binding("a", "ack", "Acknowledge", tooltip="acknowledge an ended session: its GPU reads IDLE"),
        Binding("f", "filter", "Filter", tooltip="filter by state: all → live → failed → ended"),
        *[Binding(str(i), f"sort({i - 1})", f"Sort by {c}", show=False) for i, c in enumerate(COLUMNS, 1)],
        *closing("escape,s"),
    ]

    def __init__(self, views: Callable[[], dict[str, HostView]], *, on_open: Callable[[SessionView], None],
                 on_ack: Callable[[SessionView], None], clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.views, self.on_open, self.on_ack, self.clock = views, on_open, on_ack, clock
        self.rows: list[SessionView] = []
        self.sort_col, self.reverse = 5, False
        self.flt = "all"
        self._shown: list = []

    def add_columns(self, table: DataTable) -> None:
        for i, c in enumerate(COLUMNS, 1):
            table.add_column(f"{c} [{i}]" if i <= 9 else c, key=c)

    # ---- rows
    def sessions(self) -> list[SessionView]:
        out: list[SessionView] = []
        for view in self.views().values():
            out.extend(s for s in view.sessions if not s.pending or s.session_id)
        return out

    def refresh_rows(self, force: bool = False) -> None:
        now = self.clock()
        rows = [s for s in self.sessions() if matches(s, self.flt)]
        rows.sort(key=lambda s: sort_value(s, self.sort_col, now), reverse=self.reverse)
        shown = [(row_key(s), s.state, s.cause, s.acknowledged, s.started_at, s.ended_at) for s in rows]
        arrow = "▼" if self.reverse else "▲"
        self.title_box.update(
            f"Sessions · {len(rows)} shown · filter {self.flt} (f) · sorted by {COLUMNS[self.sort_col]} {arrow} (1-9)")
        if shown == self._shown and not force:
            self._age_only(rows, now)
            return
        t = self.table
        keep = self.selected()
        self._shown, self.rows = shown, rows
        t.clear()
        for s in rows:
            t.add_row(*self.cells(s, now), key=row_key(s))
        if keep is not None:
            idx = next((i for i, s in enumerate(rows) if row_key(s) == row_key(keep)), None)
            if idx is not None:
                t.move_cursor(row=idx)
        self.show_detail()

    def _age_only(self, rows: list[SessionView], now: float) -> None:
        t = self.table
        for s in rows:
            try:
                t.update_cell(row_key(s), "AGE", self.age(s, now))
            except (CellDoesNotExist, KeyError):  # a row replaced meanwhile: redrawn next tick
                continue

    @staticmethod
    def age(s: SessionView, now: float) -> str:
        return age_text(now - s.up_since) if s.up_since else NA

    def cells(self, s: SessionView, now: float) -> list[str]:
        who = clean(s.session_id, 80) if s.session_id else f"pid {s.launcher_pid or NA}"
        ack = "✓ " + time.strftime("%H:%M", time.localtime(s.acknowledged_at)) if s.acknowledged_at else (
            "✓" if s.acknowledged else "")
        return [clean(s.host, 30), who, s.state.upper(), gpu_list(s.gpus), str(s.port or NA), self.age(s, now),
                s.cause or "", short(clean(s.flags_summary), 48), ack]

    def selected(self) -> SessionView | None:
        i = self.cursor(len(self.rows))
        return None if i is None else self.rows[i]

    def show_detail(self) -> None:
        s = self.selected()
        box = self.detail_box
        if s is None:
            box.update("no sessions" + ("" if self.flt == "all" else f" match the filter '{self.flt}'"))
            return
        parts = [f"{s.state.upper()}" + (f": {s.cause}" if s.cause else "") + (f" — {clean(s.line)}" if s.line else "")]
        if s.hint:
            parts.append(f"hint: {clean(s.hint)}")
        if s.argv:
            parts.append("$ " + short(clean(" ".join(s.argv)), 300))
        box.update("\n".join(parts))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        self._sort(event.column_index)

    # ---- actions
    def action_sort(self, col: int) -> None:
        """Sort by column ``col`` (0-based); the same column again reverses the order."""
        self._sort(col)

    def _sort(self, col: int) -> None:
        if col == self.sort_col:
            self.reverse = not self.reverse
        else:
            self.sort_col, self.reverse = col, False
        self.refresh_rows(force=True)

    def action_filter(self) -> None:
        self.flt = FILTERS[(FILTERS.index(self.flt) + 1) % len(FILTERS)]
        self.refresh_rows(force=True)

    def action_open(self) -> None:
        s = self.selected()
        if s is None:
            return
        self.dismiss()
        self.on_open(s)

    def action_ack(self) -> None:
        s = self.selected()
        if s is None:
            return
        if s.state not in ("failed", "stopped") or not s.session_id:
            self.app.notify(f"only an ended session can be acknowledged ({s.state.upper()} is not)",
                            severity="warning", markup=False)
            return
        if s.acknowledged:
            self.app.notify(f"session {s.session_id} is already acknowledged", markup=False)
            return
        self.on_ack(s)
        self.refresh_rows()
        self.app.notify(f"acknowledged {s.session_id}: GPU {gpu_list(s.gpus)} reads IDLE", markup=False)
