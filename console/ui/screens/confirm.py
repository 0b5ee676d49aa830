"""A yes/no dialog for destructive actions. Focus starts on Cancel; escape cancels."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[bool]):
    """Names exactly what will be hit and what will be checked; returns True to go ahead."""

    BINDINGS = [("escape", "cancel", "Cancel")]

    def __init__(self, title: str, lines: list[str], confirm: str = "Kill") -> None:
        super().__init__(classes="dialog-screen")
        self.title_text, self.lines, self.confirm = title, lines, confirm

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(Content.from_markup("[b]$t[/b]", t=self.title_text), classes="dialog-title")
            yield Static(Content("\n".join(self.lines)), classes="dialog-body")
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button(self.confirm, id="confirm", variant="error")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm")

    def action_cancel(self) -> None:
        self.dismiss(False)
