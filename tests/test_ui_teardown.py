"""The app's timers keep ticking while Textual tears the screen down at exit (children first): a tick then must not
reach for widgets already removed. The CI run of 8e5627b failed so: ``apply_views`` met the groups' line gone
(``NoMatches: GroupsBar``) after a test's last step. Here each timer's callback is called at the worst moment, from
the hosts pane's unmount (its children, the groups' line and the host sections, removed already)."""

from __future__ import annotations

from ui_fakes import FakeBackend, frozen_app, started, view_a, view_b

from console.model import AuditEntry
from console.ui.main_screen import HostsPane


async def test_timers_called_while_the_screen_is_torn_down_do_nothing(monkeypatch):
    app = frozen_app(FakeBackend([view_a(), view_b()]))
    called: list[str] = []
    errors: list[BaseException] = []

    def on_unmount(self) -> None:
        app.on_audit(AuditEntry(at=1.0, host="host-a", op="read_log"))  # the audit pane, gone, is not written to
        for name, tick in (("apply_views", lambda: app.apply_views(force=True)), ("flush_logs", app.flush_logs),
                           ("age_views", app.age_views), ("spin", app.spin)):
            try:
                tick()
                called.append(name)
            except Exception as e:  # noqa: BLE001 - recorded and asserted below
                errors.append(e)

    monkeypatch.setattr(HostsPane, "on_unmount", on_unmount, raising=False)
    app.animation_level = "full"  # spin draws the steps pane's spinner only with animations on
    async with app.run_test(size=(160, 50)) as pilot:
        await started(pilot)
        assert app.main.live
    assert not errors, errors
    assert called == ["apply_views", "flush_logs", "age_views", "spin"]
    assert not app.main.live
