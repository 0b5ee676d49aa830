"""The fleet overview (``f``): one line per host, trouble first, for a fleet too large for GPU panels.

Each row is ``console.core.fleet``'s (the same as ``mtpconsole status --brief``): the link, the age of the last
sample, the GPUs as glyphs of their badge state, the worst session state, the power, and what is wrong (FAILED,
UNREACHABLE, STALE, orphans, advice: the sort order). ``/`` filters the rows (host, link, state or trouble holding
the text), Enter opens the host's GPU panels (the first of its GPUs selected). It is the start screen when the
fleet has at least :data:`FLEET_START_GPUS` GPUs (decided once, when the hosts' first views are in).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from textual import events
from textual.binding import Binding
from textual.content import Content
from textual.screen import Screen
from textual.widgets import DataTable, Input
from textual.widgets.data_table import ColumnKey

from console.core.fleet import FleetRow, RowCache, age_text, legend, matches, power_text, sort_rows
from console.model import HostView
from console.ui.format import clean, short
from console.ui.protocols import Console
from console.ui.screens.table import TableScreen, closing
from console.ui.widgets.table_pages import Rows, put_back, set_aside

FLEET_START_GPUS = 64
"""At this many GPUs (8 hosts of 8) or more the console starts on the fleet overview, not the GPU panels: past
that the panels no longer fit a screen and the trouble is what an operator looks for first."""

COLUMNS = ["HOST", "LINK", "AGE", "GPUS", "WORST", "POWER", "TROUBLE"]

OnOpen = Callable[[str], None]
SCREEN_NAME = "fleet"
"""The overview's name among the app's installed screens (one instance: ``f`` pushes it, Escape pops it)."""


class FleetScreen(TableScreen):
    """Every host, one row each, trouble first; refreshed from the app's views once a second."""

    TABLE_ID = "fleet"
    HEADING = "Fleet: one line per host, trouble first"
    DETAIL_LINES = 4
    DEFAULT_CSS = """
    FleetScreen #fleet-filter { height: 1; border: none; padding: 0 1; display: none; }
    FleetScreen #fleet-filter.shown { display: block; }
    """
    BINDINGS = [
        Binding("enter", "open", "Open", tooltip="the selected host's GPU panels"),
        Binding("slash", "filter", "Filter", tooltip="show only the hosts whose line holds a text"),
        *closing("escape,f"),
    ]

    def __init__(self, views: Callable[[], dict[str, HostView]], on_open: OnOpen, *,
                 clock: Callable[[], float], interval: float) -> None:
        super().__init__()
        self.views, self.on_open, self.clock, self.interval = views, on_open, clock, interval
        self.rows: list[FleetRow] = []
        """The rows the table shows (the filter applied), in its order; :attr:`_drawn` their cells."""
        self.all_rows: list[FleetRow] = []
        """Every host's row, trouble first, as the last refresh found them."""
        self.filter_text = ""
        self._drawn: list[tuple] = []
        self._cells: dict[str, tuple[FleetRow, tuple]] = {}
        self.cache = RowCache()
        self.aside: tuple[Rows, list[FleetRow], list[tuple]] | None = None
        """While a filter shows a few hosts: the whole fleet's table rows (and their rows and cells), set aside."""
        self.col_keys: list[ColumnKey] = []
        self.styled: tuple | None = None
        """The app's theme and CSS generation when the screen was last hidden (:func:`style_generation`)."""

    def compose(self):
        yield from super().compose()
        yield Input(placeholder="filter: host, link, state or trouble (Enter applies, Escape clears)",
                    id="fleet-filter")

    def add_columns(self, table: DataTable) -> None:
        self.col_keys = table.add_columns(*COLUMNS)

    def find(self) -> list[FleetRow]:
        """Every host's row as the views say now, trouble first, the filter not applied (kept: :attr:`all_rows`)."""
        return sort_rows(self.cache.rows(self.views(), self.clock(), self.interval))

    def tick(self) -> None:
        """The once-a-second refresh: nothing while the screen is not on top (it stays installed when closed)."""
        if self.is_active:
            self.refresh_rows()

    def on_screen_suspend(self) -> None:
        self.ticker.pause()
        self.styled = style_generation(self)

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        """Textual restyles a screen shown again, which empties the table's render caches (every visible cell
        rendered again: ~100 ms of ``f`` at 512 hosts); nothing to restyle when no CSS or theme changed meanwhile."""
        if self.styled is not None and self.styled == style_generation(self):
            event.refresh_styles = False
        self.resume()

    def resume(self) -> None:
        """Shown again (``f``): a fresh overview, as a new screen would be: no filter, the rows as they are now."""
        if not self.col_keys:  # the first push: on_mount draws it
            return
        if self.filter_text or self.query_one("#fleet-filter", Input).has_class("shown"):
            self.filter_text = ""
            self.query_one("#fleet-filter", Input).remove_class("shown")
            self.show_rows()  # the kept rows, unfiltered
        self.call_after_refresh(self.refresh_rows)  # the rows kept since the close first, brought up to date next
        self.ticker.reset()  # the next tick a second from now (a resumed timer ticks at once: before that frame)
        self.table.focus()

    def refresh_rows(self) -> None:
        """The rows from the views now (:meth:`find`), filtered, drawn."""
        self.all_rows = self.find()
        if len(self._cells) > len(self.all_rows):  # hosts gone from the views: their cells forgotten
            hosts = {r.host for r in self.all_rows}
            self._cells = {h: c for h, c in self._cells.items() if h in hosts}
        self.show_rows()

    def show_rows(self) -> None:
        """:attr:`all_rows` (as the last :meth:`refresh_rows` found them) through the filter, drawn: what a key that
        changes only the filter shows at once, no host's row computed again (the next tick brings them up to date)."""
        rows = [r for r in self.all_rows if matches(r, self.filter_text)]
        cells = [self.cells(r) for r in rows]
        trouble = sum(1 for r in rows if r.trouble)
        self.title_box.update(f"Fleet: {len(rows)} host(s)" + (f" matching {self.filter_text!r}" if self.filter_text
                                                               else "") + f", {trouble} with trouble (first)")
        keep = self.selected()
        if self.aside is not None and not self.filter_text:  # the whole fleet again: its rows put back as they were
            kept, self.rows, self._drawn = self.aside
            self.aside = None
            put_back(self.table, kept)
        if cells != self._drawn:
            self.redraw(rows, cells)
            self.rows, self._drawn = rows, cells
        if keep is not None:
            idx = next((i for i, r in enumerate(rows) if r.host == keep.host), None)
            if idx is not None and idx != self.table.cursor_row:
                self.table.move_cursor(row=idx)
        self.show_detail()

    def cells(self, r: FleetRow) -> tuple:
        """The table's cells of a row (the same row object: the same tuple, not made again)."""
        was = self._cells.get(r.host)
        if was is not None and was[0] is r:
            return was[1]
        c = (clean(r.host, 40), r.connection, age_text(r.age_s), r.glyphs or "-", short(clean(r.worst_label), 40),
             power_text(r), " ".join(x for x in (r.trouble or "", f"orphans {r.orphans}" if r.orphans else "",
                                                 f"advice {r.advice}" if r.advice else "") if x))
        self._cells[r.host] = (r, c)
        return c

    def redraw(self, rows: list[FleetRow], cells: list[tuple]) -> None:
        """Bring the table from :attr:`_drawn` to ``cells`` in place (at 512 hosts a clear and 512 new rows, each
        measured again, cost 150-300 ms a key): a changed cell is updated, a host no longer shown removed (or, when
        most go, the few left added to an emptied table: the whole fleet's rows set aside, to be put back when the
        filter is cleared), a new one added, and the order set by a sort."""
        t = self.table
        drawn = dict(zip((r.host for r in self.rows), self._drawn))
        now = {r.host: c for r, c in zip(rows, cells)}
        gone = [h for h in drawn if h not in now]
        if len(gone) > len(now) or len({c[0] for c in cells}) < len(cells):
            if self.aside is None and self.filter_text and len({c[0] for c in cells}) == len(cells):
                self.aside = (set_aside(t), self.rows, self._drawn)
            else:
                t.clear()
            drawn = {}
        else:
            for h in gone:
                t.remove_row(h)
                del drawn[h]
        for h, c in now.items():
            before = drawn.get(h)
            if before is None:
                t.add_row(*c, key=h)
            elif before != c:
                for col, (a, b) in enumerate(zip(before, c)):
                    if a != b:
                        t.update_cell(h, self.col_keys[col], b, update_width=True)
        if [row.key.value for row in t.ordered_rows] != list(now):
            order = {c[0]: i for i, c in enumerate(cells)}  # the HOST cell: one per host (clean keeps them apart)
            t.sort(self.col_keys[0], key=lambda cell: order[cell])

    def selected(self) -> FleetRow | None:
        i = self.cursor(len(self.rows))
        return None if i is None else self.rows[i]

    def show_detail(self) -> None:
        r = self.selected()
        if r is None:
            self.detail_box.update("no host matches the filter" if self.filter_text else "no hosts")
            return
        gpus = "  ".join(f"{g.index}:{g.glyph} {short(clean(g.label), 30)}" for g in r.gpus) or "no GPUs"
        lines = [f"{clean(r.host)}: {r.connection}" + (f" — {short(clean(r.error), 160)}" if r.error else ""), gpus,
                 legend()]
        self.detail_box.update(Content("\n".join(lines)))

    def action_open(self) -> None:
        r = self.selected()
        if r is None:
            return
        app = self.app
        self.dismiss()
        app.call_after_refresh(self.on_open, r.host)  # once the GPU panels are the screen again

    def on_data_table_row_selected(self) -> None:
        """Enter on a row (the table takes the key and says so): open that host."""
        self.action_open()

    def action_filter(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        box.add_class("shown")
        box.value = self.filter_text
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.filter_text = event.value.strip()
        event.input.remove_class("shown")
        self.show_rows()
        self.table.focus()

    def action_close(self) -> None:
        """Escape (or ``f``): first clears a filter being typed or applied, then goes back to the GPU panels."""
        box = self.query_one("#fleet-filter", Input)
        if box.has_focus or self.filter_text:
            self.filter_text = ""
            box.remove_class("shown")
            self.show_rows()
            self.table.focus()
        else:
            self.dismiss()


def open_host(app: Console, host: str) -> None:
    """Enter on a fleet row: the GPU panels, with the first GPU of ``host`` selected and in view."""
    panels = [p for p in app.main.panels() if p.host == host]
    if panels:
        app.main.select(panels[0])
        panels[0].focus()
        panels[0].scroll_visible()


def style_generation(screen: Screen) -> tuple:
    """What a screen's styles depend on beside its own nodes: the theme and the stylesheet's rule-set count."""
    return screen.app.theme, getattr(screen.app.stylesheet, "generation", None)


def show_fleet(app: Console) -> None:
    """Push the fleet overview over the GPU panels (only from them: never over a form or another table)."""
    if app.main.is_current:
        if not app.is_screen_installed(SCREEN_NAME):  # one overview for the app's life, pushed and popped
            app.install_screen(FleetScreen(lambda: app.views, lambda host: open_host(app, host), clock=app.clock,
                                           interval=app.interval), SCREEN_NAME)
        app.push_screen(app.get_screen(SCREEN_NAME))


def start_rule(app: Console) -> Callable[[], bool]:
    """The start-screen rule, as a check the app calls until it returns True: once every host has sent its first
    view (or 10 s passed), show the fleet overview when the fleet has :data:`FLEET_START_GPUS` GPUs or more."""
    t0 = time.monotonic()

    def check() -> bool:
        views = app.views
        if len(views) < len(app.backend.hosts) and time.monotonic() - t0 < 10:
            return False
        if sum(len(v.snapshot.gpus) for v in views.values()) >= FLEET_START_GPUS:
            show_fleet(app)
        return True
    return check
