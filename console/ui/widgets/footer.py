"""The key footer, recomposed only when what it shows changes.

Textual's ``Footer`` removes and re-mounts every key on each focus change (the screen's
bindings "changed"), which costs a layout pass of the whole screen: with 64 GPU panels that
was most of the ``tab`` latency. Moving between GPU panels does not change the bindings shown.
"""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Footer


def _shown(screen: Screen) -> tuple:
    """What the footer would show for ``screen``: every active binding, its state and tooltip."""
    return tuple(
        (key, b.key, b.action, b.description, b.show, b.key_display, b.group, enabled, tooltip)
        for key, (_node, b, enabled, tooltip) in screen.active_bindings.items()
    )


class QuietFooter(Footer):
    """A ``Footer`` that skips the recompose when the bindings it would show are the same."""

    def bindings_changed(self, screen: Screen) -> None:
        if self._bindings_ready and self.is_attached and screen is self.screen:
            shown = _shown(screen)
            if shown == getattr(self, "_shown_bindings", None):
                return
            if screen.app.app_focus:
                self._shown_bindings = shown
        super().bindings_changed(screen)
