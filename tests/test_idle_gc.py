"""The idle collector (console/ui/idle_gc.py): full collections only while the operator is idle, bounded."""

from __future__ import annotations

import gc

from console.ui import idle_gc
from console.ui.idle_gc import IdleCollector


class FakeGc:
    """The ``gc`` functions the collector calls, recorded."""

    def __init__(self) -> None:
        self.threshold = (700, 10, 10)
        self.calls: list[str] = []
        self.enabled = True
        self.elapsed = 0.0
        self.pause_s = 0.0  # how long each collection takes on the fake timer
        self.found = 1  # the unreachable objects each collection finds

    def get_threshold(self):
        return self.threshold

    def set_threshold(self, *t):
        self.threshold = t

    def isenabled(self):
        return self.enabled

    def collect(self, generation=2):
        self.calls.append("collect" if generation == 2 else f"young{generation}")
        self.elapsed += self.pause_s
        return self.found

    def freeze(self):
        self.calls.append("freeze")

    def unfreeze(self):
        self.calls.append("unfreeze")


def make():
    now = [1000.0]
    fake = FakeGc()
    c = IdleCollector(clock=lambda: now[0], collector=fake, timer=lambda: fake.elapsed)  # type: ignore[arg-type]
    c.start()
    return c, fake, now


def test_start_takes_the_oldest_generation_over_and_stop_gives_it_back():
    c, fake, _ = make()
    assert fake.threshold == (700, 10, idle_gc.OUT_OF_REACH)
    c.start()  # idempotent: the saved thresholds stay the collector's own
    c.stop()
    assert fake.threshold == (700, 10, 10) and fake.calls == ["unfreeze"]


def test_a_second_collector_never_keeps_the_threshold_out_of_reach():
    c, fake, _ = make()
    other = IdleCollector(collector=fake)  # type: ignore[arg-type]
    other.start()  # while the first holds the collector
    c.stop()
    other.stop()
    assert fake.threshold[2] == 10


def test_collects_only_when_idle_and_due():
    c, fake, now = make()
    now[0] += idle_gc.EVERY_S - 1
    assert not c.tick()  # not due yet
    now[0] += 2
    c.touched()
    now[0] += idle_gc.IDLE_S / 2
    assert not c.tick() and fake.calls == []  # the operator is typing
    now[0] += idle_gc.IDLE_S
    assert c.tick() and fake.calls == ["collect", "freeze"]
    assert not c.tick()  # once per EVERY_S


def test_overdue_collects_while_typing_and_full_collections_unfreeze_first():
    c, fake, now = make()
    for _ in range(int(idle_gc.OVERDUE_S) + 1):  # a key every second for OVERDUE_S
        now[0] += 1
        c.touched()
        if c.tick():
            break
    assert fake.calls == ["collect", "freeze"]
    fake.calls.clear()
    now[0] = 1000.0 + idle_gc.FULL_EVERY_S + 1  # idle, and the full collection is due
    assert c.tick() and fake.calls == ["unfreeze", "collect", "freeze"]


def test_nothing_while_the_collector_is_paused_or_not_started():
    c, fake, now = make()
    fake.enabled = False  # the TUI's start pause (console/commands/tui.py)
    now[0] += idle_gc.OVERDUE_S + 1
    assert not c.tick()
    c.stop()
    fake.enabled = True
    assert not c.tick() and fake.calls == ["unfreeze"]
    c.freeze()  # stopped: no freeze either
    assert fake.calls == ["unfreeze"]


async def test_the_app_runs_it_and_restores_the_collector():
    from tests.ui_fakes import frozen_app

    before = gc.get_threshold()
    app = frozen_app()
    async with app.run_test(size=(120, 40)) as pilot:
        assert gc.get_threshold()[2] == idle_gc.OUT_OF_REACH
        last = app.idle_gc.last_input
        await pilot.press("down")
        assert app.idle_gc.last_input > last
    assert gc.get_threshold() == before


def test_paced_young_collections_shorten_their_interval_while_they_pause_long_and_lengthen_it_while_short():
    c, fake, _ = make()
    fake.pause_s = 0.010  # 10 ms: over the aim, the interval halves down to its floor
    delays = [c.young() for _ in range(12)]
    assert delays[0] == idle_gc.YOUNG_MAX_S / 2 and min(delays) == idle_gc.YOUNG_MIN_S
    assert all(b <= a for a, b in zip(delays, delays[1:]))
    fake.pause_s = idle_gc.YOUNG_PAUSE_MS / 2 / 1000  # within the aim: the interval stays
    assert c.young() == idle_gc.YOUNG_MIN_S
    fake.pause_s = 0.0001  # an idle console: back to one a second, never beyond
    delays = [c.young() for _ in range(40)]
    assert delays[-1] == idle_gc.YOUNG_MAX_S
    assert set(x for x in fake.calls if x.startswith("young")) == {"young1"}  # both young generations each time


def test_while_collections_find_no_garbage_one_tick_in_n_collects_and_the_others_freeze():
    c, fake, _ = make()
    fake.found = 0
    c.young()  # finds nothing
    for _ in range(3 * idle_gc.YOUNG_SAMPLE_EVERY):
        c.young()
    young = [x for x in fake.calls if x in ("young1", "freeze")]
    assert young[0] == "young1" and young.count("young1") == 4 and c.young_frozen == young.count("freeze") == 21
    fake.found = 5  # garbage again: the sampled collection sees it, and every tick collects until one finds none
    fake.calls.clear()
    for _ in range(idle_gc.YOUNG_SAMPLE_EVERY + 3):
        c.young()
    assert fake.calls[fake.calls.index("young1"):] == ["young1"] * (fake.calls.count("young1"))
    assert fake.calls.count("young1") >= 3


def test_no_paced_collection_while_the_collector_is_not_started_or_disabled():
    fake = FakeGc()
    c = IdleCollector(collector=fake)  # type: ignore[arg-type]
    assert c.young() == idle_gc.YOUNG_MAX_S and fake.calls == []
    c.start()
    fake.enabled = False
    assert c.young() == idle_gc.YOUNG_MAX_S and fake.calls == []


async def test_pacing_runs_on_the_loop_until_stopped():
    import asyncio

    c, fake, _ = make()
    c.young_every = idle_gc.YOUNG_MIN_S
    c.pace_young(asyncio.get_running_loop())
    c.pace_young(asyncio.get_running_loop())  # idempotent: one timer
    await asyncio.sleep(0.2)
    c.stop()
    n = sum(x.startswith("young") for x in fake.calls)
    await asyncio.sleep(0.1)
    assert 2 <= n == sum(x.startswith("young") for x in fake.calls)  # ran, and stopped with the collector
