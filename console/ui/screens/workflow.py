"""The operator's navigation around the lifecycle: the sessions table (``s``), the full-screen log
(``z``), the orphan hunter (``o``) and the events (``v``), and acknowledging a failure.

The app owns one :class:`Workflow`; the GPU panels' keys call it (``console/ui/main_screen.py``); the screens get plain data
providers and callbacks from here, so each is testable on its own with the fake backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from console.model import HostView, KillTarget, SessionView
from console.ui.format import clean, short
from console.ui.protocols import Console

if TYPE_CHECKING:
    from console.core.orphans import Orphan

# The screens are imported when first opened (and by the start's warm-up, console/commands/tui.py), not with
# the app: the first frame does not wait for them.


class Workflow:
    """Opens the navigation screens and carries out what they ask for (see the module docstring)."""

    def __init__(self, console: Console) -> None:
        self.console = console

    @property
    def user_compact(self) -> bool:
        """The operator toggled compact mode (``c``): the terminal size no longer decides (the GPU panels' screen
        owns the compact grid)."""
        return self.console.main.user_compact

    def views(self) -> dict[str, HostView]:
        return dict(self.console.views)

    def _top(self) -> bool:
        """Only from the GPU panels (not over a dialog or another of these screens)."""
        return self.console.main.is_current

    # ---- screens
    def sessions(self) -> None:
        if self._top():
            from console.ui.screens.sessions import SessionsScreen

            self.console.push_screen(SessionsScreen(self.views, on_open=self.open_session, on_ack=self.acknowledge,
                                                    clock=self.console.clock))

    def full_log(self) -> None:
        if self._top():
            from console.ui.screens.log_screen import LogScreen

            self.console.push_screen(LogScreen(self.console))

    def orphans(self) -> None:
        if self._top():
            from console.ui.screens.orphans import OrphanScreen

            self.console.push_screen(OrphanScreen(self.views, self.kill_orphan, read_only=self.console.read_only))

    def events(self) -> None:
        if self._top():
            from console.ui.screens.events import EventsScreen

            self.console.push_screen(EventsScreen(self.views, clock=self.console.clock,
                                                  others_audit=self.console.backend.others_audit))

    # ---- what they ask for
    def open_session(self, s: SessionView) -> None:
        """Show ``s``'s log full screen (with its steps when this console ran them): through the log pane
        when it is its GPU's current session (the panel is selected), else followed by the screen itself."""
        from console.ui.screens.log_screen import LogScreen

        main = self.console.main
        panel = next((p for p in main.panels() if p.host == s.host and p.session is not None
                      and p.session.session_id == s.session_id and s.session_id), None)
        if panel is not None:
            main.select(panel)
            self.console.push_screen(LogScreen(self.console))
        else:
            self.console.push_screen(LogScreen(self.console, pinned=s))

    def acknowledge(self, s: SessionView) -> None:
        """The operator acknowledged ended session ``s``: recorded in its run directory, it is no longer its GPUs'
        current session; a toast says what each of those GPUs reads now (its panel's badge: IDLE, or the session
        that is current there now — STOPPED, READY...)."""
        if not s.session_id:
            return
        self.console.backend.acknowledge(s.host, s.session_id)
        self.console.apply_views(force=True)
        panels = {p.index: p for p in self.console.main.panels() if p.host == s.host}
        reads = [f"GPU {g} reads {panels[g].badge_label}" if g in panels else f"GPU {g} is not shown"
                 for g in s.gpus]
        self.console.say(f"acknowledged {clean(s.session_id, 80)}: " + (", ".join(reads) or "it held no GPU"))

    def kill_orphan(self, o: Orphan, target: KillTarget) -> None:
        """Kill an orphan (after its dialog) with the confirmed kill; its steps show in the steps pane."""
        held = ", ".join(f"GPU {i}" for i in sorted(o.gpu_mem_mib)) or "no GPU"
        backend = self.console.backend
        self.console.ops.run(f"kill orphan · {o.host} · pid {o.pid} ({short(clean(o.title), 40)}, {held})", "kill",
                             o.host, lambda cb: backend.kill(target, cb), gpus=sorted(o.gpu_mem_mib) or None)
