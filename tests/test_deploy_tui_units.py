"""Issue 29, the TUI's deployment row without a gateway: the row drawn from its snapshot model (ready/total, the
reading's age and staleness, the roll's step per replica), the roll's progress read from a roll's steps, the flags
typed as ``deploy roll`` takes them, and in the app (a fake backend that runs deployments): the row above its host's
panels, ``r`` on it -> the flags -> the confirm dialog (Cancel focused; the replicas, the flag diff, their traffic) ->
the backend's roll with its steps in the steps pane; a GPU panel's keys do nothing on the row (and say so); ``r`` on
a GPU panel still relaunches; ``--read-only`` offers
no ``r`` on the row and says why the key does nothing."""

from __future__ import annotations

import asyncio

import pytest

from console.errors import UserError
from console.model import DeploymentRow, OperationResult, RollStepNow, RowReplica, Step
from console.ops.deploy.watch import roll_progress
from console.ui.screens.roll import parse_edits
from console.ui.widgets.deploy_row import DeploymentRowView, row_text
from tests.helpers.wait import until
from tests.ui_fakes import NOW, FakeBackend, frozen_app

REPLICAS = [RowReplica(session_id="s-ready", replica=0, role="current", state="ready", gpus=[0, 1], port=30000,
                       ready_at_gateway=True, running=3, queued=1, requests_per_s=2.5),
            RowReplica(session_id="s-other", replica=1, role="current", state="loading", gpus=[2], port=30001)]


def row(**kw) -> DeploymentRow:
    base = dict(name="web", host="host-a", gateway="up", read_at=NOW - 2, stale_after_s=9.0, ready=1, total=2,
                requests_per_s=4.25, replicas=REPLICAS)
    return DeploymentRow(**{**base, **kw})


def test_the_row_says_gateway_replicas_rate_and_the_age_of_its_reading() -> None:
    text = row_text(row(), NOW).plain
    assert text == "DEPLOY web  gateway UP (read 2.0 s ago)  replicas 1/2 ready  4.2 req/s"
    stale = row_text(row(read_at=NOW - 42, gateway="unreachable", detail="host-a: LinkDown: gone"), NOW).plain
    assert "gateway UNREACHABLE (read 42 s ago STALE)" in stale and "host-a: LinkDown: gone" in stale
    assert row(read_at=NOW - 42).stale(NOW) and not row().stale(NOW)
    assert "not read yet" in row_text(row(read_at=None, requests_per_s=None), NOW).plain
    assert "? req/s" in row_text(row(requests_per_s=None), NOW).plain


def test_a_roll_in_progress_shows_each_replicas_current_step() -> None:
    rolling = row(rolling=True, roll=[RollStepNow(replica=0, step="old: drained", state="ok"),
                                      RollStepNow(replica=1, step="new: generate", state="running")])
    lines = row_text(rolling, NOW).plain.splitlines()
    assert lines[1] == "  ROLL  replica 0 old: drained · replica 1 new: generate"
    other = row_text(row(rolling=True), NOW).plain.splitlines()  # another console's roll: the replicas' roles
    assert other[1] == "  ROLL  replica 0 current READY · replica 1 current LOADING"


def test_roll_progress_is_each_replicas_running_step_else_its_last() -> None:
    steps = [Step(name="gateway: worker API", state="ok"), Step(name="replica 0: placement", state="ok"),
             Step(name="replica 0 new: spawned", state="ok"), Step(name="replica 0 new: generate", state="running"),
             Step(name="replica 0 new: registered", state="pending"), Step(name="replica 1 old kill: SIGTERM",
                                                                             state="failed")]
    assert [(s.replica, s.step, s.state) for s in roll_progress(steps)] == [
        (0, "new: generate", "running"), (1, "old kill: SIGTERM", "failed")]


def test_the_flags_are_typed_as_deploy_roll_takes_them() -> None:
    assert parse_edits("") == ([], [])
    assert parse_edits(" --max-running-requests=24  --enable-metrics --unset --cuda-graph-max-bs ") == (
        ["--max-running-requests=24", "--enable-metrics"], ["--cuda-graph-max-bs"])
    for bad in ("max-running-requests=24", "--unset", "--unset x"):
        with pytest.raises(UserError):
            parse_edits(bad)


