"""The operator's navigation around the lifecycle: the sessions table (``s``), the full-screen log
(``z``), the orphan hunter (``o``) and the events (``v``), and acknowledging a failure.

The app owns one :class:`Workflow` and calls it from its key actions; the screens get plain data
providers and callbacks from here, so each is testable on its own with the fake backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from console.model import HostView, KillTarget, SessionView
from console.ui.format import clean, short
from console.ui.main_screen import MainScreen

if TYPE_CHECKING:
    from console.core.orphans import Orphan
    from console.ui.app import MtpConsoleApp

# The screens are imported when first opened (and by the start's warm-up, console/commands/tui.py), not with
# the app: the first frame does not wait for them.


class Workflow:
    """Opens the navigation screens and carries out what they ask for (see the module docstring)."""

    SMALL = (100, 30)
    """Below this many columns or rows the GPU panels go compact by themselves (until ``c`` is pressed)."""

    def __init__(self, app: MtpConsoleApp) -> None:
        self.app = app
        self.user_compact = False
        """The operator toggled compact mode: the terminal size no longer decides."""

    def views(self) -> dict[str, HostView]:
        return dict(self.app.views)

    def _top(self) -> bool:
        """Only from the GPU panels (not over a dialog or another of these screens)."""
        return isinstance(self.app.screen, MainScreen)

    # ---- screens
    def sessions(self) -> None:
        if self._top():
            from console.ui.screens.sessions import SessionsScreen

            self.app.push_screen(SessionsScreen(self.views, on_open=self.open_session, on_ack=self.acknowledge,
                                                clock=self.app.clock))

    def full_log(self) -> None:
        if self._top():
            from console.ui.screens.log_screen import LogScreen

            self.app.push_screen(LogScreen())

    def orphans(self) -> None:
        if self._top():
            from console.ui.screens.orphans import OrphanScreen

            self.app.push_screen(OrphanScreen(self.views, self.kill_orphan, read_only=self.app.read_only))

    def events(self) -> None:
        if self._top():
            from console.ui.screens.events import EventsScreen

            self.app.push_screen(EventsScreen(self.views, clock=self.app.clock))

    # ---- what they ask for
    def open_session(self, s: SessionView) -> None:
        """Show ``s``'s log full screen (with its steps when this console ran them): through the log pane
        when it is its GPU's current session (the panel is selected), else followed by the screen itself."""
        from console.ui.screens.log_screen import LogScreen

        app = self.app
        panel = next((p for p in app.panels() if p.host == s.host and p.session is not None
                      and p.session.session_id == s.session_id and s.session_id), None)
        if panel is not None:
            app.select(panel)
            app.push_screen(LogScreen())
        else:
            app.push_screen(LogScreen(pinned=s))

    def acknowledge(self, s: SessionView) -> None:
        """The operator acknowledged ended session ``s``: recorded in its run directory, its GPU reads IDLE."""
        if s.session_id:
            self.app.backend.acknowledge(s.host, s.session_id)
            self.app.apply_views(force=True)

    def kill_orphan(self, o: Orphan, target: KillTarget) -> None:
        """Kill an orphan (after its dialog) with the confirmed kill; its steps show in the steps pane."""
        held = ", ".join(f"GPU {i}" for i in sorted(o.gpu_mem_mib)) or "no GPU"
        self.app.ops.run(f"kill orphan · {o.host} · pid {o.pid} ({short(clean(o.title), 40)}, {held})", "kill",
                         o.host, lambda cb: self.app.backend.kill(target, cb))

    def fit(self, width: int, height: int) -> None:
        """Small terminals (80x24): compact panels so several GPUs fit; back to full panels when it grows."""
        if self.user_compact:
            return
        small = width < self.SMALL[0] or height < self.SMALL[1]
        if small != self.app.compact:
            self.app._toggle_compact()

    def move(self, dx: int, dy: int) -> None:
        """Arrow keys between GPU panels: left/right one panel, up/down one row of the grid."""
        app = self.app
        if not self._top():
            return
        cols = app.grid_columns() if app.compact else 1
        step = dx if dx else dy * cols
        panels = app.panels()
        if not panels:
            return
        if app.selected not in panels:
            app.action_next_panel(1)
            return
        i = panels.index(app.selected) + step
        if 0 <= i < len(panels):
            app._focus_panel(panels[i])
