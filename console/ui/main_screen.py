"""The GPU panels' screen, in its own module so the app and the screens it opens can both name it
(``console.ui.app`` imports the workflow screens; they check whether this screen is on top)."""

from __future__ import annotations

from textual.binding import Binding
from textual.screen import Screen


class MainScreen(Screen):
    """The default screen; ``tab`` moves between GPU panels rather than every widget."""

    BINDINGS = [
        Binding("tab", "app.next_panel(1)", "Next GPU", show=False),
        Binding("shift+tab", "app.next_panel(-1)", "Previous GPU", show=False),
        Binding("left", "app.move_panel(-1, 0)", "Previous GPU", show=False),
        Binding("right", "app.move_panel(1, 0)", "Next GPU", show=False),
        Binding("up", "app.move_panel(0, -1)", "GPU above", show=False),
        Binding("down", "app.move_panel(0, 1)", "GPU below", show=False),
    ]
