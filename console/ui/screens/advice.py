"""The advice detail (``i``): what the advisor sees on the selected GPU, its evidence and the checked change.

Dismisses with the :class:`~console.model.Advice` whose suggested flags the operator wants to
edit (``e``), or None.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from console.model import Advice
from console.ui.format import clean


def advice_text(items: list[Advice], gpu: int, host: str) -> Text:
    """The whole detail as one rich Text (also what the snapshot tests compare)."""
    t = Text()
    t.append(f"Advice for GPU {gpu} on {clean(host)}\n\n", style="bold")
    if not items:
        t.append("Nothing to say: no rule fired for this GPU's server.\n")
        return t
    for n, a in enumerate(items, 1):
        who = f"session {a.session_id}" if a.session_id else f"pid {a.pid}" if a.pid else "host"
        t.append(f"{n}. {clean(a.message)}\n", style="bold")
        t.append(f"   {a.kind} · {clean(who)}\n", style="dim")
        for e in a.evidence:
            t.append(f"   • {clean(e)}\n")
        s = a.suggestion
        if s is not None:
            t.append(f"   change: {clean(s.change)}\n")
            valid = {True: "accepted by the flag validator", False: "rejected by the flag validator",
                     None: "not checked by the flag validator"}[s.valid]
            t.append(f"   {valid}; {clean(s.planner)}\n")
        t.append("\n")
    return t


class AdviceScreen(ModalScreen["Advice | None"]):
    """Advice for one GPU; ``e`` edits and relaunches from the first suggestion, Esc closes."""

    DEFAULT_CSS = """
    AdviceScreen { align: center middle; }
    AdviceScreen > VerticalScroll { width: 90%; max-width: 110; height: auto; max-height: 80%;
                                    border: round $primary; background: $surface; padding: 0 1; }
    """
    BINDINGS = [
        Binding("e", "edit", "Edit with suggestion", tooltip="open the flag form with the suggested flags"),
        Binding("escape,i,q", "close", "Close"),
    ]

    def __init__(self, items: list[Advice], *, gpu: int, host: str) -> None:
        super().__init__()
        self.items, self.gpu, self.host = items, gpu, host

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(advice_text(self.items, self.gpu, self.host), id="advice-text")

    def action_edit(self) -> None:
        first = next((a for a in self.items if a.suggestion is not None and a.suggestion.flags), None)
        if first is None:
            self.notify("no suggested flags to edit", severity="warning")
            return
        self.dismiss(first)

    def action_close(self) -> None:
        self.dismiss(None)
