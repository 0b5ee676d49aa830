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
"""

from __future__ import annotations

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
OUT_OF_REACH = 10**9
"""The oldest generation's threshold while the collector is active: never reached by gen-1 collections."""


class IdleCollector:
    """Runs the oldest generation's collections when the UI is idle (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, collector: ModuleType = gc) -> None:
        self.clock = clock
        self.gc = collector
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
        """Give the collector its own thresholds back and unfreeze the heap."""
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
