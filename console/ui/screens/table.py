"""The base of the full-screen tables behind keys — sessions (``s``), events (``v``), orphans (``o``): a title line,
the table, a detail box about the highlighted row and the footer, refreshed once a second from the app's views.
One layout and one CSS for the three; each subclass says its columns, its rows and its detail."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Static

from console.ui.widgets.footer import QuietFooter
from console.ui.widgets.key_help import help_keys, quit_key


def closing(keys: str) -> list[Binding]:
    """The keys every table ends with (after its own, in the footer's order): ``keys`` back to the GPU panels,
    help and quit."""
    return [
        Binding(keys, "close", "Back", tooltip="back to the GPU panels"),
        *help_keys(),
        quit_key(),
    ]


class TableScreen(Screen):
    """A title, a table of rows, the highlighted row's detail (see the module docstring)."""

    DEFAULT_CSS = """
    TableScreen { layout: vertical; }
    TableScreen .screen-title { height: 1; padding: 0 1; background: $panel; color: $text; text-style: bold; }
    TableScreen DataTable { height: 1fr; }
    TableScreen .detail { height: auto; padding: 0 1; border-top: solid $primary; color: $text; }
    """
    TABLE_ID: ClassVar[str] = "table"
    """The table's id."""
    HEADING: ClassVar[str] = ""
    """The title line until :meth:`refresh_rows` writes one."""
    DETAIL_LINES: ClassVar[int] = 6
    """The detail box's height at most (its text is cut below)."""

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.HEADING, classes="screen-title", markup=False)
            yield DataTable(cursor_type="row", zebra_stripes=True, id=self.TABLE_ID)
            detail = Static("", classes="detail", markup=False)
            detail.styles.max_height = self.DETAIL_LINES
            yield detail
        yield QuietFooter()

    def on_mount(self) -> None:
        self.add_columns(self.table)
        self.refresh_rows()
        self.ticker = self.set_interval(1.0, self.tick)
        self.started()
        self.table.focus()

    def tick(self) -> None:
        """The once-a-second refresh."""
        self.refresh_rows()

    # ---- what each table says
    def add_columns(self, table: DataTable) -> None:
        """Add the table's columns."""
        raise NotImplementedError

    def refresh_rows(self) -> None:
        """Redraw the rows from the views (when they changed) and the title."""
        raise NotImplementedError

    def show_detail(self) -> None:
        """Fill the detail box for the highlighted row."""
        raise NotImplementedError

    def started(self) -> None:
        """Called once the rows are first drawn (before the table takes the focus)."""

    # ---- shared
    @property
    def table(self) -> DataTable:
        return self.query_one(DataTable)

    @property
    def title_box(self) -> Static:
        return self.query_one(".screen-title", Static)

    @property
    def detail_box(self) -> Static:
        return self.query_one(".detail", Static)

    def cursor(self, rows: int) -> int | None:
        """The highlighted row's index when it is one of ``rows`` rows, else None."""
        row = self.table.cursor_row
        return row if rows and row is not None and 0 <= row < rows else None

    def on_data_table_row_highlighted(self) -> None:
        self.show_detail()

    def action_close(self) -> None:
        self.dismiss()
