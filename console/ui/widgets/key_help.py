"""The key help (``?`` / F1): every key of the screen on top and what it does, over the right side of that screen.

It lies in a layer of its own above the screen (:data:`LAYER`), so opening it lays nothing out again and redraws
nothing under it: Textual's own help panel took a third of the width from the screen, and every GPU panel was laid
out and drawn again at its new width (0.4–0.9 s on a loaded 2-core machine), then its key table was composed again
on every focus change. One :class:`KeyHelp` is mounted per screen, the first time it opens there, and then only
shown and hidden; its text is built from the screen's keys when it opens, and again only when they changed.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

LAYER = "keyhelp"
"""The layer the help lies in, added to its screen's layers when it is first mounted there."""
HEAD = "Keys (? or F1 closes) · ctrl+p: every command by name"


def key_rows(screen: Screen) -> list[tuple[str, str]]:
    """(keys, what they do) for every key of ``screen`` and the app active now, in the order of their bindings; keys
    that do the same (``?`` and F1, ``tab`` and ``→``) share one row. The console's keys say what they do (a
    tooltip); Textual's own (a focused widget's scrolling, copy) are not listed, nor is a key whose action is hidden
    (read-only)."""
    app = screen.app
    rows: dict[str, list[str]] = {}
    for active in screen.active_bindings.values():
        b: Binding = active.binding
        if b.system or not b.tooltip or active.node not in (screen, app):
            continue
        what = b.tooltip
        if not active.enabled:
            what += " (not now)"
        shown = app.get_key_display(b)
        keys = rows.setdefault(what, [])
        if shown not in keys:
            keys.append(shown)
    return [(" ".join(keys), what) for what, keys in rows.items()]


def help_table(rows: list[tuple[str, str]]) -> Table:
    """The rows as a two-column grid: the keys (bold), then what they do (wrapped)."""
    grid = Table.grid(padding=(0, 1), expand=True)
    grid.add_column(max_width=10, style="bold")  # a row of many keys wraps (tab ⇧tab / ← → ↑ ↓)
    grid.add_column(ratio=1)
    for keys, what in rows:
        grid.add_row(Text(keys), Text(what))  # Text: never parsed as markup
    return grid


class KeyHelp(VerticalScroll, can_focus=False):
    """The key help of one screen (see the module docstring); it scrolls when the keys do not fit."""

    DEFAULT_CSS = f"""
    KeyHelp {{
        layer: {LAYER}; dock: right; width: 72; max-width: 100%; height: 100%; margin: 1 0;
        background: $panel; border-left: vkey $primary; padding: 0 1; scrollbar-size-vertical: 1;
    }}
    KeyHelp > .key-help-head {{ color: $text-primary; text-style: bold; margin-bottom: 1; }}
    """

    def __init__(self) -> None:
        super().__init__(id="key-help")
        self.rows: list[tuple[str, str]] | None = None
        """What is shown (None until the first :meth:`show_keys`)."""

    def compose(self) -> ComposeResult:
        yield Static(Text(HEAD), classes="key-help-head")
        yield Static("", classes="key-help-keys")

    def on_mount(self) -> None:
        self.show_keys(self.screen)

    def show_keys(self, screen: Screen) -> None:
        """Show the keys of ``screen`` (the text is built again only when they changed)."""
        rows = key_rows(screen)
        if rows != self.rows:
            self.rows = rows
            self.query_one(".key-help-keys", Static).update(help_table(rows))


def key_help_of(screen: Screen) -> KeyHelp | None:
    """The key help mounted on ``screen``, if any."""
    found = screen.query_children(KeyHelp)
    return found.first() if found else None


def help_open(screen: Screen) -> bool:
    """The key help is shown on ``screen``."""
    box = key_help_of(screen)
    return box is not None and box.display


def toggle_help(screen: Screen, show: bool | None = None) -> bool:
    """Show or hide the key help on ``screen`` (``show``: None toggles); returns whether it is shown now."""
    box = key_help_of(screen)
    want = not (box is not None and box.display) if show is None else show
    if box is None:
        if not want:
            return False
        layers = tuple(screen.styles.layers or ("default",))
        if LAYER not in layers:
            screen.set_styles(f"layers: {' '.join((*layers, LAYER))};")
        screen.mount(KeyHelp())  # its keys are read once it is mounted
        return True
    if want:
        box.show_keys(screen)
    box.display = want
    return want


HELP_TOOLTIP = "every key of this screen and what it does (again: closes)"


def help_keys(ns: str = "app.") -> list[Binding]:
    """``?`` and F1, the key help: the one definition every screen binds (``ns``: the app's namespace, from a screen;
    "" on the app itself). Its footer label says where the keys the footer has no room for are."""
    return [Binding("question_mark", f"{ns}help", "Keys", tooltip=HELP_TOOLTIP, id="help"),
            Binding("f1", f"{ns}help", "Keys", show=False, tooltip=HELP_TOOLTIP, id="help_f1")]


def quit_key(ns: str = "app.") -> Binding:
    """``q``: quit the console, on every screen (modal ones too): one definition."""
    return Binding("q", f"{ns}quit", "Quit", tooltip="quit (servers keep running)", id="quit")
