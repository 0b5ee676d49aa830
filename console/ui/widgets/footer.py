"""The key footer: one widget that draws every key of the screen on one line, as Textual's ``Footer`` draws them.

Textual's ``Footer`` is a container of one widget per key. Each of them is restyled on a theme change and drawn on
every full redraw, and the whole set is removed and mounted again whenever the screen's keys change (each screen
pushed or popped, each focus change): with 18 keys on the GPU panels' screen that was a fifth of ``t`` and most of
the cost of opening a dialog. Here the keys are spans of one line (the footer's component classes give their
colours, the ``Footer`` variables of the theme), redrawn only when what it shows changes; the command palette's key
is drawn at the right end, and only the keys that fit whole before it; the first is always ``? Keys``, the key help
(where the rest are).
A click on a key presses it.
"""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.content import Content
from textual.screen import Screen
from textual.style import Style
from textual.widget import Widget

KeySpan = tuple[int, int, str]
"""(first cell, past the last cell, key) of one key on the line."""


def _shown(screen: Screen) -> tuple:
    """What the footer shows for ``screen``: every active binding, its state and tooltip."""
    return tuple(
        (key, b.key, b.action, b.description, b.show, b.key_display, b.group, enabled, tooltip)
        for key, (_node, b, enabled, tooltip) in screen.active_bindings.items()
    )


class QuietFooter(Widget, can_focus=False):
    """The keys of its screen on one line (see the module docstring)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"quiet-footer--key", "quiet-footer--description",
                                             "quiet-footer--divider"}
    DEFAULT_CSS = """
    QuietFooter {
        dock: bottom; height: 1; color: $footer-foreground; background: $footer-background;
        & > .quiet-footer--key { color: $footer-key-foreground; background: $footer-key-background; text-style: bold; }
        & > .quiet-footer--description { color: $footer-description-foreground;
                                         background: $footer-description-background; }
        & > .quiet-footer--divider { color: $foreground 20%; }
    }
    """

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[tuple[str, str, str, bool]] = []
        """(key, how it is shown, description, enabled) of every key drawn, in order."""
        self.palette: tuple[str, str, str, bool] | None = None
        """The command palette's key (drawn at the right end)."""
        self.spans: list[KeySpan] = []
        """Where each key was drawn last (for clicks)."""
        self._shown_bindings: tuple | None = None

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.bindings_changed)
        self.bindings_changed(self.screen)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def bindings_changed(self, screen: Screen) -> None:
        """The screen's keys may have changed: read them again, redraw when what is shown differs."""
        if not self.is_attached or screen is not self.screen or not screen.app.app_focus:
            return
        shown = _shown(screen)
        if shown == self._shown_bindings:
            return
        self._shown_bindings = shown
        app = self.app
        active = screen.active_bindings
        keys: list[tuple[str, str, str, bool]] = []
        helps: list[tuple[str, str, str, bool]] = []
        actions: set[str] = set()
        for _node, b, enabled, _tooltip in active.values():
            if b.show and b.action not in actions:  # one key per action: its first binding
                actions.add(b.action)
                key = (b.key, app.get_key_display(b), b.description, enabled)
                (helps if b.action.rpartition(".")[2] == "help" else keys).append(key)
        keys = helps + keys  # the key help first on every screen: where the keys with no room here are
        palette = active.get(app.COMMAND_PALETTE_BINDING) if app.ENABLE_COMMAND_PALETTE else None
        self.keys = keys
        self.palette = None if palette is None else (
            palette.binding.key, app.get_key_display(palette.binding), palette.binding.description, palette.enabled)
        self.refresh()

    def render(self) -> Content:
        width = self.content_size.width
        key_style = Style.from_rich_style(self.get_component_rich_style("quiet-footer--key"))
        desc_style = Style.from_rich_style(self.get_component_rich_style("quiet-footer--description"))
        dim = Style(dim=True)
        right = Content("")
        if self.palette is not None:  # "▏^p palette " at the right end
            _key, shown, desc, enabled = self.palette
            divider = Style.from_rich_style(self.get_component_rich_style("quiet-footer--divider"))
            right = Content.assemble(("▏", divider), (shown, key_style + (dim if not enabled else Style())),
                                     (f" {desc}", desc_style), " ")
        room = max(0, width - right.cell_length)
        parts: list[Content] = []
        spans: list[KeySpan] = []
        x = 0
        for key, shown, desc, enabled in self.keys:  # " k desc " each, whole keys only (the key help has the rest)
            extra = Style() if enabled else dim
            part = Content.assemble((f" {shown} ", key_style + extra), (f"{desc} ", desc_style + extra))
            if x + part.cell_length > room:
                break
            spans.append((x, x + part.cell_length, key))
            parts.append(part)
            x += part.cell_length
        if self.palette is not None and right.cell_length <= width:
            spans.append((width - right.cell_length, width, self.palette[0]))
        self.spans = spans
        left = Content("").join(parts).truncate(room, pad=True)
        return Content.assemble(left, right)

    def key_at(self, x: int) -> str | None:
        """The key drawn at cell ``x`` of the line, if any."""
        return next((key for start, end, key in self.spans if start <= x < end), None)

    def on_mouse_down(self, event: events.MouseDown) -> None:
        key = self.key_at(event.x)
        if key is not None:
            self.app.simulate_key(key)
