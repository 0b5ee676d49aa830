"""A deployment's row (issue 29), above its host's GPU panels: gateway state and the age of the reading (a stale
one dims and says STALE), replicas ready/total, requests/s through the gateway, and while a roll runs, each replica's
current step. It takes the focus like a GPU panel; ``r`` there rolls the deployment (``console/ui/screens/roll.py``;
refused in read-only mode, where the key is not offered). The row comes ready-made from the data layer
(:class:`~console.model.DeploymentRow`); this draws it."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding
from textual.content import Content
from textual.widgets import Static

from console.model import DeploymentRow
from console.ui.format import age_text, clean, short

GATEWAY_STYLE = {"up": "$text-success", "down": "$text-error", "unreachable": "$text-warning"}
ROLE_STYLE = {"ok": "$text-success", "failed": "$text-error", "warning": "$text-warning", "running": "$text-warning",
              "skipped": "$text-muted", "pending": "$text-muted"}


def row_text(row: DeploymentRow, now: float) -> Content:
    """What the row says at ``now`` (one line, a second one while a roll runs)."""
    stale = row.stale(now)
    age = "not read yet" if row.read_at is None else f"read {age_text(row.age(now))} ago" + (" STALE" if stale else "")
    rps = "? req/s" if row.requests_per_s is None else f"{row.requests_per_s:.1f} req/s"
    head = Content.from_markup(
        "[b]DEPLOY $name[/b]  gateway [$gs b]$gw[/] [$text-muted]($age)[/]  replicas $ready/$total ready  $rps",
        name=clean(row.name, 60), gs=GATEWAY_STYLE[row.gateway], gw=row.gateway.upper(), age=age,
        ready=str(row.ready), total=str(row.total), rps=rps)
    if row.detail and row.gateway != "up":
        head += Content.from_markup("  [$text-muted]$d[/]", d=short(clean(row.detail), 160))
    if not row.rolling:
        return head
    if row.roll:  # this console's roll: each replica's step under way
        parts = [Content.from_markup(f"replica $i [{ROLE_STYLE[s.state]}]$s[/]", i=str(s.replica),
                                     s=short(clean(s.step), 60)) for s in row.roll]
    else:  # another console's (or an interrupted) roll: the replicas' roles say where it is
        parts = [Content(f"replica {r.replica} {r.role} {r.state.upper()}") for r in row.replicas]
    return Content("\n").join([head, Content("  ROLL  ").stylize("$text-warning b") + Content(" · ").join(parts)])


class DeploymentRowView(Static, can_focus=True):
    """The row of deployment ``name`` (see the module docstring); :meth:`show` redraws it from a new row."""

    BINDINGS: ClassVar = [Binding("r", "screen.roll_deployment", "Roll",
                                  tooltip="roll this deployment: each replica relaunched in turn, confirmed",
                                  id="roll_deployment")]

    def __init__(self, name: str) -> None:
        super().__init__("", markup=False, classes="deploy-row")
        self.deployment = name
        self.row: DeploymentRow | None = None

    def show(self, row: DeploymentRow, now: float) -> None:
        self.row = row
        self.age(now)

    def age(self, now: float) -> None:
        """Redraw for ``now`` (the reading's age and its staleness)."""
        if self.row is not None:
            self.set_class(self.row.stale(now), "-stale")
            self.update(row_text(self.row, now))
