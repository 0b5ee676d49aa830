"""The advice detail (``i``): what the advisor sees on the selected GPU, its evidence and the checked change.

:class:`AdviceScreen` dismisses with the :class:`~console.model.Advice` whose suggested flags the
operator wants to edit (``e``), or None. :class:`AdviceActions` is what the app's ``i`` and ``p``
keys do: open it (then the edit-and-relaunch flow from the suggestion) and write the incident
report of the selected GPU's session through the backend.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from console.model import Advice
from console.ui.format import clean, short
from console.ui.protocols import Console
from console.ui.widgets.footer import QuietFooter
from console.ui.widgets.gpu_panel import GpuPanel, gpu_advice
from console.ui.widgets.key_help import help_keys, quit_key


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
    """Advice for one GPU; ``e`` edits and relaunches from the first suggestion (not offered read-only), escape or
    ``i`` closes, ``q`` quits as on every screen; its own footer lists exactly these keys."""

    DEFAULT_CSS = """
    AdviceScreen > VerticalScroll { width: 90%; max-width: 110; height: auto; max-height: 80%;
                                    border: round $primary; background: $surface; padding: 0 1; }
    """
    BINDINGS = [
        Binding("e", "edit", "Edit with suggestion", tooltip="open the flag form with the suggested flags"),
        Binding("escape,i", "close", "Close", tooltip="back to the GPU panels"),
        *help_keys(),
        quit_key(),
    ]

    def __init__(self, items: list[Advice], *, gpu: int, host: str, read_only: bool = False) -> None:
        super().__init__(classes="dialog-screen")  # opaque: the screen under it is not drawn again (base.tcss)
        self.items, self.gpu, self.host, self.read_only = items, gpu, host, read_only

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(advice_text(self.items, self.gpu, self.host), id="advice-text")
        yield QuietFooter()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Read-only: ``e`` (edit and relaunch is destructive) is not offered, as on the panels."""
        return not (action == "edit" and self.read_only)

    def key_e(self) -> None:
        """``e`` read-only (its binding is hidden, so the key reaches here): say why nothing happens."""
        if self.read_only:
            self.notify("read-only: edit and relaunch disabled", severity="warning", markup=False)

    def action_edit(self) -> None:
        first = next((a for a in self.items if a.suggestion is not None and a.suggestion.flags), None)
        if first is None:
            self.notify("no suggested flags to edit", severity="warning")
            return
        self.dismiss(first)

    def action_close(self) -> None:
        self.dismiss(None)


class AdviceActions:
    """``i`` and ``p`` on the GPU panels (see the module docstring); the app owns one."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def _panel(self) -> GpuPanel | None:
        p = self.console.main.selected
        if p is None or not p.is_attached:
            self.console.say("select a GPU panel first (tab / enter)", severity="warning")
            return None
        return p

    def show(self) -> None:
        """The advice about the selected GPU; ``e`` there opens the edit flow with its suggested flags."""
        p = self._panel()
        if p is None:
            return
        view = self.console.views.get(p.host)
        items = gpu_advice(view.advice if view else [], p.index, p.session)
        self.console.push_screen(AdviceScreen(items, gpu=p.index, host=p.host, read_only=self.console.read_only),
                             callback=self.edit)

    def edit(self, advice: Advice | None) -> None:
        """Edit and relaunch from ``advice``'s suggestion (blocked in read-only, like ``e``)."""
        if advice is None or advice.suggestion is None or not advice.suggestion.flags:
            return
        if self.console.read_only:
            self.console.say("read-only: edit and relaunch disabled", severity="warning")
            return
        self.console.ops.edit(list(advice.suggestion.flags), advice.kind)

    def session_to_report(self, p: GpuPanel) -> str | None:
        """The selected GPU's current session, else the newest session (with a run directory) it ran."""
        s = p.session
        if s is not None and s.session_id and not s.pending:
            return s.session_id
        view = self.console.views.get(p.host)
        on = [x for x in (view.sessions if view else []) if p.index in x.gpus and x.session_id and not x.pending]
        return max(on, key=lambda x: x.started_at or 0.0).session_id if on else None

    def report(self) -> None:
        """Write the incident report of the selected GPU's current (or last ended) session."""
        p = self._panel()
        if p is None:
            return
        sid = self.session_to_report(p)
        if sid is None:
            self.console.say(f"no session to report on {p.host} GPU {p.index} (a hand-started server has no run "
                         "directory)", severity="warning")
            return
        self.console.say(f"writing the report of {clean(sid, 80)}…")
        self.console.run_worker(self._write(p.host, sid), group="report", exit_on_error=False)

    async def _write(self, host: str, sid: str) -> None:
        try:
            path = await self.console.backend.report(host, sid)
        except Exception as e:  # the UI stays up and says why
            self.console.say(f"report of {clean(sid, 80)} not written: {short(clean(str(e)), 300)}",
                         severity="error", timeout=15)
            return
        self.console.say(f"report written: {clean(path, 300)} (the panel's SVG beside it)", timeout=15)
