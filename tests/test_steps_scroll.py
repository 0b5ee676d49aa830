"""The steps pane scrolls: many steps all render, the latest (or the failing one) is in view by default, the earliest
is reached by scrolling back, and once the operator has scrolled away new steps do not pull the pane back."""

from __future__ import annotations

from ui_fakes import NOW, FakeBackend, frozen_app, started, view_idle

from console.model import OperationResult, Step
from console.ui.widgets.steps import SPINNER, StepsView
from tests.helpers.wait import until

SIZE = (140, 30)


def steps(n: int, *, last: str = "running", failed_at: int | None = None) -> list[Step]:
    out = []
    for i in range(n):
        state = "ok" if i < n - 1 else last
        if failed_at is not None:
            state = "ok" if i < failed_at else "failed" if i == failed_at else "skipped"
        done = state in ("ok", "failed")
        out.append(Step(name=f"step-{i:02d}", state=state, started_at=NOW - 1, elapsed_s=0.1 * i if done else None,
                        evidence=f"evidence of step {i}" if done else None))
    return out


def in_view(pane: StepsView, i: int) -> bool:
    """Row ``i`` is wholly on screen, below the pane's docked title and above its bottom border."""
    r = pane.rows[i].region
    return r.height > 0 and pane.head.region.bottom <= r.y and r.bottom <= pane.region.bottom - 1


async def test_many_steps_scroll_and_the_earliest_is_reachable():
    app = frozen_app(FakeBackend([view_idle()]))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        pane = app.query_one(StepsView)
        pane.begin("launch · host-a · GPU 0")
        pane.set_steps(steps(40))
        await until(pilot, lambda: len(pane.rows) == 40 and in_view(pane, 39))
        side = app.query_one("#side").region
        assert "step-00" in pane.text and "step-39" in pane.text  # every step rendered
        assert "more step(s)" not in pane.text
        assert pane.region.height <= side.height * 0.45 + 1 and pane.max_scroll_y > 0  # bounded: it scrolls
        assert not in_view(pane, 0)  # the latest step is what shows
        assert pane.head.region.y == pane.region.y  # the title stays at the top

        await pilot.click("#steps")  # the operator scrolls back with the keys
        await pilot.press("home")
        await until(pilot, lambda: in_view(pane, 0))
        assert not in_view(pane, 39) and pane.head.region.y == pane.region.y
        pane.tick()  # the spinner turns on the running row only, and the pane stays where it was put
        await until(pilot, lambda: str(pane.rows[39].content).startswith(SPINNER[1]))
        assert in_view(pane, 0)
        pane.set_steps(steps(40, last="ok"))  # a step moves on: the pane stays where the operator put it
        await until(pilot, lambda: "evidence of step 39" in str(pane.rows[39].content))
        assert in_view(pane, 0)

        await pilot.press("end")  # back at the end: new steps are followed again
        await until(pilot, lambda: in_view(pane, 39))
        pane.set_steps(steps(45))
        await until(pilot, lambda: len(pane.rows) == 45 and in_view(pane, 44))
        assert not in_view(pane, 0)

        await pilot.press("home")
        await until(pilot, lambda: in_view(pane, 0))
        pane.begin("kill · host-a · GPU 0")  # a new operation: followed from its start
        pane.set_steps(steps(30))
        await until(pilot, lambda: len(pane.rows) == 30 and in_view(pane, 29))
        assert not in_view(pane, 0)


async def test_a_failing_step_stays_in_view_with_the_outcome():
    app = frozen_app(FakeBackend([view_idle()]))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        pane = app.query_one(StepsView)
        pane.begin("launch · host-a · GPU 0")
        pane.finish(OperationResult(op="launch", host="host-a", ok=False, cause="gpu_oom",
                                    line="Not enough memory. Please try to increase --mem-fraction-static.",
                                    steps=steps(30, failed_at=12)))
        await until(pilot, lambda: len(pane.rows) == 30 and in_view(pane, 12))
        assert pane.focus_index() == 12  # skipped steps after it do not push it out
        assert not in_view(pane, 29) and not in_view(pane, 0)
        assert "launch FAILED: gpu_oom" in pane.text.splitlines()[1]
        head = pane.head.region
        assert head.y == pane.region.y and head.height >= 3  # the outcome is docked at the top, not scrolled away
        await pilot.click("#steps")
        await pilot.press("end")
        await until(pilot, lambda: in_view(pane, 29))
        await pilot.press("home")
        await until(pilot, lambda: in_view(pane, 0))