class DeployFake(FakeBackend):
    """The fake backend, also running one deployment 'web' on host-a (console.backend.DeployBackend)."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.rolls: list[tuple[str, list[str], list[str]]] = []

    async def watch_deployments(self, on_row) -> None:
        self.on_row = on_row
        on_row(row())

    async def deploy_roll(self, name, sets, unsets, on_steps) -> OperationResult:
        self.rolls.append((name, sets, unsets))
        steps = [Step(name="replica 0 new: generate", state="running")]
        on_steps(steps)
        await asyncio.sleep(0)
        steps = [Step(name="replica 0 new: generate", state="ok", evidence="POST /generate (1 token) → 200")]
        on_steps(steps)
        return OperationResult(op="deploy-roll", host="host-a", ok=True, steps=steps)


async def to_row(pilot, app) -> DeploymentRowView:
    rv = await until(pilot, lambda: app.query_one(DeploymentRowView), what="the deployment row is shown")
    await pilot.press("shift+tab")  # from the first panel back to the row above the host's panels
    await until(pilot, lambda: app.screen.focused is rv, what=lambda: f"focused {app.screen.focused}")
    return rv


async def test_r_on_the_row_asks_the_flags_then_confirms_and_rolls_and_r_on_a_panel_still_relaunches() -> None:
    from textual.widgets import Button, Input

    from console.ui.screens.confirm import ConfirmScreen
    from console.ui.screens.roll import RollFlags
    from console.ui.widgets.steps import StepsView

    backend = DeployFake()
    app = frozen_app(backend)
    async with app.run_test(size=(160, 50)) as pilot:
        rv = await to_row(pilot, app)
        assert rv.region.y < min(p.region.y for p in app.panels())  # above the host's GPU panels
        assert "DEPLOY web  gateway UP" in str(rv.render())
        assert app.screen.active_bindings["r"].binding.action == "screen.roll_deployment"
        assert not {"k", "l", "e", "x"} & set(app.screen.active_bindings)  # a panel's keys: not on the row
        await pilot.press("k")
        await until(pilot, lambda: "kill acts on a GPU panel: tab or ↓ to one" in app.notify.shown)
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, RollFlags))
        app.screen.query_one(Input).value = "--max-running-requests=24"
        await pilot.press("enter")
        dlg = await until(pilot, lambda: app.screen if isinstance(app.screen, ConfirmScreen) else None)
        assert dlg.focused is dlg.query_one("#cancel", Button)
        body = "\n".join(dlg.lines)
        assert dlg.title_text == "Roll deployment web (replica 0, replica 1)?"
        assert "- --max-running-requests 48" in body and "+ --max-running-requests 24" in body
        assert "replica 0  session s-ready  GPU 0,1  port 30000  current READY  traffic: 3 running, 1 queued, 2.5 req/s" \
            in body and "replica 1  session s-other" in body and "drained first" in body
        await pilot.press("y")
        await until(pilot, lambda: app.ops.results and app.ops.results[-1].op == "deploy-roll")
        assert backend.rolls == [("web", ["--max-running-requests=24"], [])]
        assert "replica 0 new: generate" in app.query_one(StepsView).text
        assert "deploy-roll ok" in app.query_one(StepsView).text
        await pilot.press("tab")  # back to GPU 0's panel: r relaunches its session there
        await until(pilot, lambda: app.screen.focused is app.panels()[0])
        await pilot.press("r")
        dlg = await until(pilot, lambda: app.screen if isinstance(app.screen, ConfirmScreen) else None)
        assert dlg.title_text.startswith("Relaunch ")


async def test_read_only_offers_no_r_on_the_row_and_says_why() -> None:
    from console.ui.screens.roll import RollFlags

    app = frozen_app(DeployFake(read_only=True))
    async with app.run_test(size=(160, 50)) as pilot:
        await to_row(pilot, app)
        assert "r" not in app.screen.active_bindings  # not offered: no footer key, no palette command
        await pilot.press("r")
        await until(pilot, lambda: "read-only: roll disabled" in app.notify.shown)
        assert not isinstance(app.screen, RollFlags)


def test_a_reading_becomes_a_row_an_old_and_a_new_session_count_once_and_an_unreachable_host_keeps_it() -> None:
    from console.ops.deploy.models import DeploymentStatus, GatewayView, ReplicaView
    from console.ops.deploy.watch import row_of

    def rep(sid: str, i: int, role: str, status: str | None = "ready") -> ReplicaView:
        return ReplicaView(session_id=sid, replica=i, role=role, state="ready", worker_id="w-" + sid,
                           worker_status=status)
    st = DeploymentStatus(name="web", host="h", gateway=GatewayView(port=1, owned=True, health=200),
                          replicas=[rep("a", 0, "old"), rep("b", 0, "new"), rep("c", 1, "current", "pending")],
                          roll_in_progress=True, requests_per_s=7.5)
    r = row_of(st, NOW, 9.0)
    assert (r.gateway, r.ready, r.total, r.requests_per_s, r.rolling, r.roll) == ("up", 1, 2, 7.5, True, [])
    gone = row_of(st, NOW - 30, 9.0, gateway="unreachable", detail="h: LinkDown: closed")
    assert gone.gateway == "unreachable" and gone.stale(NOW) and "LinkDown" in row_text(gone, NOW).plain
    down = row_of(st.model_copy(update={"gateway": GatewayView(port=1, owned=True, error="no answer")}), NOW, 9.0)
    assert down.gateway == "down" and down.detail == "no answer"
    assert row_of(st, NOW, 9.0, expected=3).total == 3  # a replica whose session is gone still counts


class RollingFake(DeployFake):
    async def watch_deployments(self, on_row) -> None:
        on_row(row(rolling=True, roll=[RollStepNow(replica=0, step="old: drained", state="ok"),
                                       RollStepNow(replica=1, step="new: generate", state="running")]))


def test_snapshot_the_row_above_its_hosts_panels_focused_while_a_roll_runs(snap_compare) -> None:
    from console.ui.widgets.log_pane import LogPane
    from tests.ui_fakes import SESSION_LOG, view_a, view_b

    async def run_before(pilot) -> None:
        app = pilot.app
        await until(pilot, lambda: len(app.query_one(LogPane).lines) == len(SESSION_LOG))
        await to_row(pilot, app)
    app = frozen_app(RollingFake(views=[view_a(), view_b()]))
    assert snap_compare(app, terminal_size=(160, 40), run_before=run_before)
