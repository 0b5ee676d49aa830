"""The sessions table (``s``): one row per session and foreign server of every host, current and
ended (the history the run directories keep). ``enter`` opens the session's log and steps, ``a``
acknowledges an ended session (recorded in its run directory; its GPU no longer shows it, and a toast says what
the GPU reads now), ``1``–``9`` sort by a column (again: reversed), ``f`` filters by state. The state and its
cause lead (what is read at 80 columns); HOST is a column only with several hosts. The detail box under the table
shows the whole command line, or as much as fits and that ``enter`` (the full log's banner) shows all of it."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable

from textual.binding import Binding
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist

from console.model import HostView, SessionView
from console.ui.format import NA, age_text, clean, gpu_list, short
from console.ui.screens.table import TableScreen, closing

COLUMNS = ["STATE", "CAUSE", "HOST", "GPU", "SESSION / PID", "AGE", "PORT", "FLAGS", "ACK"]
"""What each row says, the state and its cause first (what an operator reads at 80 columns); HOST only when there
are several hosts (:func:`shown_columns`)."""
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


def shown_columns(hosts: int) -> list[str]:
    """The columns drawn for ``hosts`` hosts: HOST only when there is more than one."""
    return [c for c in COLUMNS if c != "HOST" or hosts > 1]


def sort_value(s: SessionView, col: str, now: float) -> tuple:
    """The value rows are sorted by for column ``col`` (unknowns last)."""
    vals: dict[str, object] = {
        "STATE": s.state, "CAUSE": s.cause or "~", "HOST": s.host, "GPU": s.gpus or [999],
        "SESSION / PID": s.session_id or f"~{s.launcher_pid}", "AGE": -(s.started_at or 0.0),
        "PORT": s.port or 1 << 20, "FLAGS": s.flags_summary, "ACK": s.acknowledged}
    return (vals[col], s.host, s.session_id or "")


def command_lines(argv: list[str], width: int, room: int) -> list[str]:
    """The command line ``$ argv`` in lines of at most ``width`` characters (broken between arguments where it can),
    at most ``room`` of them; when it needs more, the last one ends with how much is left out and where all of it is
    (the full log's banner: ``enter``)."""
    text = "$ " + clean(" ".join(argv))
    width, room = max(20, width), max(1, room)
    lines = textwrap.wrap(text, width, break_on_hyphens=False, drop_whitespace=True) or [text]
    if len(lines) <= room:
        return lines

    def tail(left: int) -> str:
        return f"… (+{left:,} chars: enter shows it all)"
    shown = " ".join(lines[:room - 1])
    last = lines[room - 1][:max(0, width - len(tail(len(text))))].rstrip()  # the count has at most this many digits
    left = len(text) - len(shown) - (1 if shown else 0) - len(last)
    return [*lines[:room - 1], last + tail(left)]


class SessionsScreen(TableScreen):
    """Every session of every host (see the module docstring)."""

    TABLE_ID = "sessions"
    DETAIL_LINES = 6
    BINDINGS = [
        Binding("enter", "open", "Log & steps", tooltip="open the session's log and its steps", priority=True),
        Binding("a", "ack", "Acknowledge", tooltip="acknowledge an ended session: its GPU no longer shows it"),
        Binding("f", "filter", "Filter", tooltip="filter by state: all → live → failed → ended"),
        *[Binding(str(i), f"sort({i - 1})", f"Sort by column {i}", show=False, tooltip="sort by column 1-9 (again: "
                  "reversed)") for i in range(1, len(COLUMNS) + 1)],
        *closing("escape,s"),
    ]

    def __init__(self, views: Callable[[], dict[str, HostView]], *, on_open: Callable[[SessionView], None],
                 on_ack: Callable[[SessionView], None], clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.views, self.on_open, self.on_ack, self.clock = views, on_open, on_ack, clock
        self.rows: list[SessionView] = []
        self.columns = list(COLUMNS)
        """The columns drawn (set when the table is built: HOST only with several hosts)."""
        self.sort_col, self.reverse = COLUMNS.index("AGE"), False
        self.flt = "all"
        self._shown: list = []

    def add_columns(self, table: DataTable) -> None:
        sort_by = self.columns[self.sort_col]
        self.columns = shown_columns(len(self.views()))
        self.sort_col = self.columns.index(sort_by) if sort_by in self.columns else 0
        for i, c in enumerate(self.columns, 1):
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
        rows.sort(key=lambda s: sort_value(s, self.columns[self.sort_col], now), reverse=self.reverse)
        shown = [(row_key(s), s.state, s.cause, s.acknowledged, s.started_at, s.ended_at) for s in rows]
        arrow = "▼" if self.reverse else "▲"
        self.title_box.update(
            f"Sessions · {len(rows)} shown · filter {self.flt} (f) · sorted by {self.columns[self.sort_col]} {arrow} "
            f"(1-{len(self.columns)})")
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
        cells = {"STATE": s.state.upper(), "CAUSE": s.cause or "", "HOST": clean(s.host, 30), "GPU": gpu_list(s.gpus),
                 "SESSION / PID": who, "AGE": self.age(s, now), "PORT": str(s.port or NA),
                 "FLAGS": short(clean(s.flags_summary), 48), "ACK": ack}
        return [cells[c] for c in self.columns]

    def selected(self) -> SessionView | None:
        i = self.cursor(len(self.rows))
        return None if i is None else self.rows[i]

    def show_detail(self) -> None:
        s = self.selected()
        box = self.detail_box
        if s is None:
            box.update("no sessions" + ("" if self.flt == "all" else f" match the filter '{self.flt}'"))
            return
        width = (box.content_size.width or self.app.size.width - 2) - 1
        parts = [short(f"{s.state.upper()}" + (f": {s.cause}" if s.cause else "")
                       + (f" — {clean(s.line)}" if s.line else ""), width)]
        if s.hint:
            parts.append(short(f"hint: {clean(s.hint)}", width))
        if s.argv:  # the whole command line, or as much as fits and where the rest is
            parts += command_lines(s.argv, width, self.DETAIL_LINES - 1 - len(parts))  # 1: the box's top border
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
        self.on_ack(s)  # says what its GPUs read now
        self.refresh_rows()
