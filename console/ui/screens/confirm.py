"""A yes/no dialog for destructive actions. Focus starts on Cancel; ``y`` confirms, ``n`` and escape cancel.

Its body is given whole (flags are never cut) and scrolls when it is taller than the screen allows (the arrow
and page keys, the wheel); its own footer lists exactly the keys it answers to.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from console.ui.widgets.footer import QuietFooter
from console.ui.widgets.key_help import help_keys, quit_key


class ConfirmScreen(ModalScreen[bool]):
    """Names exactly what will be hit and what will be checked; returns True to go ahead."""

    DEFAULT_CSS = """
    ConfirmScreen .dialog-scroll { height: auto; max-height: 50vh; scrollbar-size-vertical: 1; }
    """
    BINDINGS = [
        Binding("y", "confirm", "Yes", tooltip="go ahead (the red button)"),
        Binding("n,escape", "cancel", "No", tooltip="cancel: nothing is done"),
        Binding("down", "scroll(1)", "Scroll", show=False, tooltip="scroll what the dialog says"),
        Binding("up", "scroll(-1)", "Scroll", show=False, tooltip="scroll what the dialog says"),
        Binding("pagedown", "scroll(10)", "Scroll", show=False, tooltip="scroll what the dialog says"),
        Binding("pageup", "scroll(-10)", "Scroll", show=False, tooltip="scroll what the dialog says"),
        *help_keys(),
        quit_key(),
    ]

    def __init__(self, title: str, lines: list[str], confirm: str = "Kill") -> None:
        super().__init__(classes="dialog-screen")
        self.title_text, self.lines, self.confirm = title, lines, confirm

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(Content.from_markup("[b]$t[/b]", t=self.title_text), classes="dialog-title")
            with VerticalScroll(classes="dialog-scroll", can_focus=False):
                yield Static(Content("\n".join(self.lines)), classes="dialog-body")
            with Horizontal(classes="buttons"):
                yield Button("Cancel (n)", id="cancel")
                yield Button(f"{self.confirm} (y)", id="confirm", variant="error")
        yield QuietFooter()

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm")

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)

    def action_scroll(self, lines: int) -> None:
        self.query_one(".dialog-scroll", VerticalScroll).scroll_relative(y=lines, animate=False)
