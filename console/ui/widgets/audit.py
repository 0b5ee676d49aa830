"""Every remote command the console ran, with its result (newest last, bounded)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from console.model import AuditEntry
from console.ui.format import clean, hms, na, short

MAX_ROWS = 1000


class AuditPane(DataTable):
    """A table of :class:`AuditEntry` rows; toggled with ``a``."""

    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kw)
        self._n = 0

    COLUMNS = ("time", "host", "op", "ok", "ms", "args / result")

    def on_mount(self) -> None:
        if not self.columns:
            self.add_columns(*self.COLUMNS)

    def add_entry(self, e: AuditEntry) -> None:
        if not self.columns:  # an entry before the pane is mounted (a large fleet's start: thousands of panels
            self.add_columns(*self.COLUMNS)  # compose first) found no columns: "More values than columns"
        ok = "?" if e.ok is None else ("ok" if e.ok else "FAIL")
        args = " ".join(f"{k}={v}" for k, v in e.args.items())
        detail = short(clean(" → ".join(x for x in (args, e.result or "") if x)), 200)
        cells = (hms(e.at), clean(e.host, 40), clean(e.op, 40), ok,
                 na(None if e.elapsed_ms is None else round(e.elapsed_ms)), detail)
        self.add_row(*(Text(c) for c in cells), key=str(self._n))  # Text: remote text is never markup
        self._n += 1
        if self.row_count > MAX_ROWS:
            self.remove_row(str(self._n - MAX_ROWS - 1))
        if not self.has_focus:
            self.move_cursor(row=self.row_count - 1, animate=False)
