"""``r`` on a deployment row (issue 29): the flags to change, the confirm dialog, then the roll.

The flags are typed as ``mtpconsole deploy roll`` takes them — ``--FLAG=VALUE`` (or a bare ``--FLAG``) sets one,
``--unset --FLAG`` removes one, separated by spaces; nothing: each replica is relaunched with its own flags. That is
the spelling an operator already uses for a roll (``--set --max-running-requests=24``), and a roll only edits the
flags of servers that run: it picks no GPUs, port or model, which is what the launch form is for. The confirm dialog
(Cancel focused) names exactly the replicas it hits, the flag diff (``- old`` / ``+ new``, as the relaunch form
shows it) and the traffic each carries; confirmed, the backend runs ``deploy roll``'s own code path, its steps in the
steps pane (and, per replica, in the row) and the audit log.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from console.backend import DeployBackend
from console.core.flag_edit import edit_flags
from console.errors import UserError
from console.model import DeploymentRow, RowReplica
from console.ui.flag_values import flag_diff
from console.ui.format import clean, gpu_list
from console.ui.protocols import Console
from console.ui.screens.confirm import ConfirmScreen
from console.ui.widgets.footer import QuietFooter
from console.ui.widgets.key_help import help_keys

Edits = tuple[list[str], list[str]]
"""(``--set`` items, ``--unset`` flags), as ``deploy roll`` takes them."""
PLACEMENT = ("each replica in turn: its new server on a spare GPU when there is one, else beside the old one when the "
             "memory planner says both fit, else the old one is drained first (the other replicas carry its traffic)")
CHECKS = ("then: READY + a one-token generate, registered and ready at the gateway, settled; the old one deregistered, "
          "drained to 0 requests and killed (confirmed). A new replica that fails: the roll stops, the old one serves")


def parse_edits(text: str) -> Edits:
    """``--a=1 --b --unset --c`` -> (["--a=1", "--b"], ["--c"]); raises UserError as ``deploy roll`` would."""
    sets: list[str] = []
    unsets: list[str] = []
    words = text.split()
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--unset":
            if i + 1 >= len(words):
                raise UserError("--unset needs a flag: --unset --FLAG")
            unsets.append(words[i + 1])
            i += 2
            continue
        sets.append(w)
        i += 1
    edit_flags([], sets, unsets)  # the same checks as the command line's (--flag=value, --flag)
    return sets, unsets


def replica_line(r: RowReplica) -> str:
    """One replica the roll hits and the traffic it carries."""
    load = "load unknown" if r.running is None else f"{r.running} running, {r.queued} queued"
    rps = "? req/s" if r.requests_per_s is None else f"{r.requests_per_s:.1f} req/s"
    return (f"replica {r.replica}  session {clean(r.session_id, 80)}  GPU {gpu_list(r.gpus)}  port {r.port}  "
            f"{r.role} {r.state.upper()}  traffic: {load}, {rps}")


def confirm_lines(console: Console, row: DeploymentRow, edits: Edits) -> list[str]:
    """What the dialog names: the gateway and its traffic, the flag diff, each replica hit, what happens."""
    sets, unsets = edits
    argv = {s.session_id: s.argv for v in console.views.values() for s in v.sessions if s.session_id}
    diffs: list[str] = []
    for r in row.replicas:
        old = argv.get(r.session_id)
        if old:
            for line in flag_diff(old, edit_flags(old, sets, unsets)):
                if line not in diffs:
                    diffs.append(line)
    rps = "? req/s" if row.requests_per_s is None else f"{row.requests_per_s:.1f} req/s"
    return [f"gateway {row.gateway.upper()} on {row.host}: {row.ready}/{row.total} replicas ready, {rps} through it",
            "", "flags:" if sets or unsets else "flags: the same (each replica relaunched with its own flags)",
            *(f"  {clean(d, 200)}" for d in diffs), *([] if diffs or not (sets or unsets) else ["  (no change)"]),
            "", "replicas it hits:", *(f"  {replica_line(r)}" for r in row.replicas), "", PLACEMENT, CHECKS]


class RollFlags(ModalScreen[Edits | None]):
    """The flags a roll changes (see the module docstring); Enter goes on to the confirm dialog."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", tooltip="cancel: nothing is done"), *help_keys()]

    def __init__(self, row: DeploymentRow) -> None:
        super().__init__(classes="dialog-screen")
        self.row = row

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(Content.from_markup("[b]Roll deployment $n on $h[/b]", n=self.row.name, h=self.row.host),
                         classes="dialog-title")
            yield Static("Flags to change, as `deploy roll` takes them: --FLAG=VALUE or --FLAG sets one, --unset --FLAG "
                         "removes one (spaces between). Empty: the same flags. Enter: review and confirm.",
                         classes="dialog-body", markup=False)
            yield Input(placeholder="--max-running-requests=24", id="edits")
            yield Static("", id="edits-error", classes="dialog-body", markup=False)
        yield QuietFooter()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            self.dismiss(parse_edits(event.value))
        except UserError as e:
            self.query_one("#edits-error", Static).update(str(e))

    def action_cancel(self) -> None:
        self.dismiss(None)


def roll_deployment(console: Console, row: DeploymentRow) -> None:
    """``r`` on ``row``: the flags, the confirm dialog, then ``deploy roll``'s code path as an operation holding the
    whole host (a roll may take any spare GPU there)."""
    backend = console.backend
    if not isinstance(backend, DeployBackend):
        console.say("this console runs no deployments", severity="warning")
        return
    if not row.replicas:
        console.say(f"deployment {row.name} has no live replica on {row.host} (deploy up first)", severity="warning")
        return
    name, host = row.name, row.host

    def confirmed(edits: Edits) -> None:
        console.ops.run(f"roll · {host} · deployment {name}", "deploy-roll", host,
                        lambda cb: backend.deploy_roll(name, edits[0], edits[1], cb), gpus=None,
                        say=f"rolling deployment {name} on {host}, one replica at a time")

    def flags(edits: Edits | None) -> None:
        if edits is None:
            return
        hits = ", ".join(f"replica {r.replica}" for r in row.replicas)
        console.push_screen(ConfirmScreen(f"Roll deployment {name} ({hits})?", confirm_lines(console, row, edits),
                                          "Roll"), callback=lambda ok: confirmed(edits) if ok else None)
    console.push_screen(RollFlags(row), callback=flags)
