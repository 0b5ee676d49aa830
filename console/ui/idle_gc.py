"""The cyclic garbage collector's full collections, moved to moments when the operator is not typing.

At 512 hosts the heap holds millions of long-lived objects (widgets, styles, render caches, the fleet table's
rows); CPython's automatic full (oldest-generation) collection walks all of them that are not frozen: 300-450 ms
pauses that landed on keypresses (bench/fleet_keys.py reports the collections inside each sample). So:

* the oldest generation is never collected automatically (its threshold is set out of reach; the young
  generations still are, they cost little);
* once a second the app asks :meth:`IdleCollector.tick`: after :data:`IDLE_S` without input, at most every
  :data:`EVERY_S`, it collects and freezes what survived, so the next collection walks only what is newer;
* every :data:`FULL_EVERY_S` (idle too) it unfreezes first, so cyclic garbage among frozen objects is reclaimed;
* an operator who never pauses still gets a collection after :data:`OVERDUE_S` (memory stays bounded).

The young generations are paced too (:meth:`IdleCollector.young`, on a loop timer). CPython starts a young collection
when its allocation count (allocations less deallocations of tracked objects) passes 700, and a deallocation of an
*old* object counts down too: a fleet's console frees the previous sample of each host (old by then) as it takes
the next, so the count stays low while the young generation fills with the new samples' live objects. At 512 hosts a
young collection then walked some 90,000 live objects: 30-70 ms pauses, the only callbacks over 50 ms in the fleet
benchmark (bench/b_fleet.py reports the collections inside each slow callback). Paced collections keep the young
generations to what a short interval allocates, so each pause is small: the interval halves while a collection takes
over :data:`YOUNG_PAUSE_MS` and grows back while it takes under a quarter of it, between :data:`YOUNG_MIN_S` and
:data:`YOUNG_MAX_S` (an idle console wakes once a second for it). Each paced collection is of both young generations
(``gc.collect(1)``): what survives it goes straight to the oldest, so a sample's objects (alive about one interval
of the host's, longer than the pacing's) are walked once, not once in each young generation.

Walking them once is still most of the collector's cost (~9 % of the console's CPU at 512 hosts), and a fleet's
samples are acyclic: those collections find no garbage at all (bench/b_fleet.py reports the cyclic garbage found,
0 objects/s). So while the paced collections find nothing, only one paced tick in :data:`YOUNG_SAMPLE_EVERY`
collects (what is newer than the last tick: a sample of the garbage being made) and the others freeze the young
generations instead, which walks nothing. As soon as a sampled collection finds garbage, every tick collects again
until one finds none. What a freeze hides from the collector is reclaimed by the unfreezing collection every
:data:`FULL_EVERY_S`; refcounting frees it all as usual, and a freeze only delays the reclaim of cycles made while the
sampled collections found none.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from types import ModuleType

IDLE_S = 1.0
"""Seconds without a key or mouse press before a collection may run."""
EVERY_S = 30.0
"""At most one collection this often."""
FULL_EVERY_S = 600.0
"""A collection over the frozen heap too (unfreeze first) this often."""
OVERDUE_S = 300.0
"""A collection runs after this long even while the operator keeps typing."""
YOUNG_MIN_S = 0.01
"""The young generation is collected at most this often (seconds)."""
YOUNG_MAX_S = 1.0
"""... and at least this often."""
YOUNG_PAUSE_MS = 4.0
"""The pause a paced young collection aims under (ms)."""
YOUNG_SAMPLE_EVERY = 8
"""While paced collections find no garbage, one paced tick in this many collects and the others freeze."""
OUT_OF_REACH = 10**9
"""The oldest generation's threshold while the collector is active: never reached by gen-1 collections."""


class IdleCollector:
    """Runs the oldest generation's collections when the UI is idle (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, collector: ModuleType = gc,
                 timer: Callable[[], float] = time.perf_counter, sample_every: int = YOUNG_SAMPLE_EVERY) -> None:
        self.clock = clock
        self.sample_every = max(1, sample_every)
        """:data:`YOUNG_SAMPLE_EVERY` (1: every paced tick collects, none freezes)."""
        self.gc = collector
        self.timer = timer
        self.young_every = YOUNG_MAX_S
        """Seconds until the next paced young collection (adapted to its pauses, see the module docstring)."""
        self.young_count = 0
        self.young_frozen = 0
        """Paced ticks that froze the young generations instead of collecting them (nothing found before)."""
        self._barren = False
        self._young_handle: asyncio.TimerHandle | None = None
        now = clock()
        self.last_input = now
        self.last_collect = now
        self.last_full = now
        self.saved: tuple[int, int, int] | None = None

    def start(self) -> None:
        """Take the oldest generation's automatic collections over (idempotent)."""
        if self.saved is None:
            young0, young1, oldest = self.gc.get_threshold()
            if oldest == OUT_OF_REACH:  # another app of this process holds it: CPython's default is the collector's own
                oldest = 10
            self.saved = (young0, young1, oldest)
            self.gc.set_threshold(young0, young1, OUT_OF_REACH)

    def stop(self) -> None:
        """Give the collector its own thresholds back and unfreeze the heap; the young pacing stops."""
        if self._young_handle is not None:
            self._young_handle.cancel()
            self._young_handle = None
        if self.saved is not None:
            self.gc.set_threshold(*self.saved)
            self.saved = None
            self.gc.unfreeze()

    def touched(self) -> None:
        """The operator pressed a key or a mouse button."""
        self.last_input = self.clock()

    def freeze(self) -> None:
        """Freeze what exists now (cheap: no walk), e.g. once new panels are mounted."""
        if self.saved is not None:
            self.gc.freeze()

    def tick(self) -> bool:
        """Collect now if due (see the module docstring); True when a collection ran."""
        if self.saved is None or not self.gc.isenabled():
            return False
        now = self.clock()
        since = now - self.last_collect
        idle = now - self.last_input >= IDLE_S
        if not ((idle and since >= EVERY_S) or since >= OVERDUE_S):
            return False
        if now - self.last_full >= FULL_EVERY_S:
            self.gc.unfreeze()
            self.last_full = now
        self.gc.collect()
        self.gc.freeze()
        self.last_collect = self.clock()
        return True

    def young(self) -> float:
        """One paced tick: a collection of the young generations, or their freeze while collections find nothing (see
        the module docstring); returns the seconds until the next, adapted to how long the last collection took.
        Nothing while the collector is not started or the garbage collector is disabled."""
        if self.saved is None or not self.gc.isenabled():
            return YOUNG_MAX_S
        self.young_count += 1
        if self._barren and self.young_count % self.sample_every:
            self.gc.freeze()
            self.young_frozen += 1
            return self.young_every
        t = self.timer()
        found = self.gc.collect(1)
        took_ms = (self.timer() - t) * 1000
        self._barren = not found
        if took_ms > YOUNG_PAUSE_MS:
            self.young_every = max(YOUNG_MIN_S, self.young_every / 2)
        elif took_ms < YOUNG_PAUSE_MS / 4:
            self.young_every = min(YOUNG_MAX_S, self.young_every * 1.5)
        return self.young_every

    def pace_young(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run :meth:`young` on ``loop``'s timer until :meth:`stop` (idempotent)."""
        if self._young_handle is not None:
            return

        def fire() -> None:
            self._young_handle = loop.call_later(self.young(), fire)
        self._young_handle = loop.call_later(self.young_every, fire)
