"""A DataTable's rows set aside and put back whole, without adding them again (issue 31, the fleet overview).

Adding 511 rows back to a ``DataTable`` (a filter cleared at 512 hosts) costs each row's ``add_row`` and then, on
idle, a measure of every cell of every new row: 150-300 ms a key. :func:`set_aside` takes the table's rows out (the
table is then empty, its columns and their widths kept, as after ``clear()``) and :func:`put_back` makes them the
table's rows again in O(1): the same data, order and row heights, measured already. Any rows the table holds when
they are put back are dropped (no ``clear()``: the cursor and scroll stay).

This moves ``DataTable``'s row state (``_data``, ``rows``, ``_row_locations``, the rows and cells waiting for
their measure) and drops its render caches as ``clear()`` does: written against Textual 8.2.8 (pinned in
pyproject.toml). The fleet tests cover it (tests/test_ui_fleet.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.widgets import DataTable


@dataclass
class Rows:
    """The row state of a table, set aside."""

    data: dict
    rows: dict
    locations: Any
    new_rows: set
    updated_cells: set


def set_aside(table: DataTable) -> Rows:
    """Take every row out of ``table`` (as ``clear()`` does) and return them, to be put back by :func:`put_back`."""
    kept = Rows(table._data, table.rows, table._row_locations, table._new_rows, table._updated_cells)
    table._data, table.rows, table._new_rows, table._updated_cells = {}, {}, set(), set()
    table.clear()  # resets the (new, empty) row state, the caches, cursor and scroll; the kept dicts are untouched
    return kept


def put_back(table: DataTable, kept: Rows) -> None:
    """Make ``kept`` the rows of ``table`` again (its present rows dropped, not cleared: the cursor keeps its row
    index, clamped to the rows now held)."""
    table._data, table.rows, table._row_locations = kept.data, kept.rows, kept.locations
    table._new_rows |= kept.new_rows  # a key measured for both is measured again: harmless
    table._updated_cells |= kept.updated_cells
    table._clear_caches()
    table._update_count += 1
    table._require_update_dimensions = True  # the virtual size from these rows, on the table's idle
    table.cursor_coordinate = table.cursor_coordinate  # validated against the rows now held
    table.hover_coordinate = table.hover_coordinate
    table.refresh(layout=True)
    table.check_idle()
